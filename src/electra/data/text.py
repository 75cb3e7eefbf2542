"""Reading raw text: files, folders and globs; plain text, JSONL and gzip; bad bytes counted.

The input format is BERT's: one sentence or paragraph per line, a blank line between
documents. A JSONL record is one document whose text field may hold several lines.
Text is read in chunks of whole documents, so that work can be split across processes in a
way that does not depend on how many there are.
"""

from __future__ import annotations

import glob
import gzip
import hashlib
import json
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from electra.errors import UserError

TEXT_SUFFIXES = (".txt", ".text", ".jsonl", ".txt.gz", ".text.gz", ".jsonl.gz")


def expand_inputs(paths: Iterable[str | os.PathLike[str]], flag: str = "--input") -> list[Path]:
    """Files named directly, text files found under folders, and glob matches, in a stable order.

    Raises:
        UserError: for a path that matches nothing, or when no file is found at all.
    """
    files: list[Path] = []
    for raw in paths:
        p = Path(raw)
        if p.is_dir():
            found = sorted(f for f in p.rglob("*") if f.is_file()
                           and not f.name.startswith(".") and f.name.endswith(TEXT_SUFFIXES))
            if not found:
                raise UserError(f"{flag} {p}: the folder holds no text files "
                                f"({', '.join(TEXT_SUFFIXES)})")
            files += found
        elif p.is_file():
            files.append(p)
        elif glob.has_magic(str(raw)):
            found = sorted(Path(f) for f in glob.glob(str(raw), recursive=True)
                           if Path(f).is_file())
            if not found:
                raise UserError(f"{flag} {raw}: the pattern matches no file")
            files += found
        else:
            raise UserError(f"{flag} {raw}: no such file or folder")
    if not files:
        raise UserError(f"{flag}: no input files given")
    seen: set[Path] = set()
    unique = []
    for f in files:
        if f.resolve() not in seen:
            seen.add(f.resolve())
            unique.append(f)
    return unique


def _open(path: Path) -> BinaryIO:
    return gzip.open(path, "rb") if path.name.endswith(".gz") else open(path, "rb")


def _is_jsonl(path: Path) -> bool:
    return path.name.endswith((".jsonl", ".jsonl.gz"))


@dataclass
class Chunk:
    """Whole documents as stripped lines, "" between documents."""

    index: int
    lines: list[str]
    n_docs: int = 0
    bad_bytes: int = 0  # undecodable bytes replaced by U+FFFD


@dataclass
class ReadStats:
    """What the reader saw: per-file sha256 and byte counts, bad bytes."""

    files: dict[str, dict[str, object]] = field(default_factory=dict)
    bytes: int = 0
    bad_bytes: int = 0
    docs: int = 0


def _decode(raw: bytes) -> tuple[str, int]:
    try:
        return raw.decode("utf-8"), 0
    except UnicodeDecodeError:
        text = raw.decode("utf-8", errors="replace")
        return text, text.count("\ufffd") - raw.count("\ufffd".encode())


def iter_lines(path: Path, text_field: str, stats: ReadStats) -> Iterator[tuple[str, int]]:
    """(line, bad_bytes) for each line of a file, "" marking document ends; hashes the file."""
    h = hashlib.sha256()
    n = 0
    jsonl = _is_jsonl(path)
    with _open(path) as f:
        for lineno, raw in enumerate(f, 1):
            h.update(raw)
            n += len(raw)
            text, bad = _decode(raw)
            if jsonl:
                if not text.strip():
                    continue
                try:
                    record = json.loads(text)
                except json.JSONDecodeError as err:
                    raise UserError(f"{path}:{lineno}: not valid JSON ({err.msg}); JSONL "
                                    f"needs one object per line") from None
                if not isinstance(record, dict) or text_field not in record:
                    raise UserError(f"{path}:{lineno}: no {text_field!r} field; name the "
                                    f"field with --text-field")
                for part in str(record[text_field]).split("\n"):
                    yield part.strip(), bad
                    bad = 0
                yield "", 0
            else:
                yield text.strip(), bad
    yield "", 0  # a file always ends a document
    stats.files[str(path)] = {"sha256": h.hexdigest(), "bytes": n}
    stats.bytes += n


def read_chunks(files: list[Path], text_field: str = "text", chunk_bytes: int = 1 << 20,
                stats: ReadStats | None = None) -> Iterator[Chunk]:
    """Chunks of whole documents, about ``chunk_bytes`` of text each, streamed.

    A document longer than 8 chunks is cut at a line boundary so memory stays bounded.
    Chunk boundaries depend only on the text, never on the number of workers.
    """
    stats = stats if stats is not None else ReadStats()
    chunk = Chunk(0, [])
    size = 0
    doc_open = False
    for path in files:
        for line, bad in iter_lines(path, text_field, stats):
            chunk.bad_bytes += bad
            stats.bad_bytes += bad
            if line:
                chunk.lines.append(line)
                size += len(line)
                doc_open = True
                if size < 8 * chunk_bytes:
                    continue
            if doc_open:  # end of a document (or a forced cut of a huge one)
                chunk.lines.append("")
                chunk.n_docs += 1
                stats.docs += 1
                doc_open = False
            if size >= chunk_bytes:
                yield chunk
                chunk = Chunk(chunk.index + 1, [])
                size = 0
    if chunk.lines:
        yield chunk
