"""BM25 from ``bm25s`` (Lucene's variant, k1 = 1.5, b = 0.75, the library's defaults): the
lexical first stage and the baseline every retrieval evaluation reports beside a model's
scores. Texts are lower-cased word tokens (two characters or more) without English stop
words, as ``bm25s.tokenize`` makes them; no stemming."""

from __future__ import annotations

from typing import Any

from electra.errors import UserError


def _bm25s() -> Any:
    try:
        import bm25s
    except ImportError:
        raise UserError("BM25 needs bm25s: pip install 'electra[retrieval]' (or pip install "
                        "bm25s)") from None
    return bm25s


class BM25:
    """An index of ``corpus`` (document id -> text); :meth:`search` ranks documents for
    queries as pytrec_eval's run (query id -> {document id: score})."""

    def __init__(self, corpus: dict[str, str]) -> None:
        if not corpus:
            raise UserError("BM25: the corpus is empty; give documents to rank")
        bm25s = _bm25s()
        self.doc_ids = list(corpus)
        tokens = bm25s.tokenize([corpus[d] for d in self.doc_ids], stopwords="en",
                                show_progress=False)
        self.index = None  # no document holds a word: every query scores 0 everywhere
        if tokens.vocab:
            self.index = bm25s.BM25()
            self.index.index(tokens, show_progress=False)

    def search(self, queries: dict[str, str], k: int = 100) -> dict[str, dict[str, float]]:
        """Each query's ``k`` best documents by BM25 (fewer where fewer score above 0)."""
        if k <= 0:
            raise UserError(f"BM25: k={k}; give how many documents to keep, k >= 1")
        bm25s = _bm25s()
        query_ids = list(queries)
        if self.index is None:
            return {q: {} for q in query_ids}
        tokens = bm25s.tokenize([queries[q] for q in query_ids], stopwords="en",
                                show_progress=False)
        found, scores = self.index.retrieve(tokens, k=min(k, len(self.doc_ids)),
                                            show_progress=False)
        return {q: {self.doc_ids[int(d)]: float(s) for d, s in zip(row, srow, strict=True)
                    if s > 0}
                for q, row, srow in zip(query_ids, found, scores, strict=True)}
