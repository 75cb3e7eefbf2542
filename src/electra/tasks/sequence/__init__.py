"""A task family in one place: sequence classification and regression.

    head.py   the head (ELECTRA's classifier on [CLS]), its loss, scores, export
    data.py   GLUE's nine tasks as distributed: files, labels, metrics, submission files
              (custom CSV/TSV/JSONL files are ``electra.data.examples``', shared)
"""
