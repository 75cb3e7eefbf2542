"""A task family in one place: rerankers (cross-encoders).

    head.py   the head (one logit a (query, document) pair), its losses, scores, export
    data.py   groups (query, positive, negatives) and scored pairs, encoded as pairs
"""
