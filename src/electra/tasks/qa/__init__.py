"""A task family in one place: extractive question answering (SQuAD 1.1 and 2.0).

    head.py   the head (a start and an end logit a token), loss, answers, export
    data.py   SQuAD's JSON, windows (``doc_stride``), answer decoding, EM and F1
"""
