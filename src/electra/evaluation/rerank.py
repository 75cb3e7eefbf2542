"""Two-stage retrieval: a first stage (BM25, or any model's embeddings) finds each query's
``top_k`` documents in the whole corpus, and a reranker fine-tuned with ``--task rerank``
reorders them by its score of each (query, document) pair. Both stages are scored as
`evaluate --task retrieval` scores a run (:func:`electra.evaluation.retrieval.score_run`:
nDCG@10, MRR@10, Recall@100), side by side; the reranked list holds the first stage's
``top_k`` documents, so its Recall@100 is the first stage's Recall@top_k. ``fusion``: the
two stages' scores combined (:func:`fused`), scored at each weight asked for."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, ClassVar

from electra.data.retrieval import RetrievalSet
from electra.data.tokenizer import load_tokenizer
from electra.errors import UserError
from electra.evaluation.base import Evaluator
from electra.evaluation.bm25 import BM25
from electra.evaluation.encoder import Encoder
from electra.evaluation.retrieval import Retrieval, ranked, score_run
from electra.io.progress import reporting
from electra.runtime import placed
from electra.saved.folders import load_classifier
from electra.saved.models import fine_tuned
from electra.tasks.base import head_of
from electra.tasks.registry import finetune_config
from electra.tasks.rerank.head import Rerank as RerankHead


def first_stage(found: RetrievalSet, by: str, k: int, batch_size: int = 32,
                precision: str = "fp32", device: str = "auto",
                progress: bool = False) -> dict[str, dict[str, float]]:
    """Each query's ``k`` best documents by ``by``: ``bm25``, or a model's embeddings (any
    model `evaluate --task retrieval` reads, with its own pooling and prompts)."""
    if by == "bm25":
        return BM25(found.corpus).search(found.queries, k)
    enc = Encoder(by, precision=precision, device=device)
    doc_ids, query_ids = list(found.corpus), list(found.queries)
    with reporting(len(doc_ids) + len(query_ids), "rerank: the first stage's embeddings",
                   "text", progress):
        docs = enc.encode([found.corpus[d] for d in doc_ids], batch_size,
                          prompt_name=enc.prompt_for("document", "passage", "corpus"))
        queries = enc.encode([found.queries[q] for q in query_ids], batch_size,
                             prompt_name=enc.prompt_for("query"))
    return ranked(queries, docs, query_ids, doc_ids, k)


class Rerank(Retrieval):
    name = "rerank"
    primary_metric = "ndcg@10"
    help = ("rerank: a reranker (--task rerank) on a BEIR folder or a SQuAD .json as --data, "
            "over a first stage's top k (--first-stage bm25 or an embedding model)")
    spec_keys: ClassVar[frozenset[str]] = frozenset({"data", "split", "first_stage",
                                                     "top_k"})
    options: ClassVar[frozenset[str]] = frozenset({"first_stage", "top_k", "fusion"})
    any_model = False  # a reranker from `finetune --task rerank`

    def check(self) -> None:
        if not self.data or self.dev:
            raise UserError("--task rerank reorders a first stage's documents on --data: a "
                            "BEIR folder (corpus.jsonl, queries.jsonl, qrels/SPLIT.tsv) or a "
                            "SQuAD .json file (a --dev file of groups or scored pairs scores "
                            "a reranker alone: give --dev without --data)")
        k = self.top_k
        if k <= 0:
            raise UserError(f"--top-k {k}: give how many of the first stage's documents to "
                            f"rerank, k >= 1 (e.g. 100)")
        _ = self.fusion  # (a bad weight refused before any file is read)

    @property
    def fusion(self) -> list[float]:
        """The reranker's weights of the fused scores asked for (``--fusion``)."""
        given = self.given.get("fusion")
        if given is None:
            return []
        items = given.split(",") if isinstance(given, str) else list(given)
        try:
            weights = [float(w) for w in items]
        except (TypeError, ValueError):
            weights = []
        if not weights or not all(0.0 <= w <= 1.0 for w in weights):
            raise UserError(f"--fusion {given}: give the reranker's weight W in [0, 1] (or "
                            f"several, e.g. 0.2,0.5,0.8): each query's list is scored by "
                            f"(1 - W) x the first stage + W x the reranker")
        return weights

    @property
    def top_k(self) -> int:
        k = self.given.get("top_k")
        return 100 if k is None else int(k)

    @property
    def by(self) -> str:
        return str(self.given.get("first_stage") or "bm25")

    @classmethod
    def from_spec(cls, opts: dict[str, str], glue: str | None, spec: str) -> Evaluator:
        if "data" not in opts:
            raise UserError(f"--tasks {spec}: rerank needs data=PATH, a BEIR folder or a "
                            f"SQuAD .json")
        try:
            top_k = int(opts.get("top_k", 100))
        except ValueError:
            raise UserError(f"--tasks {spec}: top_k={opts['top_k']!r} is not a whole "
                            f"number") from None
        return cls(data=str(opts["data"]), split=str(opts.get("split", "test")),
                   first_stage=opts.get("first_stage"), top_k=top_k)

    def __call__(self, model: str | Path, pooling: str | None = None, batch_size: int = 32,
                 precision: str = "fp32", device: str = "auto",
                 progress: bool = False) -> dict[str, Any]:
        """Each stage's nDCG@10, MRR@10, Recall@100, and how many queries, documents and
        pairs were scored."""
        reranker, meta = _reranker(model)
        found = self._set()
        first = first_stage(found, self.by, self.top_k, batch_size, precision, device,
                            progress)
        pairs = [(q, d) for q, docs in first.items() for d in docs]
        if not pairs:
            raise UserError(f"--first-stage {self.by}: no query has any document in its "
                            f"first stage (no query shares a word with a document); nothing "
                            f"to rerank")
        cfg = dataclasses.replace(finetune_config(meta["finetune"], f"{model}/config.json"),
                                  precision=precision)
        reranker = placed(reranker, device)
        with reporting(len(pairs), f"rerank: scoring the first stage's top {self.top_k}",
                       "pair", progress):
            scores = RerankHead().pair_scores(reranker, load_tokenizer(model),
                                      [(found.queries[q], found.corpus[d]) for q, d in pairs],
                                      cfg, bool(meta.get("regression")), batch_size)
        run: dict[str, dict[str, float]] = {}
        for (q, d), s in zip(pairs, scores.tolist(), strict=True):
            run.setdefault(q, {})[d] = s
        out = {"first_stage": {"by": self.by, **score_run(found.qrels, first)},
               "reranked": score_run(found.qrels, run), "top_k": self.top_k,
               "queries": len(found.queries), "documents": len(found.corpus),
               "pairs": len(pairs)}
        if self.fusion:
            out["fused"] = [{"weight": w, **score_run(found.qrels, fused(first, run, w))}
                            for w in self.fusion]
        return out

    def printed(self, result: dict[str, Any]) -> dict[str, Any]:
        return {"rerank": result}

    def primary(self, result: dict[str, Any]) -> float:
        return float(result["reranked"][self.primary_metric])


def fused(first: dict[str, dict[str, float]], reranked: dict[str, dict[str, float]],
          weight: float) -> dict[str, dict[str, float]]:
    """Each query's documents scored by ``(1 - weight) x`` the first stage's score ``+
    weight x`` the reranker's, each min-max normalised over the query's documents (a
    convex combination, as hybrid retrieval fuses two rankers' scores; a query whose
    scores are all equal normalises to 0)."""

    def scaled(scores: dict[str, float]) -> dict[str, float]:
        lo, hi = min(scores.values()), max(scores.values())
        return {d: (s - lo) / (hi - lo) if hi > lo else 0.0 for d, s in scores.items()}

    out: dict[str, dict[str, float]] = {}
    for q, scores in reranked.items():
        a, b = scaled(first[q]), scaled(scores)
        out[q] = {d: (1.0 - weight) * a[d] + weight * b[d] for d in scores}
    return out


def _reranker(model: str | Path) -> tuple[Any, dict[str, Any]]:
    """A reranker fine-tuned with ``--task rerank`` and its config.json (another model: one
    line saying what it is)."""
    if not fine_tuned(model):
        raise UserError(f"--model {model}: not a fine-tuned reranker; --task rerank scores a "
                        f"model from `electra finetune --task rerank` (OUT/seed-N)")
    module, meta = load_classifier(model)
    if not isinstance(head_of(meta), RerankHead):
        raise UserError(f"--model {model} was fine-tuned on {meta.get('task')}, not rerank; "
                        f"give a model from `electra finetune --task rerank`")
    return module, meta


def rerank(model: str | Path, data: str | Path, split: str = "test", first_stage: str = "bm25",
           top_k: int = 100, batch_size: int = 32, precision: str = "fp32",
           device: str = "auto", progress: bool = False,
           fusion: list[float] | None = None) -> dict[str, Any]:
    """:class:`Rerank` of the reranker ``model`` on ``data`` over ``first_stage``'s top
    ``top_k`` (the Python API's ``electra.rerank``); ``fusion``: the reranker's weights
    of the two stages' fused scores to report too."""
    ev = Rerank(data, split=split, first_stage=first_stage, top_k=top_k, fusion=fusion)
    ev.check()
    return ev(model, None, batch_size, precision, device, progress)
