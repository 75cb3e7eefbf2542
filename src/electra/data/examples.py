"""Labelled text examples, what the task families share: the :class:`Example`, any labelled
CSV/TSV/JSONL (:func:`read_custom`), label maps, and the metrics (GLUE's own definitions, by
scikit-learn's and scipy's formulas).

Each family reads its own formats in its package (``electra.tasks.sequence.data``: GLUE as
distributed); :func:`encode` tokenizes examples as the model sees them, in training and
evaluation alike.
"""

from __future__ import annotations

import csv
import io
import math
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from electra.data.labels import Spellings
from electra.data.tokenizer import special_names
from electra.errors import UserError
from electra.io.files import jsonl, read_text

if TYPE_CHECKING:
    from tokenizers import Tokenizer  # (the types only: the readers stay light)

csv.field_size_limit(min(sys.maxsize, 2**31 - 1))


@dataclass
class Example:
    text_a: str
    text_b: str | None
    label: str | float | None  # None on test sets
    guid: str = ""


# Column names that say what a column holds for some task (a label or score, a text of a
# pair or a triplet): a file's column of this kind that a task would leave unread is refused
# unless the user named the columns (:func:`check_unread`). Ids, titles, sources and other
# names are a file's own business.
ROLE_COLUMNS = re.compile(
    r"(labels?|gold(_label)?|scores?|similarity|relevance|rating|target|class|"
    r"text(_?[ab12])?|sentences?_?[12]?|question|query|anchor|positive|negatives?(_?\d+)?|"
    r"document|passage|context|premise|hypothesis)", re.IGNORECASE)


def header_of(records: list[Any]) -> list[str]:
    """Every column a file's rows have, in the order first met (JSONL rows may differ)."""
    seen: dict[str, None] = {}
    for r in records:
        if isinstance(r, dict):
            seen.update(dict.fromkeys(map(str, r)))
    return list(seen)


def check_unread(path: Path, header: list[str], used: list[str], named: bool,
                 how: str | Callable[[str], str]) -> None:
    """Refuse, in one line, a file with a column that holds a label, a score or a text (by
    its name, :data:`ROLE_COLUMNS`) which this task would not read, unless the user named the
    columns (``named``): a column is never dropped silently. ``how``: the way to read it
    (or, given the column, a function that says it)."""
    left = [c for c in header if c not in used and ROLE_COLUMNS.fullmatch(c.strip())]
    if left and not named:
        raise UserError(f"{path}: column {left[0]!r} would not be read (this task reads "
                        f"{', '.join(map(repr, used))}); "
                        f"{how if isinstance(how, str) else how(left[0])}")


def read_custom(path: str | Path, text_columns: list[str], label_column: str | None,
                regression: bool = False, named: bool = True) -> list[Example]:
    """Any labelled CSV, TSV or JSONL: one text column or a pair, labels of any type; a label
    or text column beside them refused unless the user ``named`` them (:func:`check_unread`).

    Raises:
        UserError: for a missing file, an empty one, or missing columns (naming the columns
            that were found).
    """
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: no such file")
    if not 1 <= len(text_columns) <= 2:
        raise UserError(f"--text-columns takes one column or two, got {len(text_columns)}")
    if label_column in text_columns:
        raise UserError(f"--label-column {label_column} is also a text column (--text-columns "
                        f"{','.join(text_columns)}); the model would read its answer")
    records = _records(path)
    if not records:
        raise UserError(f"{path}: no rows")
    if not isinstance(records[0], dict):
        raise UserError(f"{path}: row 1 is not an object with named fields")
    found = list(records[0].keys())
    wanted = [*text_columns, *([label_column] if label_column else [])]
    check_unread(path, header_of(records), wanted, named,
                 "name the columns to read: --text-columns A or A,B and --label-column L")
    missing = [c for c in wanted if c not in records[0]]
    if missing:
        raise UserError(f"{path}: no column {', '.join(map(repr, missing))}; found "
                        f"{', '.join(map(repr, found))}")
    out, spellings = [], Spellings()
    for n, r in enumerate(records):
        absent = [c for c in wanted if not isinstance(r, dict) or r.get(c) is None]
        if absent:
            raise UserError(f"{path}: row {n + 1} has no {', '.join(map(repr, absent))} "
                            f"(a short or malformed row)")
        label: str | float | None = None
        if label_column:
            value = r[label_column]
            if regression:
                try:
                    label = float(value)
                except (TypeError, ValueError):
                    label = math.nan
                if not math.isfinite(label):
                    raise UserError(f"{path}: row {n + 1}: label {value!r} is not a finite "
                                    f"number (--regression)")
            else:
                label = spellings.read(value, f"{path}: row {n + 1}",
                                       f"label ({label_column!r})")
        texts = [r[c] for c in text_columns]
        bad = next((c for c, t in zip(text_columns, texts, strict=True)
                    if not isinstance(t, str | int | float) or isinstance(t, bool)), None)
        if bad is not None:
            raise UserError(f"{path}: row {n + 1}: {bad!r} is {type(r[bad]).__name__}, not "
                            f"text")
        out.append(Example(str(texts[0]), str(texts[1]) if len(texts) > 1 else None, label,
                           guid=f"{path.name}-{n}"))
    spellings.note(path)
    return out


def named_records(path: str | Path) -> list[dict[str, Any]]:
    """A file's rows as :func:`_records` reads them, refused in one line where the file is
    missing or empty, or its first row is no object with named fields (a pairs, groups or
    triplets file's reading)."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: no such file")
    records = _records(path)
    if not records:
        raise UserError(f"{path}: no rows")
    if not isinstance(records[0], dict):
        raise UserError(f"{path}: row 1 is not an object with named fields")
    return records


def _records(path: Path) -> list[Any]:
    """The rows of a CSV/TSV (dicts by header), the objects of a JSONL file, or the records
    of a Parquet file."""
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        try:
            return pq.read_table(path).to_pylist()
        except Exception as err:  # pyarrow's errors: a damaged or foreign file
            raise UserError(f"{path}: not a readable Parquet file ({type(err).__name__})") from None
    text = read_text(path)
    if path.suffix == ".jsonl":
        return [r for _, r in jsonl(path, text.splitlines())]
    tsv = path.suffix in (".tsv", ".tab")
    # TSV has no quoting (IANA's text/tab-separated-values; GLUE's files): read with CSV's,
    # a text that starts with a quote would swallow the rows after it (STS-B's train.tsv:
    # 5,711 rows of its 5,749)
    reader = csv.DictReader(io.StringIO(text, newline=""), delimiter="\t" if tsv else ",",
                            quoting=csv.QUOTE_NONE if tsv else csv.QUOTE_MINIMAL)
    header = reader.fieldnames or []
    twice = sorted({c for c in header if header.count(c) > 1})
    if twice:
        raise UserError(f"{path}: the header names {', '.join(map(repr, twice))} more than "
                        f"once; give each column its own name")
    return list(reader)


def label_map(train: list[Example], dev: list[Example] | None = None) -> dict[str, int]:
    """String labels -> ids (sorted, so stable); dev labels unseen in training are refused,
    and so is a training set with a single class."""
    labels = sorted({str(e.label) for e in train if e.label is not None})
    if dev is not None:
        unseen = sorted({str(e.label) for e in dev if e.label is not None} - set(labels))
        if unseen:
            raise UserError(f"dev labels {', '.join(map(repr, unseen))} never occur in the "
                            f"training file (its labels: {', '.join(map(repr, labels))})")
    if len(labels) == 1:
        raise UserError(f"every training label is {labels[0]!r}; a classifier needs at least "
                        f"two classes (--regression for numeric labels)")
    return {label: i for i, label in enumerate(labels)}


def compute_metrics(names: tuple[str, ...], preds: Any, labels: Any) -> dict[str, float]:
    """GLUE's metrics: mcc (CoLA), pearson/spearman (STS-B), f1 of class 1, accuracy.

    Correlations of constant predictions are NaN (scipy's warning about it is silenced: the
    fine-tuning report names such a run itself). Accuracy, F1 and MCC are computed from the
    confusion counts with numpy, by scikit-learn's definitions (``accuracy_score``,
    ``f1_score`` with its binary default and 0 where nothing is positive,
    ``matthews_corrcoef`` with its multi-class form and 0 where a marginal is constant; a
    test holds them equal to scikit-learn's on random and degenerate inputs): importing
    scikit-learn costs 2-3 s (it imports scipy and pandas; 2.6 s of a 53 s MRPC fine-tune on
    a Zen 4, bench/RESULTS.md), so only the correlations import a library, scipy's."""
    import importlib
    import warnings

    import numpy as np

    p, y = np.asarray(preds), np.asarray(labels)

    def lib(name: str) -> Any:
        return importlib.import_module(name)

    scores = {"accuracy": lambda: np.mean(p == y),
              "f1": lambda: binary_f1(y, p),
              "mcc": lambda: matthews(y, p),
              "pearson": lambda: lib("scipy.stats").pearsonr(p, y)[0],
              "spearman": lambda: lib("scipy.stats").spearmanr(p, y)[0]}
    unknown = [n for n in names if n not in scores]
    if unknown:
        raise ValueError(f"unknown metric {unknown[0]!r}")
    if p.shape != y.shape:
        raise ValueError(f"{p.shape} predictions against {y.shape} labels")
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="An input array is constant")
        return {name: float(scores[name]()) for name in names}


def confusion_counts(labels: Any, preds: Any, classes: int) -> Any:
    """The classes x classes matrix of counts, row = label, column = prediction (what
    scikit-learn's ``confusion_matrix(labels, preds, labels=range(classes))`` returns; pairs
    with an id outside the range are not counted)."""
    import numpy as np

    y, p = np.asarray(labels, dtype=np.int64).ravel(), np.asarray(preds, dtype=np.int64).ravel()
    keep = (y >= 0) & (y < classes) & (p >= 0) & (p < classes)
    cells = np.bincount(y[keep] * classes + p[keep], minlength=classes * classes)
    return cells.reshape(classes, classes)


def binary_f1(labels: Any, preds: Any) -> float:
    """F1 of class 1 over 0/1 ids: 2 tp / (2 tp + fp + fn), 0 where no label or prediction is
    1 (scikit-learn's ``f1_score`` default)."""
    import numpy as np

    y, p = np.asarray(labels), np.asarray(preds)
    if not (np.isin(y, (0, 1)).all() and np.isin(p, (0, 1)).all()):
        raise ValueError("f1 is the binary F1 of class 1: ids must be 0 or 1")
    (_, fp), (fn, tp) = confusion_counts(y, p, 2)
    return float(2 * tp / (2 * tp + fp + fn)) if tp + fp + fn else 0.0


def matthews(labels: Any, preds: Any) -> float:
    """Matthews' correlation over any number of classes (Gorodkin's form, which is
    scikit-learn's): 0 where the labels or the predictions are all one class."""
    import numpy as np

    y, p = np.asarray(labels, dtype=np.int64), np.asarray(preds, dtype=np.int64)
    if y.size == 0:
        return 0.0
    lo = int(min(y.min(), p.min()))
    c = confusion_counts(y - lo, p - lo, int(max(y.max(), p.max())) - lo + 1).astype(np.float64)
    t, q, n = c.sum(axis=1), c.sum(axis=0), c.sum()
    cov_tp = np.trace(c) * n - t @ q
    cov_pp, cov_tt = n * n - q @ q, n * n - t @ t
    return float(cov_tp / np.sqrt(cov_tt * cov_pp)) if cov_tt * cov_pp else 0.0


def roc_auc(labels: Any, scores: Any) -> float:
    """Area under the ROC curve of ``scores`` for the 0/1 ``labels`` (scikit-learn's
    ``roc_auc_score`` of binary labels): the Mann-Whitney statistic, a tied pair counting
    half; NaN where one class is absent. Without scikit-learn for its import's 2-3 s, as the
    metrics above (pretraining's validation scores every held-out token with it)."""
    import numpy as np

    y = np.asarray(labels).ravel() == 1
    s = np.asarray(scores, dtype=np.float64).ravel()
    n1 = int(y.sum())
    n0 = y.size - n1
    if not (n1 and n0):
        return float("nan")
    _, inverse, count = np.unique(s, return_inverse=True, return_counts=True)
    ranks = (np.cumsum(count) - (count - 1) / 2)[inverse.ravel()]  # 1-based, ties averaged
    return float((ranks[y].sum() - n1 * (n1 + 1) / 2) / (n1 * n0))


def encode(tok: Tokenizer, examples: list[Example], max_length: int,
           labels: dict[str, int] | None, regression: bool) -> dict[str, Any]:
    """Tokenize ([CLS] A [SEP] B [SEP]), truncate to max_length, pad to the longest; tensors
    input_ids, token_type_ids, attention_mask (and labels when every example has one)."""
    import torch


    tok.enable_truncation(max_length)
    pad = special_names(tok)["pad"]
    tok.enable_padding(pad_id=tok.token_to_id(pad), pad_token=pad)
    inputs = [(e.text_a, e.text_b) if e.text_b is not None else e.text_a for e in examples]
    encs = tok.encode_batch(inputs)
    out = {
        "input_ids": torch.tensor([e.ids for e in encs]),
        "token_type_ids": torch.tensor([e.type_ids for e in encs]),
        "attention_mask": torch.tensor([e.attention_mask for e in encs]),
    }
    if all(e.label is not None for e in examples):
        if regression:
            out["labels"] = torch.tensor([float(e.label) for e in examples])  # type: ignore[arg-type]
        else:
            assert labels is not None
            out["labels"] = torch.tensor([labels[str(e.label)] for e in examples])
    return out


def finite_number(value: Any) -> float | None:
    """``value`` as a finite float (a score column's cell), or None where it is not one."""
    try:
        x = float(value)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None
