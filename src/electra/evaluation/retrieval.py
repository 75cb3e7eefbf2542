"""Dense retrieval: every query of a retrieval set against its whole corpus by the cosine of
their embeddings (``data``: a BEIR folder and its ``split``, or a SQuAD file's questions
against its paragraphs: :mod:`electra.data.retrieval`), scored as trec_eval scores a run:
nDCG@10 (the primary metric), MRR@10, Recall@100; BM25's scores on the same set beside them
(:mod:`electra.evaluation.bm25`), the baseline a model's embeddings are read against."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from electra.data.retrieval import RetrievalSet, ranked, read_retrieval, score_run
from electra.errors import UserError
from electra.evaluation.base import Evaluator
from electra.evaluation.bm25 import BM25
from electra.evaluation.encoder import Encoder
from electra.io import remote
from electra.io.progress import reporting


class Retrieval(Evaluator):
    name = "retrieval"
    primary_metric = "ndcg@10"
    help = "retrieval: any model's embeddings on a BEIR folder or a SQuAD .json as --data"
    spec_keys: ClassVar[frozenset[str]] = frozenset({"data", "split"})
    options: ClassVar[frozenset[str]] = frozenset({"layer", "generator", "truncate_dim"})

    def check(self) -> None:
        if not self.data or self.dev:
            raise UserError("--task retrieval reads --data: a BEIR folder (corpus.jsonl, "
                            "queries.jsonl, qrels/SPLIT.tsv) or a SQuAD .json file")

    @classmethod
    def from_spec(cls, opts: dict[str, str], glue: str | None, spec: str) -> Evaluator:
        if "data" not in opts:
            raise UserError(f"--tasks {spec}: retrieval needs data=PATH, a BEIR folder or a "
                            f"SQuAD .json (e.g. retrieval:data=squad/dev-v1.1.json)")
        return cls(data=str(opts["data"]), split=str(opts.get("split", "test")))

    _bm25: dict[str, float] | None = None

    def _set(self) -> RetrievalSet:
        return read_retrieval(remote.local(str(self.data), "--data"), self.split or "test")

    def read(self) -> None:
        self._set()

    def __call__(self, model: str | Path, pooling: str | None = None, batch_size: int = 32,
                 precision: str = "fp32", device: str = "auto",
                 progress: bool = False) -> dict[str, Any]:
        """nDCG@10, MRR@10, Recall@100, and how many queries and documents."""
        found = self._set()
        enc = Encoder(model, pooling, precision=precision, device=device, **self.encoding())
        doc_ids, query_ids = list(found.corpus), list(found.queries)
        with reporting(len(doc_ids) + len(query_ids), "retrieval: encoding the corpus and "
                       "the queries", "text", progress):
            docs = enc.encode([found.corpus[d] for d in doc_ids], batch_size,  # its prompts
                              prompt_name=enc.prompt_for("document", "passage", "corpus"))
            queries = enc.encode([found.queries[q] for q in query_ids], batch_size,
                                 prompt_name=enc.prompt_for("query"))
        scores = score_run(found.qrels, ranked(queries, docs, query_ids, doc_ids))
        return {**scores, "queries": len(query_ids), "documents": len(doc_ids),
                "bm25": self.baseline()}

    def baseline(self) -> dict[str, float]:
        """BM25's scores on the same set (the lexical baseline beside every model's; made
        once an evaluation)."""
        if self._bm25 is None:
            found = self._set()
            self._bm25 = score_run(found.qrels, BM25(found.corpus).search(found.queries))
        return self._bm25

    def printed(self, result: dict[str, Any]) -> dict[str, Any]:
        return {"retrieval": result}


def retrieval(model: str | Path, data: str | Path, split: str = "test",
              pooling: str | None = None, batch_size: int = 32,
              precision: str = "fp32", device: str = "auto",
              progress: bool = False) -> dict[str, Any]:
    """:class:`Retrieval` of ``model`` on ``data`` (the Python API's ``electra.retrieval``)."""
    return Retrieval(data, split=split)(model, pooling, batch_size, precision, device,
                                        progress)
