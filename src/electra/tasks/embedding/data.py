"""Pairs and triplets for embedding fine-tuning, from CSV, TSV, JSONL or Parquet.

Each row is a query (or anchor) and a text relevant to it, optionally with a hard negative:
``--text-columns Q,P`` or ``Q,P,N`` names them; without it, the first of these headers a
file has: ``anchor,positive[,negative]`` (sentence-transformers'), ``query,positive
[,negative]``, ``query,document``, ``sentence1,sentence2``. Every row of a file has the
same number of texts. Each text is encoded alone, ``[CLS] text [SEP]``: (rows, texts, T).
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from electra.data.examples import (
    ROLE_COLUMNS,
    Example,
    check_unread,
    encode,
    finite_number,
    header_of,
    named_records,
)
from electra.errors import UserError

if TYPE_CHECKING:
    from tokenizers import Tokenizer  # (the types only: the readers stay light)

HEADERS = (("anchor", "positive", "negative"), ("query", "positive", "negative"),
           ("query", "document", None), ("sentence1", "sentence2", None))


@dataclass
class Pair:
    """A query, its positive, and (triplets) a hard negative."""

    query: str
    positive: str
    negative: str | None = None

    def texts(self) -> list[str]:
        return [self.query, self.positive] + ([self.negative] if self.negative else [])


def columns_of(path: Path, header: list[str], given: str | None) -> list[str]:
    """The query, positive (and negative) columns: ``given`` (``--text-columns``), else
    the first of :data:`HEADERS` the file's header holds."""
    if given:
        cols = [c for c in given.split(",") if c]
        if len(cols) not in (2, 3):
            raise UserError(f"--text-columns {given}: give the query's and the positive's "
                            f"columns, and a hard negative's if the file has one (2 or 3)")
        return cols
    for q, p, n in HEADERS:
        if q in header and p in header:
            return [q, p] + ([n] if n and n in header else [])
    raise UserError(f"{path}: no pair columns (found {', '.join(map(repr, header))}); name "
                    f"them with --text-columns QUERY,POSITIVE[,NEGATIVE] (or use the headers "
                    f"anchor,positive[,negative])")


def read_pairs(path: str | Path, text_columns: str | None = None,
               score_column: str | None = None, min_score: float | None = None,
               documents_needed: int = 2) -> list[Pair]:
    """Every row of a pairs or triplets file (a short row, an empty text, rows of another
    width: one line naming the row). The columns are every row's together (a JSONL row may
    lack one: then it is refused, never read as a pair). A score or label column (or a text
    column) the file has beside those read is refused unless ``text_columns`` names them
    (:func:`electra.data.examples.check_unread`); with ``min_score``, the rows whose score
    (``score_column``, default score, else label) is below it are left out, and a note says
    how many. A file whose rows hold fewer than ``documents_needed`` different documents is
    refused (two by default: InfoNCE's negatives are the other rows' documents)."""
    path = Path(path)
    records = named_records(path)
    header = header_of(records)
    cols = columns_of(path, header, text_columns)
    missing = [c for c in cols if c not in header]
    if missing:
        raise UserError(f"{path}: no column {', '.join(map(repr, missing))}; found "
                        f"{', '.join(map(repr, header))}")
    score = None
    if min_score is not None:
        score = score_column or next((c for c in ("score", "label") if c in header), None)
        if score not in header:
            raise UserError(f"{path}: --min-score {min_score:g} reads each pair's score, and "
                            f"the file has no {score or 'score or label'} column (found "
                            f"{', '.join(map(repr, header))}); name it with --label-column")
    check_unread(path, header, [*cols, *([score] if score else [])], text_columns is not None,
                 lambda c: _how(c, cols))
    out, below = [], 0
    for n, row in enumerate(records, 1):
        texts = [row.get(c) if isinstance(row, dict) else None for c in cols]
        bad = [c for c, t in zip(cols, texts, strict=True)
               if not isinstance(t, str) or not t.strip()]
        if bad:
            raise UserError(f"{path}: row {n} has no text in {', '.join(map(repr, bad))}")
        if score is not None and min_score is not None:
            value = finite_number(row.get(score))
            if value is None:
                raise UserError(f"{path}: row {n}: {score} {row.get(score)!r} is not a "
                                f"number (--min-score reads it)")
            if value < min_score:
                below += 1
                continue
        out.append(Pair(*texts))  # type: ignore[arg-type]
    left = (f"{below:,} of {len(records):,} pairs scored below --min-score {min_score:g} "
            f"are left out") if below else ""
    documents = {t for p in out for t in p.texts()[1:]}
    if len(documents) < documents_needed:
        raise UserError(f"{path}: {len(out)} row(s) with {len(documents)} different "
                        f"document(s){f' ({left})' if left else ''}; InfoNCE's negatives are "
                        f"the other rows' documents, so it needs at least two different ones")
    if left:
        print(f"electra: note: {path}: {left}; {len(out):,} are read", file=sys.stderr)
    return out


def _how(column: str, cols: list[str]) -> str:
    """How to read a column a pairs file has beside the ones read."""
    if ROLE_COLUMNS.fullmatch(column) and re.fullmatch(
            r"(labels?|gold(_label)?|scores?|similarity|relevance|rating|target|class)",
            column, re.IGNORECASE):
        return (f"--task embedding takes every row as a positive pair, whatever its score; "
                f"train on the pairs scored high with --min-score X (--label-column "
                f"{column}), or name the columns to take every row: --text-columns "
                f"{','.join(cols)}")
    return (f"name the columns to read: --text-columns QUERY,POSITIVE[,NEGATIVE] (now "
            f"{','.join(cols)})")


def encode_texts(tok: Tokenizer, texts: list[str], max_length: int) -> dict[str, torch.Tensor]:
    """(N, T) ids, masks and zero segments, each text ``[CLS] text [SEP]`` alone, padded to
    the longest (the shared encoder of examples: electra.data.examples.encode)."""
    return encode(tok, [Example(t, None, None) for t in texts], max_length, None, False)


def encode_pairs(tok: Tokenizer, pairs: list[Pair], max_length: int, query_prompt: str = "",
                 document_prompt: str = "") -> dict[str, torch.Tensor]:
    """(rows, texts, T) ids, masks and zero segments, each text encoded alone (its prompt
    before it: the query's, the documents'), and zero ``labels`` (each row's positive is its
    own: the loss reads the rows' order)."""
    k = len(pairs[0].texts()) if pairs else 2
    flat = encode_texts(tok, [(document_prompt if i else query_prompt) + t for p in pairs
                              for i, t in enumerate(p.texts())], max_length)
    return {**{key: v.view(len(pairs), k, v.shape[-1]) for key, v in flat.items()},
            "labels": torch.zeros(len(pairs), dtype=torch.long)}
