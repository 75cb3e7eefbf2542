"""Rerankers (cross-encoders): ``--task rerank`` scores a (query, document) pair read together,
``[CLS] query [SEP] document [SEP]``, with one logit from [CLS] (the sequence head's dense ->
GELU -> dense), where RTD bodies are strongest (DeBERTaV3's cross-encoders).

Losses (``--set rerank_loss=``): ``listwise``, cross-entropy of the softmax over a query's
positive and its negatives (sentence-transformers' CrossEntropyLoss); ``bce``, each pair's
sigmoid against its target, 1/0 or a probability (BinaryCrossEntropyLoss); ``mse``, each
pair's logit against a teacher's score (MSELoss: distillation); ``auto`` (the default): mse
where the file gives teacher scores, listwise for groups, bce for scored pairs in [0, 1] and
mse otherwise. A group's loss is its documents' mean (bce, mse).

Dev: each query's documents ranked by score (a groups row, or a query's scored pairs):
MRR@10 of its first relevant one (a target above 0), nDCG@10 and Recall@1. `electra predict`
scores pairs; `electra evaluate --task rerank --data BEIR|SQuAD` reranks a first stage's
top k (:mod:`electra.evaluation.rerank`). Exports as transformers'
``...ForSequenceClassification`` with one label and the activation sentence-transformers'
``CrossEncoder`` applies (sigmoid; none for a model distilled with mse), so its
``predict`` gives the scores ours does.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from electra.config import FamilySettings, FinetuneConfig, ModelConfig
from electra.data.examples import _records, header_of
from electra.errors import UserError
from electra.model.kernels import Kernels, Layout
from electra.tasks.base import Head, TaskData, logits
from electra.tasks.rerank.data import (
    DOCUMENTS,
    QUERIES,
    Group,
    by_query,
    encode_groups,
    encode_pairs,
    read_groups,
)
from electra.tasks.sequence.head import Sequence, SequenceClassifier

if TYPE_CHECKING:
    from tokenizers import Tokenizer  # (the types only: the readers stay light)

LOSSES = ("auto", "listwise", "bce", "mse")
SIGMOID, IDENTITY = "torch.nn.modules.activation.Sigmoid", "torch.nn.modules.linear.Identity"


class Reranker(SequenceClassifier):
    """Encoder + the sequence head with one logit: (N, T) pairs -> (N, 1) logits; (B, K, T)
    groups -> (B, K). Keys are the sequence classifier's (transformers'
    ...ForSequenceClassification with ``num_labels=1``)."""

    def __init__(self, cfg: ModelConfig, kernels: Kernels | None = None) -> None:
        super().__init__(cfg, 1, kernels)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None,
                sequence_ids: torch.Tensor | None = None,
                layout: Layout | None = None) -> torch.Tensor:
        if input_ids.dim() == 2:
            return super().forward(input_ids, attention_mask, token_type_ids, sequence_ids,
                                   layout)
        B, K, T = input_ids.shape
        if attention_mask is not None:  # the groups' all-padding columns dropped
            T = max(1, int(attention_mask.sum(-1).max()))

        def flat(x: torch.Tensor | None) -> torch.Tensor | None:
            return None if x is None else x[..., :T].reshape(B * K, T)

        ids = input_ids[..., :T].reshape(B * K, T)
        return super().forward(ids, flat(attention_mask), flat(token_type_ids)).view(B, K)


@dataclass(frozen=True)
class RerankSettings(FamilySettings):
    """A cross-encoder's loss (``--task rerank``)."""

    RANGES: ClassVar[dict[str, str | tuple[str, ...]]] = {"rerank_loss": LOSSES}
    rerank_loss: str = "auto"
    """listwise (softmax over a positive and its negatives), bce (each pair against its
    target), mse (each pair's logit against a teacher's score), or auto: mse where the file
    has teacher scores, listwise for groups, bce for scored pairs in [0, 1], else mse."""


def loss_kind(data: TaskData, given: str) -> str:
    """The loss a fine-tune of ``data`` uses (``given``: rerank_loss), checked against what
    its training file holds."""
    groups: list[Group] = data.train
    listed = bool(groups) and groups[0].listed
    teacher = listed and groups[0].teacher is not None
    in_01 = all(0.0 <= t <= 1.0 for g in groups for t in g.targets)
    kind = given
    if given == "auto":
        kind = "mse" if teacher else "listwise" if listed else "bce" if in_01 else "mse"
    if kind == "listwise" and not listed:
        raise UserError("rerank_loss=listwise ranks a query's positive above its negatives, "
                        "and the training file holds scored pairs; give groups "
                        "(query,positive,negative_1,...) or use rerank_loss=bce or mse")
    if kind == "bce" and not in_01:
        bad = next(t for g in groups for t in g.targets if not 0.0 <= t <= 1.0)
        raise UserError(f"rerank_loss=bce reads each pair's target as a probability, and the "
                        f"training file has {bad:g}; give targets in [0, 1] or use "
                        f"rerank_loss=mse (a teacher's scores)")
    if kind == "mse" and listed and not teacher:
        raise UserError("rerank_loss=mse learns a teacher's scores, and the training groups "
                        "have none (a JSONL list \"scores\": the positive's and each "
                        "negative's); use rerank_loss=listwise or bce")
    return kind


def ranking_metrics(scores: list[np.ndarray], relevant: list[np.ndarray]) -> dict[str, float]:
    """MRR@10, nDCG@10 (binary gains) and Recall@1 over queries, each query's documents ranked
    by score (a tie counts against the relevant document: it ranks after every document
    scoring as high); a query with no relevant document is left out."""
    mrr, ndcg, first = [], [], []
    for s, rel in zip(scores, relevant, strict=True):
        if not rel.any():
            continue
        # rank of each document: 1 + those scoring strictly higher, ties against relevant
        rank = np.array([1 + int((s > x).sum()) + (int((s == x).sum()) - 1 if r else 0)
                         for x, r in zip(s, rel, strict=True)])
        best = int(rank[rel].min())
        mrr.append(1.0 / best if best <= 10 else 0.0)
        first.append(float(best == 1))
        gains = sum(1.0 / math.log2(r + 1) for r in rank[rel] if r <= 10)
        ideal = sum(1.0 / math.log2(i + 2) for i in range(min(int(rel.sum()), 10)))
        ndcg.append(gains / ideal)
    if not mrr:
        raise UserError("rerank: no dev query has a relevant document (a positive, or a "
                        "target above 0); give each at least one")
    return {"mrr@10": float(np.mean(mrr)), "ndcg@10": float(np.mean(ndcg)),
            "recall@1": float(np.mean(first))}


class Rerank(Head):
    name = "rerank"
    Settings = RerankSettings
    tasks = ("rerank",)
    help = "rerank (a cross-encoder: groups or scored pairs)"
    defaults: ClassVar[dict[str, Any]] = {"max_length": 256}
    hf_part = Sequence.hf_part  # transformers' ...ForSequenceClassification, one label
    hf_class = Sequence.hf_class
    hf_keys = Sequence.hf_keys
    pipeline_tag = "text-ranking"

    def load(self, task: str, train: str | None = None, dev: str | None = None,
             text_columns: str | None = None, label_column: str | None = None,
             predict: str | None = None, split: str | None = None, **_: Any) -> TaskData:
        if predict:
            raise UserError("--predict test writes benchmark submission files; a reranker "
                            "is scored with `electra evaluate --task rerank --dev FILE` or "
                            "--data BEIR_FOLDER|SQUAD.json")
        if not dev or not (train or split is not None):
            raise UserError("--task rerank needs --train FILE and --dev FILE (groups "
                            "query,positive,negative_1,... or scored pairs "
                            "query,document,label: CSV, TSV, JSONL or Parquet)")
        columns = None if text_columns in (None, "text") else text_columns  # (evaluate's)
        rows = (read_groups(train, columns, label_column) if train and split is None
                else [])
        dev_rows = by_query(read_groups(dev, columns, label_column))
        return TaskData(task, rows, {"dev": dev_rows}, ("mrr@10", "ndcg@10", "recall@1"),
                        False, {}, head=self)

    def prepare(self, data: TaskData, cfg: FinetuneConfig) -> TaskData:
        """The loss chosen (``regression``: mse, the scores a teacher's)."""
        return data.replace(regression=loss_kind(data, self.settings(cfg).rerank_loss)
                            == "mse")

    def for_model(self, data: TaskData, meta: dict[str, Any], cfg: FinetuneConfig,
                  where: str) -> TaskData:
        return data.replace(regression=bool(meta.get("regression")))

    def read_inputs(self, path: Path, meta: dict[str, Any]) -> list[Any]:
        """(query, document) pairs: a CSV, TSV, JSONL or Parquet file's query and document
        columns (as training names them: query/anchor/question, document/passage/text)."""
        if path.suffix not in (".csv", ".tsv", ".tab", ".jsonl", ".parquet"):
            raise UserError(f"--input {path}: a reranker scores (query, document) pairs; "
                            f"give a CSV, TSV, JSONL or Parquet file with query and document "
                            f"columns")
        rows = _records(path)
        header = header_of(rows)
        q = next((c for c in QUERIES if c in header), None)
        d = next((c for c in ("positive", *DOCUMENTS) if c in header), None)
        if q is None or d is None:
            raise UserError(f"--input {path}: no query and document columns (found "
                            f"{', '.join(map(repr, header))}); name them query and document")
        return [(str(r[q]), str(r[d])) for r in rows]

    def build(self, cfg: ModelConfig, labels: dict[str, int], regression: bool,
              kernels: Kernels | None = None, settings: dict[str, Any] | None = None
              ) -> nn.Module:
        return Reranker(cfg, kernels)

    def encode(self, tok: Tokenizer, examples: list[Any], data: TaskData,
               cfg: FinetuneConfig) -> dict[str, torch.Tensor]:
        kind = "mse" if data.regression else loss_kind(data, self.settings(cfg).rerank_loss)
        teacher = bool(examples) and examples[0].teacher is not None
        target = ("index" if kind == "listwise" else "teacher" if kind == "mse" and teacher
                  else "targets")
        return encode_groups(tok, examples, cfg.max_length or 256, target)

    def loss(self, logits: torch.Tensor, labels: torch.Tensor,
             data: TaskData) -> torch.Tensor:
        """Summed over groups: listwise cross-entropy ((B,) labels: the positive's index), or
        each group's mean BCE ((B, K) targets) or mean squared error (``regression``)."""
        logits = logits.float()
        if labels.dtype == torch.long:
            return F.cross_entropy(logits, labels, reduction="sum")
        if data.regression:
            return F.mse_loss(logits, labels, reduction="none").mean(-1).sum()
        return F.binary_cross_entropy_with_logits(logits, labels,
                                                  reduction="none").mean(-1).sum()

    def pair_scores(self, model: nn.Module, tok: Tokenizer, pairs: list[tuple[str, str]],
                    cfg: FinetuneConfig, regression: bool, batch_size: int = 128
                    ) -> np.ndarray:
        """Each (query, document) pair's score: its logit's sigmoid (its logit where the
        model learned a teacher's scores), as the exported CrossEncoder's ``predict``."""
        out = logits(model, encode_pairs(tok, pairs, cfg.max_length or 256), cfg.precision,
                     batch_size).squeeze(-1)
        return (out if regression else out.sigmoid()).numpy()

    def predict(self, model: nn.Module, tok: Tokenizer, examples: list[Any], data: TaskData,
                cfg: FinetuneConfig) -> tuple[Any, Any]:
        """Each dev query's documents' scores, and which are relevant (a target above 0)."""
        flat = self.pair_scores(model, tok, [(g.query, d) for g in examples for d in g.docs],
                                cfg, data.regression)
        cuts = np.cumsum([0, *(len(g.docs) for g in examples)])
        return ([flat[a:b] for a, b in itertools.pairwise(cuts)],
                [np.asarray(g.targets) > 0 for g in examples])

    def score(self, data: TaskData, preds: Any, labels: Any) -> dict[str, float]:
        return ranking_metrics(preds, labels)

    def records(self, model: nn.Module, tok: Tokenizer, items: list[Any], data: TaskData,
                cfg: FinetuneConfig) -> list[dict[str, Any]]:
        out = self.pair_scores(model, tok, list(items), cfg, data.regression, len(items))
        return [{"score": round(float(s), 6)} for s in out]

    def meta(self, data: TaskData) -> dict[str, Any]:
        return {"head": self.name}

    def hf_labels(self, meta: dict[str, Any]) -> dict[str, Any]:
        """One score, and the activation sentence-transformers' CrossEncoder applies to it."""
        from importlib.metadata import PackageNotFoundError, version

        try:
            st = version("sentence-transformers")
        except PackageNotFoundError:
            st = "6.0.0"
        return {"id2label": {0: "LABEL_0"}, "label2id": {"LABEL_0": 0},
                "sentence_transformers": {
                    "activation_fn": IDENTITY if meta.get("regression") else SIGMOID,
                    "version": st}}
