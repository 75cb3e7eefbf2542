"""GLUE's nine tasks as distributed: their files, labels, metrics and submission files.

GLUE quirks handled here: CoLA's train/dev have no header (its test has one), MRPC starts
with a UTF-8 byte-order mark, MNLI has matched and mismatched dev sets, STS-B is regression,
QQP's train has a few malformed rows (skipped and counted, as the original processors do).
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from electra.data.examples import Example
from electra.data.labels import Spellings
from electra.errors import UserError
from electra.io.files import read_text


@dataclass(frozen=True)
class TaskSpec:
    """How one GLUE task's files look and how it is scored."""

    name: str
    text: tuple[Any, ...]  # column names (or indices, for headerless files)
    label: Any  # label column name or index
    labels: tuple[str, ...] | None  # None: regression
    metrics: tuple[str, ...]
    dev: dict[str, str] = field(default_factory=lambda: {"dev": "dev.tsv"})
    test: dict[str, str] = field(default_factory=lambda: {"test": "test.tsv"})
    header: bool = True  # train/dev have a header row
    test_text: tuple[str, ...] | None = None  # test columns when they differ
    skip_malformed: bool = False

    @property
    def is_regression(self) -> bool:
        return self.labels is None


GLUE: dict[str, TaskSpec] = {
    "cola": TaskSpec("cola", text=(3,), label=1, labels=("0", "1"), metrics=("mcc",),
                     header=False, test_text=("sentence",)),
    "sst2": TaskSpec("sst2", text=("sentence",), label="label", labels=("0", "1"),
                     metrics=("accuracy",)),
    "mrpc": TaskSpec("mrpc", text=("#1 String", "#2 String"), label="Quality",
                     labels=("0", "1"), metrics=("f1", "accuracy")),
    "stsb": TaskSpec("stsb", text=("sentence1", "sentence2"), label="score", labels=None,
                     metrics=("pearson", "spearman")),
    "qqp": TaskSpec("qqp", text=("question1", "question2"), label="is_duplicate",
                    labels=("0", "1"), metrics=("f1", "accuracy"), skip_malformed=True),
    "mnli": TaskSpec("mnli", text=("sentence1", "sentence2"), label="gold_label",
                     labels=("contradiction", "entailment", "neutral"), metrics=("accuracy",),
                     dev={"dev_matched": "dev_matched.tsv",
                          "dev_mismatched": "dev_mismatched.tsv"},
                     test={"test_matched": "test_matched.tsv",
                           "test_mismatched": "test_mismatched.tsv"}),
    "qnli": TaskSpec("qnli", text=("question", "sentence"), label="label",
                     labels=("entailment", "not_entailment"), metrics=("accuracy",)),
    "rte": TaskSpec("rte", text=("sentence1", "sentence2"), label="label",
                    labels=("entailment", "not_entailment"), metrics=("accuracy",)),
    "wnli": TaskSpec("wnli", text=("sentence1", "sentence2"), label="label",
                     labels=("0", "1"), metrics=("accuracy",)),
}


def glue_task(name: str) -> TaskSpec:
    key = name.lower().replace("-", "")
    if key not in GLUE:
        raise UserError(f"--task {name}: unknown; valid GLUE tasks: {', '.join(GLUE)}")
    return GLUE[key]


def _rows(path: Path) -> list[list[str]]:
    if not path.is_file():
        if (path.parent / "val.jsonl").is_file():
            raise UserError(f"{path}: no such file; {path.parent} is in SuperGLUE's format "
                            f"(val.jsonl): its RTE is --task sg-rte")
        raise UserError(f"{path}: no such file")
    text = read_text(path)  # drops MRPC's BOM
    rows = list(csv.reader(io.StringIO(text, newline=""), delimiter="\t",
                           quoting=csv.QUOTE_NONE))
    rows = [r for r in rows if r]
    if not rows:
        raise UserError(f"{path}: the file is empty")
    return rows


def read_glue(task: str | TaskSpec, folder: str | Path, split: str) -> list[Example]:
    """Examples of ``split`` ("train", a dev split name such as "dev" or "dev_matched", or a
    test split) from a GLUE task folder as distributed."""
    spec = glue_task(task) if isinstance(task, str) else task
    folder = Path(folder)
    files = {"train": "train.tsv", **spec.dev, **spec.test}
    if split not in files:
        raise UserError(f"{spec.name} has no split {split!r}; it has {', '.join(files)}")
    path = folder / files[split]
    rows = _rows(path)
    is_test = split in spec.test
    if is_test or spec.header:
        header, rows = rows[0], rows[1:]
        cols = {name: i for i, name in enumerate(header)}
        text_names = spec.test_text if (is_test and spec.test_text) else spec.text
        missing = [c for c in (*text_names, *([] if is_test else [spec.label]))
                   if c not in cols]
        if missing:
            raise UserError(f"{path}: no column {', '.join(map(repr, missing))}; the header "
                            f"has {', '.join(header)}")
        text_idx = [cols[c] for c in text_names]
        label_idx = None if is_test else cols[spec.label]
    else:
        text_idx, label_idx = list(spec.text), spec.label
    need = max([*text_idx, label_idx if label_idx is not None else 0]) + 1
    out, spellings = [], Spellings()
    for n, row in enumerate(rows):
        if len(row) < need:
            if spec.skip_malformed:
                continue
            raise UserError(f"{path}: row {n + 1} has {len(row)} columns, expected at least "
                            f"{need}")
        texts = [row[i] for i in text_idx]
        label: str | float | None = None
        if label_idx is not None:
            raw = row[label_idx].strip()
            label = _score(raw, f"{path}: row {n + 1}") if spec.is_regression else \
                spellings.read(raw, f"{path}: row {n + 1}")
        guid = row[cols["index"]] if is_test and "index" in cols else f"{split}-{n}"
        out.append(Example(texts[0], texts[1] if len(texts) > 1 else None, label, guid=guid))
    spellings.note(path)
    return out


def _score(text: str, where: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise UserError(f"{where}: score {text!r} is not a finite number")
    return value


# GLUE's submission file for each test split (https://gluebenchmark.com/faq).
SUBMISSION_FILES = {("cola", "test"): "CoLA.tsv", ("sst2", "test"): "SST-2.tsv",
                    ("mrpc", "test"): "MRPC.tsv", ("stsb", "test"): "STS-B.tsv",
                    ("qqp", "test"): "QQP.tsv", ("mnli", "test_matched"): "MNLI-m.tsv",
                    ("mnli", "test_mismatched"): "MNLI-mm.tsv", ("qnli", "test"): "QNLI.tsv",
                    ("rte", "test"): "RTE.tsv", ("wnli", "test"): "WNLI.tsv"}


def write_submission(path: Path, examples: list[Example], predictions: list[str]) -> None:
    """A GLUE submission file: ``index<TAB>prediction``, one row per test example."""
    lines = ["index\tprediction"] + [f"{e.guid}\t{p}" for e, p in
                                     zip(examples, predictions, strict=True)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
