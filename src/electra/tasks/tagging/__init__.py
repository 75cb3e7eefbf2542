"""A task family in one place: one tag per word (NER, POS).

    head.py   the head (a dense layer on each word's first piece), loss, scores, export
    data.py   CoNLL-U, CoNLL and JSONL readers (``--tag-column``), tag maps, scores
"""
