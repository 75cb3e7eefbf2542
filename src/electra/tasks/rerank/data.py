"""Reranking data: a query and the documents to order for it, from CSV, TSV, JSONL or Parquet.

Two layouts, each a file's rows alike:

- **groups**: a query, its positive and its hard negatives, ``query,positive,negative_1,...``
  (sentence-transformers' ``mine_hard_negatives`` n-tuples; ``anchor`` for ``query``,
  ``negative`` for one negative, or a JSONL list ``negatives``); every row the same number
  of negatives. Optionally a JSONL list ``scores``: a teacher's score for the positive and
  each negative (distillation).
- **scored pairs**: ``query,document,label`` (or ``score``): each pair with its relevance
  (0/1, a probability) or a teacher's score.

``--text-columns Q,P[,N...]`` names a groups file's columns, ``--text-columns Q,D`` with
``--label-column`` a scored one's. A pair is encoded as BERT reads one,
``[CLS] query [SEP] document [SEP]``, cut (the longer side first) at ``max_length``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from electra.data.examples import check_unread, finite_number, header_of, named_records
from electra.data.tokenizer import special_names
from electra.errors import UserError

if TYPE_CHECKING:
    from tokenizers import Tokenizer  # (the types only: the readers stay light)

QUERIES = ("query", "anchor", "question", "sentence1")
DOCUMENTS = ("document", "passage", "text", "sentence2", "answer", "context")
NEGATIVE = re.compile(r"negatives?(?:_?(\d+))?")


@dataclass
class Group:
    """A query, its documents, and each document's target: 1 for a positive and 0 for a
    negative (groups), or the file's score (scored pairs); ``teacher``: a teacher's scores of
    the documents, where the file gives them."""

    query: str
    docs: list[str]
    targets: list[float]
    teacher: list[float] | None = None
    listed: bool = field(default=True)  # a positive then negatives (False: a scored pair)


def _negatives(header: list[str]) -> list[str]:
    """A groups file's negative columns, in their numbers' order."""
    found = [(int(m.group(1) or 0), c) for c in header if (m := NEGATIVE.fullmatch(c))]
    return [c for _, c in sorted(found)]


def read_groups(path: str | Path, text_columns: str | None = None,
                label_column: str | None = None) -> list[Group]:
    """Every row of a groups or scored-pairs file (see the module's docstring); a row without
    a text, a score that is not a number, rows with different numbers of negatives: one line
    naming the row."""
    path = Path(path)
    records = named_records(path)
    cols, score, teacher = _layout(path, header_of(records), text_columns, label_column)
    out = [_group(path, n, row, cols, score, teacher) for n, row in enumerate(records, 1)]
    if score is None:
        width = len(out[0].docs)
        n, odd = next(((n, g) for n, g in enumerate(out, 1) if len(g.docs) != width),
                      (0, None))
        if odd is not None:
            raise UserError(f"{path}: row {n} has {len(odd.docs) - 1} negative(s), row 1 has "
                            f"{width - 1}; give every query the same number")
    return out


def _layout(path: Path, header: list[str], text_columns: str | None,
            label_column: str | None) -> tuple[list[str], str | None, str | None]:
    """The columns read: the query's and the documents' (a positive's and its negatives',
    or a scored pair's document), the score's (scored pairs; None: groups) and a teacher's
    scores' (groups, where the file has them)."""
    given = [c for c in (text_columns or "").split(",") if c]
    if text_columns and len(given) < 2:
        raise UserError(f"--text-columns {text_columns}: give the query's column and the "
                        f"documents' (QUERY,POSITIVE[,NEGATIVE...] or QUERY,DOCUMENT with "
                        f"--label-column)")
    score = label_column or next((c for c in ("label", "score") if c in header), None)
    query = given[0] if given else next((c for c in QUERIES if c in header), None)
    pairs = (len(given) == 2 and score in header) if given else (
        "positive" not in header and score in header)
    if pairs:
        cols = [query, given[1] if given else next((c for c in DOCUMENTS if c in header),
                                                   None)]
    else:
        cols = [query, given[1] if given else "positive",
                *(given[2:] if given else _negatives(header))]
    if None in cols or any(c not in header for c in cols):
        missing = [c for c in cols if c is not None and c not in header]
        raise UserError(
            f"{path}: " + (f"no column {', '.join(map(repr, missing))}" if missing else
                           "no reranking columns") + f" (found {', '.join(map(repr, header))}"
            f"); give query,positive,negative_1,... (groups) or query,document,label (scored "
            f"pairs), or name them with --text-columns (and --label-column)")
    if label_column and not pairs:
        raise UserError(f"--label-column {label_column}: {path} is read as groups (a "
                        f"positive and its negatives), which have no label; drop it, or give "
                        f"--text-columns QUERY,DOCUMENT for scored pairs")
    teacher = "scores" if not pairs and "scores" in header else None
    used = [*cols, *([score] if pairs else []), *([teacher] if teacher else [])]
    check_unread(path, header, [c for c in used if c], bool(text_columns),
                 "name the columns to read: --text-columns QUERY,POSITIVE[,NEGATIVE...] "
                 "(or QUERY,DOCUMENT with --label-column)")
    return [c for c in cols if c], score if pairs else None, teacher


def _group(path: Path, n: int, row: Any, cols: list[str], score: str | None,
           teacher: str | None) -> Group:
    """Row ``n`` of a groups file (``score`` None) or a scored-pairs file."""
    if not isinstance(row, dict):
        raise UserError(f"{path}: row {n} is not an object with named fields")
    texts: list[Any] = [row.get(c) for c in cols[:2]]
    for t in (row.get(c) for c in cols[2:]):  # a JSONL list of negatives: its columns
        texts.extend(t if isinstance(t, list) else [t])
    bad = [i for i, t in enumerate(texts) if not isinstance(t, str) or not t.strip()]
    if bad:
        where = cols[bad[0]] if bad[0] < 2 else f"negative {bad[0] - 1}"
        raise UserError(f"{path}: row {n} has no text in {where!r}")
    if score is not None:
        value = finite_number(row.get(score))
        if value is None:
            raise UserError(f"{path}: row {n}: {score} {row.get(score)!r} is not a number")
        return Group(texts[0], [texts[1]], [value], listed=False)
    if len(texts) < 3:
        raise UserError(f"{path}: row {n} has a positive and no negative; reranking learns "
                        f"to put the positive above negatives: give some (`electra mine` "
                        f"finds them), or scored pairs query,document,label")
    scores = None
    if teacher is not None:
        given = row.get(teacher)
        if (not isinstance(given, list) or len(given) != len(texts) - 1
                or any(finite_number(s) is None for s in given)):
            raise UserError(f"{path}: row {n}: {teacher!r} must list a number for the "
                            f"positive and each negative ({len(texts) - 1})")
        scores = [float(s) for s in given]
    return Group(texts[0], texts[1:], [1.0] + [0.0] * (len(texts) - 2), scores)


def by_query(groups: list[Group]) -> list[Group]:
    """Scored pairs gathered into one group a query (in the order first met), to rank each
    query's documents; groups of a positive and negatives stay as they are."""
    merged: dict[str, Group] = {}
    out: list[Group] = []
    for g in groups:
        if g.listed:
            out.append(g)
            continue
        if g.query not in merged:
            merged[g.query] = Group(g.query, [], [], listed=False)
            out.append(merged[g.query])
        merged[g.query].docs.extend(g.docs)
        merged[g.query].targets.extend(g.targets)
    return out


def encode_pairs(tok: Tokenizer, pairs: list[tuple[str, str]],
                 max_length: int) -> dict[str, torch.Tensor]:
    """(N, T) ids, segments and masks of (query, document) pairs, ``[CLS] q [SEP] d [SEP]``,
    the longer side cut first, padded to the longest."""
    tok.enable_truncation(max_length)
    pad = special_names(tok)["pad"]
    tok.enable_padding(pad_id=tok.token_to_id(pad), pad_token=pad)
    encs = tok.encode_batch(pairs)
    return {k: torch.tensor([getattr(x, attr) for x in encs])
            for k, attr in (("input_ids", "ids"), ("token_type_ids", "type_ids"),
                            ("attention_mask", "attention_mask"))}


def encode_groups(tok: Tokenizer, groups: list[Group], max_length: int,
                  target: str) -> dict[str, torch.Tensor]:
    """(B, K, T) pairs of each group's query and documents, and ``labels``: (B,) zeros
    (``target`` "index": the positive is each group's first document), or (B, K) floats
    ("targets": the files' targets; "teacher": the teacher's scores)."""
    k = len(groups[0].docs) if groups else 1
    flat = encode_pairs(tok, [(g.query, d) for g in groups for d in g.docs], max_length)
    out = {key: v.view(len(groups), k, v.shape[-1]) for key, v in flat.items()}
    if target == "index":
        out["labels"] = torch.zeros(len(groups), dtype=torch.long)
    else:
        out["labels"] = torch.tensor([g.teacher if target == "teacher" else g.targets
                                      for g in groups], dtype=torch.float32)
    return out
