"""Tagging: one tag per word (NER, POS), from CoNLL-U, CoNLL or JSONL files.

The head is a dense layer on every token, trained and read at each word's first piece; it is
scored with seqeval's entity F1 for BIO tags, else accuracy, and exports as transformers'
``ElectraForTokenClassification``. Reading and metrics are ``electra.tasks.tagging.data``'.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

from electra.config import FinetuneConfig, ModelConfig
from electra.errors import UserError
from electra.io.files import read_text
from electra.model import EncoderWithHead
from electra.model.kernels import Kernels
from electra.tasks.base import Head, TaskData, confusion, cross_entropy, logits
from electra.tasks.tagging.data import (
    IGNORE,
    Sentence,
    encode_tagged,
    read_tagged,
    score,
    tag_map,
    tagging_metrics,
    word_predictions,
)

if TYPE_CHECKING:
    from tokenizers import Tokenizer  # (the types only: the readers stay light)


class TokenClassifier(EncoderWithHead):
    """Encoder + dropout -> dense on every token (``num_labels`` logits each): a tagger. Keys
    map onto transformers' ElectraForTokenClassification (``classifier``)."""

    def __init__(self, cfg: ModelConfig, num_labels: int,
                 kernels: Kernels | None = None) -> None:
        super().__init__()
        self.num_labels = num_labels
        self.build_head(cfg, num_labels, kernels)  # ModernBERT's transform; ELECTRA's none

    def head(self, h: torch.Tensor) -> torch.Tensor:
        """Hidden states (B, T, H) -> logits (B, T, num_labels)."""
        if self.transform is not None:
            h = self.transform(h)
        return self.head_out(self.head_dropout(h))


class Tagging(Head):
    name = "tagging"
    tasks = ("tagging",)
    help = "tagging (NER, POS)"
    hf_part = "tagger"
    hf_class = "ElectraForTokenClassification"
    pipeline_tag = "token-classification"
    hf_keys = (("head_out.weight", "classifier.weight"), ("head_out.bias", "classifier.bias"))

    def load(self, task: str, train: str | None = None, dev: str | None = None,
             tag_column: str | None = None, predict: str | None = None,
             split: str | None = None, **_: Any) -> TaskData:
        if predict:
            raise UserError("--predict test writes GLUE submission files; for tagging score "
                            "your file with `electra evaluate --dev FILE`")
        evaluating = split is not None
        if not dev or not (train or evaluating):
            raise UserError("--task tagging needs --train FILE and --dev FILE (.conllu, CoNLL "
                            "or .jsonl {tokens, tags})")
        dev_sents = read_tagged(dev, tag_column)
        if evaluating:  # the model's tags decide the metrics
            return TaskData("tagging", [], {"dev": dev_sents}, (), False, head=self)
        train_sents = read_tagged(train, tag_column)  # type: ignore[arg-type]
        labels = tag_map(train_sents, dev_sents)
        return TaskData("tagging", train_sents, {"dev": dev_sents}, tagging_metrics(labels),
                        False, labels, head=self)

    def for_model(self, data: TaskData, meta: dict[str, Any], cfg: FinetuneConfig,
                  where: str) -> TaskData:
        """The model's tags: the metrics, and dev tags it cannot predict refused."""
        tag_map([Sentence([], list(meta["labels"]))], data.dev["dev"])
        return data.replace(labels=meta["labels"], metrics=tagging_metrics(meta["labels"]))

    def read_inputs(self, path: Path, meta: dict[str, Any]) -> list[Any]:
        if path.suffix in (".conllu", ".jsonl", ".conll", ".bio", ".tsv"):
            return read_tagged(path)

        return [Sentence(line.split(), None) for line in read_text(path, "--input").splitlines()
                if line.split()]

    def build(self, cfg: ModelConfig, labels: dict[str, int], regression: bool,
              kernels: Kernels | None = None, settings: dict[str, Any] | None = None
              ) -> nn.Module:
        return TokenClassifier(cfg, len(labels), kernels)

    def encode(self, tok: Tokenizer, examples: list[Any], data: TaskData,
               cfg: FinetuneConfig) -> dict[str, torch.Tensor]:
        out = encode_tagged(tok, examples, cfg.max_length, data.labels)  # type: ignore[arg-type]
        out.pop("first", None)  # where words start: for predictions only
        return out

    def loss(self, logits: torch.Tensor, labels: torch.Tensor,
             data: TaskData) -> torch.Tensor:
        """Cross-entropy over the words' first pieces: (B, T, tags) against (B, T)."""
        return cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=IGNORE)

    def denominator(self, labels: torch.Tensor, index: torch.Tensor, batch_size: int) -> int:
        """The global batch's tagged words."""
        return max(1, int((labels[index] != IGNORE).sum()))

    def predict(self, model: nn.Module, tok: Tokenizer, examples: list[Any], data: TaskData,
                cfg: FinetuneConfig) -> tuple[Any, Any]:
        return self.tags(model, tok, examples, data, cfg), [s.tags for s in examples]

    def tags(self, model: nn.Module, tok: Tokenizer, sentences: list[Sentence], data: TaskData,
             cfg: FinetuneConfig, batch_size: int = 64) -> list[list[str]]:
        """Each sentence's predicted tag per word (read at the word's first piece; a word cut
        off by max_length gets "O", or the first tag where there is no "O")."""
        names = {i: t for t, i in data.labels.items()}
        fallback = data.labels.get("O", 0)
        out: list[list[str]] = []
        for i in range(0, len(sentences), batch_size):  # each batch padded to its own width
            part = sentences[i : i + batch_size]
            b = encode_tagged(tok, part, cfg.max_length, data.labels)  # type: ignore[arg-type]
            out += [[names[t] for t in ids] for ids in word_predictions(
                logits(model, b, cfg.precision, batch_size), b["first"],
                [len(s.words) for s in part], fallback)]
        return out

    def score(self, data: TaskData, preds: Any, labels: Any) -> dict[str, float]:
        return score(data.metrics, preds, labels)

    def report(self, split: str, preds: Any, labels: Any,
               data: TaskData) -> tuple[list[str], dict[str, Any] | None]:
        """Word by word, as classes."""
        p = np.array([data.labels[t] for s in preds for t in s])
        y = np.array([data.labels[t] for s in labels for t in s])
        return confusion(p, y, {i: n for n, i in data.labels.items()}, split)

    def records(self, model: nn.Module, tok: Tokenizer, items: list[Any], data: TaskData,
                cfg: FinetuneConfig) -> list[dict[str, Any]]:
        tags = self.tags(model, tok, items, data, cfg)
        return [{"tokens": s.words, "tags": t} for s, t in zip(items, tags, strict=True)]
