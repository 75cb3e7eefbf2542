"""A task family in one place: SuperGLUE's pair tasks (BoolQ, CB, RTE, WiC, WSC, MultiRC,
ReCoRD, AX-b, AX-g).

    head.py   the head (the sequence classifier over each task's rows), scores, export
    data.py   each task's JSONL as rows, ReCoRD's windows, grouped scores, submissions
"""
