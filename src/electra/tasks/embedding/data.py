"""Pairs and triplets for embedding fine-tuning, from CSV, TSV, JSONL or Parquet.

Each row is a query (or anchor) and a text relevant to it, optionally with a hard negative:
``--text-columns Q,P`` or ``Q,P,N`` names them; without it, the first of these headers a
file has: ``anchor,positive[,negative]`` (sentence-transformers'), ``query,positive
[,negative]``, ``query,document``, ``sentence1,sentence2``. Every row of a file has the
same number of texts. Each text is encoded alone, ``[CLS] text [SEP]``: (rows, texts, T).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from electra.data.examples import Example, _records, encode
from electra.errors import UserError

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


def read_pairs(path: str | Path, text_columns: str | None = None) -> list[Pair]:
    """Every row of a pairs or triplets file (a short row, an empty text, rows of another
    width: one line naming the row)."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: no such file")
    records = _records(path)
    if not records:
        raise UserError(f"{path}: no rows")
    if not isinstance(records[0], dict):
        raise UserError(f"{path}: row 1 is not an object with named fields")
    cols = columns_of(path, list(records[0]), text_columns)
    missing = [c for c in cols if c not in records[0]]
    if missing:
        raise UserError(f"{path}: no column {', '.join(map(repr, missing))}; found "
                        f"{', '.join(map(repr, records[0]))}")
    out = []
    for n, row in enumerate(records, 1):
        texts = [row.get(c) if isinstance(row, dict) else None for c in cols]
        bad = [c for c, t in zip(cols, texts, strict=True)
               if not isinstance(t, str) or not t.strip()]
        if bad:
            raise UserError(f"{path}: row {n} has no text in {', '.join(map(repr, bad))}")
        out.append(Pair(*texts))  # type: ignore[arg-type]
    return out


def encode_texts(tok: Any, texts: list[str], max_length: int) -> dict[str, torch.Tensor]:
    """(N, T) ids, masks and zero segments, each text ``[CLS] text [SEP]`` alone, padded to
    the longest (the shared encoder of examples: electra.data.examples.encode)."""
    return encode(tok, [Example(t, None, None) for t in texts], max_length, None, False)


def encode_pairs(tok: Any, pairs: list[Pair], max_length: int) -> dict[str, torch.Tensor]:
    """(rows, texts, T) ids, masks and zero segments, each text encoded alone, and zero
    ``labels`` (each row's positive is its own: the loss reads the rows' order)."""
    k = len(pairs[0].texts()) if pairs else 2
    flat = encode_texts(tok, [t for p in pairs for t in p.texts()], max_length)
    return {**{key: v.view(len(pairs), k, v.shape[-1]) for key, v in flat.items()},
            "labels": torch.zeros(len(pairs), dtype=torch.long)}
