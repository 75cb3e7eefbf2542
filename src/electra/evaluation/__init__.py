"""Scores of a model's sentence embeddings, one evaluator each (``base``), in a registry
(``registry``): STS (``sts``) and dense retrieval (``retrieval``), and the encoder they
share (``encoder``)."""
