"""A task family in one place: multiple choice (COPA, any N-choice JSONL).

    head.py   the head (one score per choice, a softmax over them), loss, export
    data.py   COPA's and generic choice JSONL, the (context, choice) pairs encoded
"""
