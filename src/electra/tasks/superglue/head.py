"""SuperGLUE's pair tasks: BoolQ, CB, RTE (``sg-rte``), WiC, WSC, MultiRC, ReCoRD and the
diagnostics AX-b and AX-g, on the sequence head (ELECTRA's classifier on [CLS]).

Rows, metrics and submission files are ``electra.tasks.superglue.data``'s. Predictions are
class probabilities per row; MultiRC, ReCoRD and AX-g score them by group (a question's
options, a query's candidates, a Winogender pair). COPA is the multiple-choice head's
(``electra.tasks.choice.head``). A model fine-tuned on RTE (GLUE's or SuperGLUE's) scores
AX-b and AX-g with ``electra evaluate``. Exports as ``ElectraForSequenceClassification``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import torch

from electra.config import FinetuneConfig
from electra.errors import UserError
from electra.io.files import jsonl, read_text
from electra.tasks.base import TaskData, confusion, logits
from electra.tasks.sequence.head import Sequence, SequenceSettings
from electra.tasks.superglue.data import (
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
    record_windows,
    write_submission,
)

if TYPE_CHECKING:
    from tokenizers import Tokenizer  # (the types only: the readers stay light)


@dataclass
class Labelled:
    """A split's gold label ids and its rows (their groups)."""

    ids: np.ndarray
    rows: list[Row]


@dataclass(frozen=True)
class SuperGLUESettings(SequenceSettings):
    """SuperGLUE's: the sequence head's, and ReCoRD's windows over its passages."""

    RANGES: ClassVar[dict[str, str | tuple[str, ...]]] = {"doc_stride": ">= 1"}
    doc_stride: int = 128
    """ReCoRD: tokens by which consecutive windows over a long passage overlap."""


class SuperGLUE(Sequence):
    name = "superglue"
    Settings = SuperGLUESettings
    tasks = tuple(SUPERGLUE)
    help = ("SuperGLUE's boolq, cb, copa, multirc, record, sg-rte, wic, wsc (ax-b, ax-g with "
            "evaluate)")

    # the hub's super_glue dataset (its configurations: rte, wsc.fixed, axb, axg)
    hub_datasets = {t: ("aps/super_glue", {"sg-rte": "rte", "wsc": "wsc.fixed",  # noqa: RUF012
                                           "ax-b": "axb", "ax-g": "axg"}.get(t, t))
                    for t in SUPERGLUE}

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
        test = {"test": read_split(spec, data, "test")} if predict == "test" else {}
        if test and spec.name == "sg-rte":  # the diagnostics' files, beside RTE's folder
            for name in ("ax-b", "ax-g"):
                folder = Path(data).parent / SUPERGLUE[name].folder
                if (folder / files(SUPERGLUE[name])["dev"]).is_file():
                    test[name] = read_split(SUPERGLUE[name], folder, "dev")
        return TaskData(spec.name, [r for r in train if r.label is not None],
                        {dev: read_split(spec, data, dev)}, spec.metrics, False,
                        {n: i for i, n in enumerate(spec.labels)}, test, head=self,
                        columns=("text_a", "text_b"))

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
        return [r for n, row in jsonl(path, read_text(path, "--input").splitlines())
                for r in spec.read(row, f"{path}:{n}", False)]

    def encode(self, tok: Tokenizer, examples: list[Any], data: TaskData,
               cfg: FinetuneConfig) -> dict[str, torch.Tensor]:
        """Pairs as the sequence head reads them; ReCoRD's in windows over the passage,
        training on the windows that hold a mention of the row's candidate."""
        if self.spec(data).name == "record":
            labelled = [e for e in examples if e.label is not None]
            w = record_windows(tok, labelled, cfg.max_length, self.settings(cfg).doc_stride)  # type: ignore[arg-type]
            keep = w.pop("covers")
            ids = torch.tensor([data.labels[str(e.label)] for e in labelled])
            return {k: v[keep] for k, v in {**w, "labels": ids[w.pop("row")]}.items()}
        return super().encode(tok, examples, data, cfg)

    def probs(self, model: Any, tok: Tokenizer, rows: list[Row], data: TaskData,
              cfg: FinetuneConfig) -> np.ndarray:
        """Each row's class probabilities; a ReCoRD candidate's P(answer) is its best
        window's among those that mention it (any window where none does)."""
        if self.spec(data).name != "record":
            out = logits(model, super().encode(tok, rows, data, cfg), cfg.precision)
            return out.softmax(-1).numpy()
        w = record_windows(tok, rows, cfg.max_length, self.settings(cfg).doc_stride)  # type: ignore[arg-type]
        p = logits(model, w, cfg.precision).softmax(-1)[:, 1]
        none = torch.full((len(rows),), -1.0)
        c = w["covers"]
        covering = none.scatter_reduce(0, w["row"][c], p[c], "amax")
        anywhere = none.scatter_reduce(0, w["row"], p, "amax")
        best = torch.where(covering >= 0, covering, anywhere)
        return torch.stack([1 - best, best], 1).numpy()

    def predict(self, model: Any, tok: Tokenizer, examples: list[Any], data: TaskData,
                cfg: FinetuneConfig) -> tuple[Any, Any]:
        ids = np.array([data.labels.get(str(e.label), -1) for e in examples])
        return self.probs(model, tok, examples, data, cfg), Labelled(ids, examples)

    def records(self, model: Any, tok: Tokenizer, items: list[Any], data: TaskData,
                cfg: FinetuneConfig) -> list[dict[str, Any]]:
        names = {i: n for n, i in data.labels.items()}
        return [{"label": names[int(p.argmax())], **({"candidate": r.candidate}
                                                      if r.candidate else {}),
                 "probs": {names[j]: round(float(p[j]), 6) for j in range(len(names))}}
                for r, p in zip(items, self.probs(model, tok, items, data, cfg), strict=True)]

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

    def write_test(self, model: Any, tok: Tokenizer, data: TaskData, cfg: FinetuneConfig,
                   folder: Path) -> list[Path]:
        """SuperGLUE's submission file (``BoolQ.jsonl``, ...) for the test split; an RTE
        model also writes ``AX-b.jsonl`` and ``AX-g.jsonl`` where their folders sit beside
        RTE's."""
        names = {i: n for n, i in data.labels.items()}
        written = []
        for split, rows in data.test.items():
            spec = self.spec(split if split in SUPERGLUE else data.name)
            probs = self.probs(model, tok, rows, data, cfg)
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

    def export_note(self, meta: dict[str, Any]) -> str | None:
        return EXPORT_NOTES.get(meta["task"])


EXPORT_NOTES = {
    "wic": "transformers reads the pair as given: mark the target word *so* in both "
           "sentences, as electra does",
    "wsc": "transformers reads the text as given: mark the noun *so* and the pronoun #so#, as "
           "electra does",
    "multirc": "transformers scores one (question + option, paragraph) pair; grouping the "
               "options into questions (EM) is electra's",
    "record": "transformers scores one (filled query, passage window) pair; the candidates, "
              "the windows and the best candidate are electra's",
}
