"""BM25 from ``bm25s`` (Lucene's variant, k1 = 1.5, b = 0.75, the library's defaults): the
lexical first stage and the baseline every retrieval evaluation reports beside a model's
scores. Texts are lower-cased word tokens (two characters or more) without English stop
words, as ``bm25s.tokenize`` makes them; no stemming."""

from __future__ import annotations

from collections.abc import Iterator
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
    queries as pytrec_eval's run (query id -> {document id: score}). :meth:`streamed` builds
    one from chunks of (id, text), keeping the index and the ids alone (not the texts)."""

    def __init__(self, corpus: dict[str, str]) -> None:
        if not corpus:
            raise UserError("BM25: the corpus is empty; give documents to rank")
        self._build(iter([list(corpus.items())]))

    @classmethod
    def streamed(cls, chunks: Iterator[list[tuple[str, str]]]) -> BM25:
        """The index of the documents in ``chunks``, tokenized a chunk at a time."""
        index = cls.__new__(cls)
        index._build(chunks)
        if not index.doc_ids:
            raise UserError("BM25: the corpus is empty; give documents to rank")
        return index

    def _build(self, chunks: Iterator[list[tuple[str, str]]]) -> None:
        bm25s = _bm25s()
        from bm25s.tokenization import Tokenized, Tokenizer  # (with bm25s: installed)

        self.tokenizer = Tokenizer(stopwords="en")  # bm25s.tokenize's words, vocabulary
        self.doc_ids: list[str] = []
        ids: list[list[int]] = []
        for chunk in chunks:
            self.doc_ids += [d for d, _ in chunk]
            ids += self.tokenizer.tokenize([t for _, t in chunk], update_vocab=True,
                                           return_as="ids", show_progress=False)
        self.vocab = self.tokenizer.get_vocab_dict()
        self.at = {d: i for i, d in enumerate(self.doc_ids)}
        self.index = None  # no document holds a word: every query scores 0 everywhere
        if any(self.vocab):  # (a document without words holds the empty word "")
            self.index = bm25s.BM25()
            self.index.index(Tokenized(ids=ids, vocab=self.vocab), show_progress=False)

    def _queries(self, texts: list[str]) -> Any:
        from bm25s.tokenization import Tokenized  # (with bm25s: installed)

        ids = self.tokenizer.tokenize(texts, update_vocab=False, return_as="ids",
                                      show_progress=False)
        empty = self.vocab.get("")  # a query without known words matches no document
        return Tokenized(ids=[[i for i in q if i != empty] for q in ids], vocab=self.vocab)

    def search(self, queries: dict[str, str], k: int = 100) -> dict[str, dict[str, float]]:
        """Each query's ``k`` best documents by BM25 (fewer where fewer score above 0)."""
        if k <= 0:
            raise UserError(f"BM25: k={k}; give how many documents to keep, k >= 1")
        query_ids = list(queries)
        if self.index is None:
            return {q: {} for q in query_ids}
        found, scores = self.index.retrieve(self._queries([queries[q] for q in query_ids]),
                                            k=min(k, len(self.doc_ids)), show_progress=False)
        return {q: {self.doc_ids[int(d)]: float(s) for d, s in zip(row, srow, strict=True)
                    if s > 0}
                for q, row, srow in zip(query_ids, found, scores, strict=True)}

    def score(self, query: str, doc_id: str) -> float:
        """``query``'s BM25 score of the indexed document ``doc_id``."""
        if self.index is None:
            return 0.0
        words = self.tokenizer.tokenize([query], update_vocab=False, return_as="tuple",
                                        show_progress=False)
        inv = {i: w for w, i in self.vocab.items()}
        tokens = [inv[i] for i in words.ids[0] if inv.get(i)]
        if not tokens:
            return 0.0
        return float(self.index.get_scores(tokens)[self.at[doc_id]])
