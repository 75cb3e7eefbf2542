"""Sequence classification and regression: GLUE's nine tasks and any labelled CSV/TSV/JSONL.

The head is ELECTRA's on [CLS] (dropout -> dense -> GELU -> dropout -> dense), trained with
cross-entropy (mean squared error for regression), scored with GLUE's metrics; it exports as
transformers' ``ElectraForSequenceClassification``. GLUE's files are
``electra.tasks.sequence.data``'s; custom files and the metrics ``electra.data.examples``'.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from electra.config import FamilySettings, FinetuneConfig, ModelConfig
from electra.data.examples import Example, compute_metrics, encode, label_map, read_custom
from electra.data.labels import canonical_label
from electra.errors import UserError
from electra.io.files import read_text
from electra.model import EncoderWithHead
from electra.model.kernels import Kernels
from electra.tasks.base import HEADS, Head, TaskData, confusion, cross_entropy, logits
from electra.tasks.sequence.data import (
    GLUE,
    SUBMISSION_FILES,
    glue_task,
    read_glue,
    write_submission,
)

if TYPE_CHECKING:
    from tokenizers import Tokenizer  # (the types only: the readers stay light)


class SequenceClassifier(EncoderWithHead):
    """Encoder + ELECTRA's head on [CLS]: dropout -> dense -> GELU -> dropout -> dense
    (``num_labels`` logits; 1 for regression). Keys map onto transformers'
    ElectraForSequenceClassification (``classifier.dense``, ``classifier.out_proj``)."""

    reads_first = True  # [CLS]

    def __init__(self, cfg: ModelConfig, num_labels: int,
                 kernels: Kernels | None = None) -> None:
        super().__init__()
        self.num_labels = num_labels
        self.build_head(cfg, num_labels, kernels, dense=True)  # ELECTRA's dense, or ModernBERT's

    def head(self, h: torch.Tensor) -> torch.Tensor:
        """Hidden states (B, T, H) -> logits (B, num_labels), from [CLS]."""
        if self.transform is not None:  # ModernBertForSequenceClassification's, "cls" pooling
            return self.head_out(self.head_dropout(self.transform(h[:, 0])))
        h = self.head_dropout(F.gelu(self.head_dense(self.head_dropout(h[:, 0]))))
        return self.head_out(h)


def _in_model_spelling(data: TaskData, labels: dict[str, int], where: str) -> TaskData:
    """Dev labels (read by the one label rule) in the spelling of a model's labels: a model
    fine-tuned before the rule may name a class ``True`` or ``1.0``."""
    import dataclasses


    spelled: dict[str, str] = {}
    for name in labels:
        spelled.setdefault(canonical_label(name, where), name)
    if all(k == v for k, v in spelled.items()):
        return data
    dev = {split: [dataclasses.replace(e, label=spelled.get(str(e.label), e.label))
                   if e.label is not None else e for e in examples]
           for split, examples in data.dev.items()}
    return data.replace(dev=dev)


@dataclass(frozen=True)
class SequenceSettings(FamilySettings):
    """Sentence (pair) classification's own (GLUE, custom files)."""

    double_pairs: bool = False
    """MRPC/STS-B: also train on each pair swapped (b, a), as the original code can."""


class Sequence(Head):
    name = "sequence"
    Settings = SequenceSettings
    help = f"{', '.join(GLUE)}, custom (sentence or pair classification, regression)"

    def task_defaults(self, task: str) -> dict[str, Any]:
        """The paper's 10 epochs for the small GLUE sets RTE and STS-B (3 otherwise)."""
        return {"epochs": 10} if task in ("rte", "stsb") else {}
    hf_part = "classifier"
    hf_class = "ElectraForSequenceClassification"
    pipeline_tag = "text-classification"
    hf_keys = (("head_dense.weight", "classifier.dense.weight"),
               ("head_dense.bias", "classifier.dense.bias"),
               ("head_out.weight", "classifier.out_proj.weight"),
               ("head_out.bias", "classifier.out_proj.bias"))

    hub_datasets = {t: ("nyu-mll/glue", t) for t in GLUE}  # noqa: RUF012 (read only)

    def load(self, task: str, data: str | None = None, train: str | None = None,
             dev: str | None = None, text_columns: str | None = None,
             label_column: str | None = None,
             regression: bool = False, predict: str | None = None, split: str | None = None,
             **_: Any) -> TaskData:
        """A GLUE task from its folder (``data``), or ``custom`` from ``train``/``dev``."""
        if task == "custom":
            return self._custom(train, dev, text_columns, label_column, regression, predict,
                                split)
        if task.lower().replace("-", "") not in GLUE:
            others = [t for h in HEADS.values() for t in h.tasks]
            raise UserError(f"--task {task}: unknown; valid tasks: {', '.join(GLUE)}, custom, "
                            f"{', '.join(others)}")
        spec = glue_task(task)
        if data is None:
            raise UserError(f"--task {task} needs --data GLUE_TASK_DIR")
        splits = list(spec.dev) if split in (None, "dev") else [split]
        labels = {label: i for i, label in enumerate(spec.labels)} if spec.labels else {}
        return TaskData(spec.name, read_glue(spec, data, "train") if split is None else [],
                        {s: read_glue(spec, data, s) for s in splits}, spec.metrics,
                        spec.is_regression, labels,
                        {s: read_glue(spec, data, s) for s in spec.test} if predict == "test"
                        else {}, head=self, columns=tuple(map(str, spec.test_text or spec.text)))

    def reads(self, task: str, key: str) -> bool:
        """GLUE's files have their known columns: the column flags are custom's alone."""
        if key in ("label_column", "regression"):
            return task == "custom"
        return super().reads(task, key)

    def _custom(self, train: str | None, dev: str | None, text_columns: str | None,
                label_column: str | None, regression: bool, predict: str | None,
                split: str | None) -> TaskData:
        if predict:
            raise UserError("--predict test writes GLUE submission files; for a custom task "
                            "score your file with `electra evaluate --dev FILE`")
        if (not train and split is None) or not dev:
            raise UserError("--task custom needs --train FILE and --dev FILE (and "
                            "--text-columns, --label-column)")
        named = text_columns is not None or label_column is not None  # by the user
        cols = [c for c in (text_columns or "text").split(",") if c]
        label_column = label_column or "label"
        examples = read_custom(train, cols, label_column, regression, named) if train else []
        classes = {e.label for e in examples}
        if not regression and len(classes) == 1:
            raise UserError(f"{train}: every label is {classes.pop()!r}; a classifier needs at "
                            f"least two classes (--regression for numeric labels)")
        metrics = ("pearson", "spearman") if regression else ("accuracy",)
        return TaskData("custom", examples, {"dev": read_custom(dev, cols, label_column,
                                                                 regression, named)},
                        metrics, regression, head=self, columns=tuple(cols))

    def prepare(self, data: TaskData, cfg: FinetuneConfig) -> TaskData:
        if data.regression or data.labels:
            return data
        return data.replace(labels=label_map(data.train,
                                             [e for d in data.dev.values() for e in d]))

    def for_model(self, data: TaskData, meta: dict[str, Any], cfg: FinetuneConfig,
                  where: str) -> TaskData:
        if not data.regression and meta["labels"]:
            data = _in_model_spelling(data, meta["labels"], where)
            unseen = sorted({str(e.label) for d in data.dev.values() for e in d
                             if e.label is not None} - set(meta["labels"]))
            if unseen:
                raise UserError(f"--dev: labels {', '.join(map(repr, unseen[:5]))} never "
                                f"occurred when {where} was trained (its labels: "
                                f"{', '.join(map(repr, meta['labels']))}); score a file with "
                                f"those labels only")
        return data.replace(labels=meta["labels"])

    def read_inputs(self, path: Path, meta: dict[str, Any]) -> list[Any]:
        columns = meta.get("text_columns") or ["text"]
        if path.suffix in (".csv", ".tsv", ".tab", ".jsonl"):
            return read_custom(path, columns, None)
        if len(columns) > 1:
            raise UserError(f"--input {path}: this model reads pairs ({', '.join(columns)}); "
                            f"give a CSV, TSV or JSONL file with those columns")

        return [Example(line, None, None) for line in read_text(path, "--input").splitlines()
                if line.strip()]

    def build(self, cfg: ModelConfig, labels: dict[str, int], regression: bool,
              kernels: Kernels | None = None, settings: dict[str, Any] | None = None
              ) -> nn.Module:
        return SequenceClassifier(cfg, 1 if regression else len(labels), kernels)

    def augment(self, examples: list[Any], cfg: FinetuneConfig) -> list[Any]:
        """``double_pairs``: each pair also swapped (b, a), as the original code can."""
        if not self.settings(cfg).double_pairs:
            return examples
        return examples + [Example(e.text_b, e.text_a, e.label) for e in examples
                           if e.text_b is not None]

    def encode(self, tok: Tokenizer, examples: list[Any], data: TaskData,
               cfg: FinetuneConfig) -> dict[str, torch.Tensor]:
        return encode(tok, examples, cfg.max_length, data.labels, data.regression)  # type: ignore[arg-type]

    def loss(self, logits: torch.Tensor, labels: torch.Tensor,
             data: TaskData) -> torch.Tensor:
        if data.regression:
            return F.mse_loss(logits.squeeze(-1).float(), labels.float(), reduction="sum")
        return cross_entropy(logits, labels)

    def predict(self, model: nn.Module, tok: Tokenizer, examples: list[Any], data: TaskData,
                cfg: FinetuneConfig) -> tuple[Any, Any]:
        batch = self.encode(tok, examples, data, cfg)
        return self._predict(model, batch, data, cfg).numpy(), batch["labels"].numpy()

    def _predict(self, model: nn.Module, batch: dict[str, torch.Tensor], data: TaskData,
                 cfg: FinetuneConfig) -> torch.Tensor:
        """Predicted label ids (or scores, for regression) for encoded examples."""
        out = logits(model, batch, cfg.precision)
        return out.squeeze(-1) if data.regression else out.argmax(-1)

    def score(self, data: TaskData, preds: Any, labels: Any) -> dict[str, float]:
        return compute_metrics(data.metrics, preds, labels)

    def report(self, split: str, preds: Any, labels: Any,
               data: TaskData) -> tuple[list[str], dict[str, Any] | None]:
        if data.regression:
            if float(np.std(preds)) < 0.01 * max(float(np.std(labels)), 1e-12):
                return [f"{split}: near-constant predictions (std {np.std(preds):.2g} "
                        f"against the labels' {np.std(labels):.2g})"], None
            return [], None
        return confusion(preds, labels, {i: n for n, i in data.labels.items()}, split)

    def records(self, model: nn.Module, tok: Tokenizer, items: list[Any], data: TaskData,
                cfg: FinetuneConfig) -> list[dict[str, Any]]:
        out = logits(model, self.encode(tok, items, data, cfg), cfg.precision, len(items))
        if data.regression:
            return [{"score": round(float(v), 6)} for v in out.squeeze(-1)]
        names = {i: name for name, i in data.labels.items()}
        probs = out.softmax(-1)
        return [{"label": names[int(p.argmax())],
                 "probs": {names[j]: round(float(p[j]), 6) for j in range(len(names))}}
                for p in probs]

    def write_test(self, model: nn.Module, tok: Tokenizer, data: TaskData, cfg: FinetuneConfig,
                   folder: Path) -> list[Path]:
        """GLUE submission files for the test splits (labels by name; STS-B in [0, 5])."""
        names = {i: label for label, i in data.labels.items()}
        written = []
        for split, examples in data.test.items():
            preds = self._predict(model, self.encode(tok, examples, data, cfg), data, cfg)
            if data.regression:
                shown = [f"{v:.3f}" for v in preds.clamp(0.0, 5.0).tolist()]
            else:
                shown = [names[i] for i in preds.tolist()]
            folder.mkdir(parents=True, exist_ok=True)
            path = folder / SUBMISSION_FILES.get((data.name, split),
                                                 f"{data.name}-{split}.tsv")
            write_submission(path, examples, shown)
            written.append(path)
        return written

    def meta(self, data: TaskData) -> dict[str, Any]:
        return {}  # a folder without "head" is a sequence classifier

    def hf_labels(self, meta: dict[str, Any]) -> dict[str, Any]:
        if meta.get("regression"):
            return {"id2label": {0: "score"}, "label2id": {"score": 0},
                    "problem_type": "regression"}
        return {**super().hf_labels(meta), "problem_type": "single_label_classification"}

