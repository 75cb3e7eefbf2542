"""Multiple choice: SuperGLUE's COPA (``--task copa --data COPA``) and any N-choice JSONL
file (``--task choice --train FILE --dev FILE``, SWAG/HellaSwag style).

Every (context, choice) pair runs through the encoder; the head scores each from its [CLS]
(dense -> GELU -> dropout -> one logit), and a softmax over an example's choices is trained
with cross-entropy and read as the prediction; accuracy. Exports as transformers'
``ElectraForMultipleChoice`` (its ``sequence_summary`` and ``classifier``). Reading is
``electra.tasks.choice.data``'s.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from electra.config import FinetuneConfig, ModelConfig
from electra.errors import UserError
from electra.model import EncoderWithHead
from electra.model.kernels import Kernels
from electra.tasks.base import Head, TaskData, confusion, cross_entropy, logits
from electra.tasks.choice.data import ChoiceExample, encode_choices, read_choices

if TYPE_CHECKING:
    from tokenizers import Tokenizer  # (the types only: the readers stay light)


class MultipleChoice(EncoderWithHead):
    """Encoder + a score per choice from [CLS]: dense -> GELU -> dropout -> dense (1).

    ``forward`` takes (B, C, T) inputs and returns (B, C) scores, or (N, T) pairs and
    returns (N, 1) (how evaluation batches them). Keys map onto transformers'
    ElectraForMultipleChoice (``sequence_summary.summary``, ``classifier``)."""

    reads_first = True  # [CLS]

    def __init__(self, cfg: ModelConfig, kernels: Kernels | None = None) -> None:
        super().__init__()
        self.build_head(cfg, 1, kernels, dense=True)  # one score a choice

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        if input_ids.dim() == 2:
            return super().forward(input_ids, attention_mask, token_type_ids)
        B, C, T = input_ids.shape
        flat = [x.reshape(B * C, T) if x is not None else None
                for x in (input_ids, attention_mask, token_type_ids)]
        return super().forward(*flat).view(B, C)

    def head(self, h: torch.Tensor) -> torch.Tensor:
        if self.transform is not None:  # ModernBertForMultipleChoice's, "cls" pooling
            return self.head_out(self.head_dropout(self.transform(h[:, 0])))
        return self.head_out(self.head_dropout(F.gelu(self.head_dense(h[:, 0]))))


class Choice(Head):
    name = "choice"
    tasks = ("copa", "choice")
    help = "choice (N-choice JSONL)"
    hf_part = "multiple_choice"
    hf_class = "ElectraForMultipleChoice"  # no pipeline of transformers' reads it
    hf_keys = (("head_dense.weight", "sequence_summary.summary.weight"),
               ("head_dense.bias", "sequence_summary.summary.bias"),
               ("head_out.weight", "classifier.weight"),
               ("head_out.bias", "classifier.bias"))

    hub_datasets = {"copa": ("aps/super_glue", "copa")}  # noqa: RUF012 (read only)

    def load(self, task: str, data: str | None = None, train: str | None = None,
             dev: str | None = None, predict: str | None = None, split: str | None = None,
             **_: Any) -> TaskData:
        copa = task == "copa"
        if copa:
            if data is None:
                raise UserError("--task copa needs --data COPA_DIR (the folder with "
                                "train.jsonl, val.jsonl, test.jsonl)")
            folder = Path(data)
            train, dev = str(folder / "train.jsonl"), str(folder / "val.jsonl")
            test = str(folder / "test.jsonl") if predict == "test" else None
        else:
            if predict:
                raise UserError("--predict test writes SuperGLUE's COPA file; for a choice "
                                "file score it with `electra evaluate --dev FILE`")
            if not dev or not (train or split is not None):
                raise UserError("--task choice needs --train FILE and --dev FILE (JSONL: "
                                "context, choices, label)")
            test = None
        train_rows = read_choices(train, copa) if split is None else []  # type: ignore[arg-type]
        dev_rows = read_choices(dev, copa)
        n = len(dev_rows[0].choices)
        if train_rows and len(train_rows[0].choices) != n:
            raise UserError(f"{train} has {len(train_rows[0].choices)} choices per row, {dev} "
                            f"has {n}; give files with the same number")
        return TaskData(task, train_rows, {"val" if copa else "dev": dev_rows}, ("accuracy",),
                        False, {str(i): i for i in range(n)},
                        {"test": read_choices(test, True, False)} if test else {}, head=self)

    def read_inputs(self, path: Path, meta: dict[str, Any]) -> list[Any]:
        return read_choices(path, meta["task"] == "copa", labelled=False)

    def build(self, cfg: ModelConfig, labels: dict[str, int], regression: bool,
              kernels: Kernels | None = None, settings: dict[str, Any] | None = None
              ) -> nn.Module:
        return MultipleChoice(cfg, kernels)

    def encode(self, tok: Tokenizer, examples: list[Any], data: TaskData,
               cfg: FinetuneConfig) -> dict[str, torch.Tensor]:
        return encode_choices(tok, examples, cfg.max_length)  # type: ignore[arg-type]

    def loss(self, logits: torch.Tensor, labels: torch.Tensor,
             data: TaskData) -> torch.Tensor:
        """Cross-entropy of the softmax over each example's choices: (B, C) against (B,)."""
        return cross_entropy(logits, labels)

    def scores(self, model: nn.Module, tok: Tokenizer, examples: list[ChoiceExample],
               cfg: FinetuneConfig) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """(examples, choices) scores, every pair batched by length as evaluation does."""
        batch = encode_choices(tok, examples, cfg.max_length)  # type: ignore[arg-type]
        B, C, T = batch["input_ids"].shape
        flat = {k: batch[k].view(B * C, T) for k in ("input_ids", "attention_mask",
                                                      "token_type_ids")}
        return logits(model, flat, cfg.precision).view(B, C), batch

    def predict(self, model: nn.Module, tok: Tokenizer, examples: list[Any], data: TaskData,
                cfg: FinetuneConfig) -> tuple[Any, Any]:
        out, batch = self.scores(model, tok, examples, cfg)
        return out.argmax(-1).numpy(), batch["labels"].numpy()

    def score(self, data: TaskData, preds: Any, labels: Any) -> dict[str, float]:
        return {"accuracy": float(np.mean(np.asarray(preds) == np.asarray(labels)))}

    def report(self, split: str, preds: Any, labels: Any,
               data: TaskData) -> tuple[list[str], dict[str, Any] | None]:
        return confusion(preds, labels, {i: f"choice {i}" for i in data.labels.values()},
                         split)

    def records(self, model: nn.Module, tok: Tokenizer, items: list[Any], data: TaskData,
                cfg: FinetuneConfig) -> list[dict[str, Any]]:
        probs = self.scores(model, tok, items, cfg)[0].softmax(-1)
        return [{"label": int(p.argmax()), "probs": [round(float(x), 6) for x in p]}
                for p in probs]

    def write_test(self, model: nn.Module, tok: Tokenizer, data: TaskData, cfg: FinetuneConfig,
                   folder: Path) -> list[Path]:
        """SuperGLUE's ``COPA.jsonl``: {"idx", "label"} per test example."""
        written = []
        for rows in data.test.values():
            preds = self.scores(model, tok, rows, cfg)[0].argmax(-1).tolist()
            folder.mkdir(parents=True, exist_ok=True)
            path = folder / "COPA.jsonl"
            path.write_text("".join(json.dumps({"idx": e.idx, "label": p}) + "\n"
                                    for e, p in zip(rows, preds, strict=True)))
            written.append(path)
        return written

    def meta(self, data: TaskData) -> dict[str, Any]:
        return {"head": self.name}

    def hf_labels(self, meta: dict[str, Any]) -> dict[str, Any]:
        """transformers' summary settings that match the head (no labels to name)."""
        return {"summary_type": "first", "summary_use_proj": True,
                "summary_activation": "gelu",
                "summary_last_dropout": meta["model"]["hidden_dropout"]}
