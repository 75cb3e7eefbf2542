"""SuperGLUE's pair tasks: BoolQ, CB, RTE (``sg-rte``), WiC, WSC, MultiRC, ReCoRD and the
diagnostics AX-b and AX-g, on the sequence head (ELECTRA's classifier on [CLS]).

Rows, metrics and submission files are ``electra.data.superglue``'s. Predictions are class
probabilities per row; MultiRC, ReCoRD and AX-g score them by group (a question's options,
a query's candidates, a Winogender pair). COPA is the multiple-choice head's
(``electra.tasks.choice``). A model fine-tuned on RTE (GLUE's or SuperGLUE's) scores AX-b and
AX-g with ``electra evaluate``. Exports as ``ElectraForSequenceClassification``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from electra.config import FinetuneConfig
from electra.data.superglue import (
    DIAGNOSTIC_OF,
    SUPERGLUE,
    Row,
    SuperGlueTask,
    class_scores,
    files,
    gender_parity,
    multirc_scores,
    read_split,
    record_answers,
    record_scores,
    write_submission,
)
from electra.errors import UserError
from electra.io.files import jsonl
from electra.tasks.base import TaskData, confusion, logits
from electra.tasks.sequence import Sequence


@dataclass
class Labelled:
    """A split's gold label ids and its rows (their groups)."""

    ids: np.ndarray
    rows: list[Row]


class SuperGLUE(Sequence):
    name = "superglue"
    tasks = tuple(SUPERGLUE)

    @staticmethod
    def spec(data: TaskData | str) -> SuperGlueTask:
        return SUPERGLUE[data if isinstance(data, str) else data.name]

    def load(self, task: str, data: str | None = None, split: str | None = None,
             predict: str | None = None, **_: Any) -> TaskData:
        spec = self.spec(task)
        if data is None:
            raise UserError(f"--task {task} needs --data {spec.folder.upper()}_DIR (the "
                            f"folder with {', '.join(files(spec).values())})")
        if not spec.train and split is None:
            raise UserError(f"--task {task} is a diagnostic with no training set: fine-tune "
                            f"on rte or sg-rte, then `electra evaluate --model FT/seed-1 "
                            f"--task {task} --data {data}`")
        dev = "val" if spec.train else "dev"
        train = read_split(spec, data, "train") if split is None else []
        if spec.train and train and not any(r.label is not None for r in train):
            raise UserError(f"{data}/train.jsonl: no labelled rows")
        return TaskData(spec.name, [r for r in train if r.label is not None],
                        {dev: read_split(spec, data, dev)}, spec.metrics, False,
                        {n: i for i, n in enumerate(spec.labels)},
                        {"test": read_split(spec, data, "test")} if predict == "test" else {},
                        head=self, columns=("text_a", "text_b"))

    def trained_on(self, task: str) -> tuple[str, ...]:
        return DIAGNOSTIC_OF if not self.spec(task).train else (task,)

    def prepare(self, data: TaskData, cfg: FinetuneConfig) -> TaskData:
        return data

    def read_inputs(self, path: Path, meta: dict[str, Any]) -> list[Any]:
        """A file in the task's own JSONL format (labels, where present, ignored)."""
        spec = self.spec(meta["task"])
        if path.suffix != ".jsonl":
            raise UserError(f"--input {path}: {spec.folder} reads its own JSONL format "
                            f"(like its test.jsonl)")
        with open(path, encoding="utf-8") as f:
            return [r for n, row in jsonl(path, f) for r in spec.read(row, f"{path}:{n}",
                                                                      False)]

    def encode(self, tok: Any, examples: list[Any], data: TaskData,
               cfg: FinetuneConfig) -> dict[str, torch.Tensor]:
        out = super().encode(tok, examples, data, cfg)
        if "labels" not in out and any(e.label is not None for e in examples):
            # ReCoRD's queries without candidates have none: scored, never trained on
            out["labels"] = torch.tensor([data.labels.get(str(e.label), -1) for e in examples])
        return out

    def predict(self, model: Any, tok: Any, examples: list[Any], data: TaskData,
                cfg: FinetuneConfig) -> tuple[Any, Any]:
        batch = self.encode(tok, examples, data, cfg)
        probs = logits(model, batch, cfg.precision).softmax(-1).numpy()
        ids = batch["labels"].numpy() if "labels" in batch else np.full(len(examples), -1)
        return probs, Labelled(ids, examples)

    def score(self, data: TaskData, preds: Any, labels: Any) -> dict[str, float]:
        spec, ids = self.spec(data), preds.argmax(-1)
        if spec.name == "multirc":
            return multirc_scores(ids, labels.ids, labels.rows)
        if spec.name == "record":
            return record_scores(self._answers(preds, labels.rows), labels.rows)
        out = class_scores(spec.metrics, ids, labels.ids)
        if "gender_parity" in spec.metrics:
            out["gender_parity"] = gender_parity(ids, labels.rows)
        return {m: out[m] for m in spec.metrics}

    @staticmethod
    def _answers(probs: np.ndarray, rows: list[Row]) -> dict[str, str]:
        return record_answers(probs[:, 1] if probs.shape[1] > 1 else probs[:, 0], rows)

    def report(self, split: str, preds: Any, labels: Any,
               data: TaskData) -> tuple[list[str], dict[str, Any] | None]:
        known = labels.ids >= 0
        return confusion(preds.argmax(-1)[known], labels.ids[known],
                         {i: n for n, i in data.labels.items()}, split)

    def write_test(self, model: Any, tok: Any, data: TaskData, cfg: FinetuneConfig,
                   folder: Path) -> list[Path]:
        """SuperGLUE's submission file (``BoolQ.jsonl``, ...) for the test split."""
        spec, names = self.spec(data), {i: n for n, i in data.labels.items()}
        written = []
        for rows in data.test.values():
            probs, _ = self.predict(model, tok, rows, data, cfg)
            if spec.name == "record":
                answers = self._answers(probs, rows)
                firsts = list({r.group: r for r in rows}.values())
                predicted: list[Any] = [answers[r.group] for r in firsts]
                rows = firsts
            else:
                predicted = [names[int(i)] for i in probs.argmax(-1)]
            folder.mkdir(parents=True, exist_ok=True)
            path = folder / f"{spec.folder}.jsonl"
            write_submission(path, spec, rows, predicted)
            written.append(path)
        return written

    def meta(self, data: TaskData) -> dict[str, Any]:
        return {"head": self.name}
