"""A toy task family, written as a plug-in would be: one file, one registry line to use it.

``wordcount``: how many words a text has (a regression read from plain text files, one text
a line). Its own reader, defaults (32 tokens, 2 epochs, what the paper's defaults are not),
setting (``per``: the count in units of this many words), module, loss, scores, records and
transformers mapping; it subclasses no existing head.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from electra.config import FamilySettings
from electra.data.examples import Example, encode
from electra.model import EncoderWithHead, encoder_for, init_weights
from electra.tasks.base import Head, TaskData, logits


class WordCounter(EncoderWithHead):
    """Encoder + dense -> GELU -> one output on [CLS] (transformers' classifier layout)."""

    reads_first = True

    def __init__(self, cfg, kernels=None) -> None:
        super().__init__()
        self.config = cfg
        self.encoder = encoder_for(cfg, kernels=kernels)
        self.head_dense = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.head_out = nn.Linear(cfg.hidden_size, 1)
        init_weights(self, cfg.initializer_range)

    def head(self, h: torch.Tensor) -> torch.Tensor:
        return self.head_out(F.gelu(self.head_dense(h[:, 0])))


def read(path: str | Path) -> list[Example]:
    """One text a line; its label is its number of words."""
    lines = [x.strip() for x in Path(path).read_text().splitlines() if x.strip()]
    return [Example(x, None, float(len(x.split()))) for x in lines]


@dataclass(frozen=True)
class WordCountSettings(FamilySettings):
    """The toy's own setting."""

    RANGES: ClassVar[dict[str, Any]] = {"per": ">= 1"}
    per: int = 1
    """The count in units of this many words (the label is words / per)."""


class WordCount(Head):
    name = "wordcount"
    Settings = WordCountSettings
    tasks = ("wordcount",)
    help = "wordcount (a toy)"
    defaults = {"max_length": 32, "epochs": 2}  # noqa: RUF012
    hf_part = "wordcount"  # its own key table, exported as transformers' regression class
    hf_class = "ElectraForSequenceClassification"
    hf_keys = tuple((f"head_{a}.{w}", f"classifier.{b}.{w}") for a, b in
                    (("dense", "dense"), ("out", "out_proj")) for w in ("weight", "bias"))

    def load(self, task: str, **given: Any) -> TaskData:
        dev = {} if given.get("dev") is None else {"dev": read(given["dev"])}
        train = [] if given.get("split") else read(given["train"])
        return TaskData(task, train, dev, ("neg_mae",), True, {}, head=self)

    def read_inputs(self, path: Path, meta: dict[str, Any]) -> list[Any]:
        return read(path)

    def build(self, cfg, labels, regression, kernels=None, settings=None) -> nn.Module:
        return WordCounter(cfg, kernels)

    def encode(self, tok, examples, data, cfg) -> dict[str, torch.Tensor]:
        out = encode(tok, examples, cfg.max_length, None, True)
        return out | {"labels": out["labels"] / self.settings(cfg).per}

    def loss(self, out, labels, data) -> torch.Tensor:
        return F.mse_loss(out.squeeze(-1).float(), labels.float(), reduction="sum")

    def predict(self, model, tok, examples, data, cfg) -> tuple[Any, Any]:
        batch = self.encode(tok, examples, data, cfg)
        return logits(model, batch, cfg.precision).squeeze(-1).numpy(), \
            batch["labels"].numpy()

    def score(self, data, preds, labels) -> dict[str, float]:
        return {"neg_mae": -float(np.mean(np.abs(preds - labels)))}

    def records(self, model, tok, items, data, cfg) -> list[dict[str, Any]]:
        out = logits(model, self.encode(tok, items, data, cfg), cfg.precision)
        return [{"count": float(x)} for x in out.squeeze(-1)]

    def hf_labels(self, meta: dict[str, Any]) -> dict[str, Any]:
        return {"id2label": {0: "words"}, "label2id": {"words": 0},
                "problem_type": "regression"}
