"""Reading raw text: files, folders and globs; plain text, JSONL, gzip, Parquet, Arrow and
`datasets.save_to_disk` folders (and, given a network, a hub dataset streamed by `datasets`);
bad bytes counted.

The input format is BERT's: one sentence or paragraph per line, a blank line between
documents. A JSONL, Parquet or Arrow record is one document whose text field may hold several
lines; Parquet and Arrow are streamed in record batches, so memory stays bounded.
Text is read in chunks of whole documents, so that work can be split across processes in a
way that does not depend on how many there are.
"""

from __future__ import annotations

import glob
import hashlib
import os
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from itertools import chain
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from electra.errors import UserError
from electra.io import remote
from electra.io.files import json_line, read_json, sha256_file
from electra.io.outputs import MARK

TEXT_SUFFIXES = (".txt", ".text", ".jsonl", ".txt.gz", ".text.gz", ".jsonl.gz", ".parquet",
                 ".arrow")
HUB = "hub:"  # --input hub:NAME[/CONFIG]: a dataset on the Hugging Face hub, streamed
_BATCH_ROWS = 1024  # Parquet/Arrow records per batch read


def _saved_dataset(folder: Path, split: str | None, flag: str) -> list[Path] | None:
    """The Arrow files of a ``datasets.save_to_disk`` folder (a Dataset, or the ``split`` of
    a DatasetDict: ``train`` or its only split by default); None for any other folder."""
    if (folder / "dataset_dict.json").is_file():
        info = read_json(folder / "dataset_dict.json", "a datasets folder's splits")
        splits = info.get("splits", []) if isinstance(info, dict) else []
        chosen = split or ("train" if "train" in splits or len(splits) != 1 else splits[0])
        if chosen not in splits:
            raise UserError(f"{flag} {folder}: a datasets folder without the split "
                            f"{chosen!r}; its splits are {', '.join(splits)} (choose one "
                            f"with --split)")
        return _saved_dataset(folder / chosen, None, flag)
    if not (folder / "state.json").is_file() or not (folder / "dataset_info.json").is_file():
        return None
    state = read_json(folder / "state.json", "a datasets folder's state")
    if not isinstance(state, dict):
        raise UserError(f"{flag} {folder}/state.json: not a datasets state (a JSON object)")
    own = state.get("_split") or (folder.name if (folder.parent / "dataset_dict.json").is_file()
                                  else None)  # a split's folder inside a DatasetDict
    if split is not None and own not in (None, split):
        raise UserError(f"{flag} {folder}: a datasets folder of the {own!r} split, not "
                        f"{split!r}; drop --split or give that split's folder")
    files = [folder / f["filename"] for f in state.get("_data_files", [])]
    missing = [f.name for f in files if not f.is_file()]
    if missing or not files:
        raise UserError(f"{flag} {folder}: a datasets folder missing its Arrow files "
                        f"({', '.join(missing) or 'none listed'}); save it again")
    return files


def expand_inputs(paths: Iterable[str | os.PathLike[str]], flag: str = "--input",
                  split: str | None = None) -> list[Path]:
    """Files named directly, text files found under folders, the Arrow files of a
    ``save_to_disk`` folder (its ``split``), glob matches, and ``hub:NAME`` sources kept as
    they are, in a stable order.

    Raises:
        UserError: for a path that matches nothing, or when no file is found at all.
    """
    files: list[Path] = []
    for raw in paths:
        p = Path(raw)
        if str(raw).startswith(HUB):
            files.append(Path(str(raw)))
            continue
        saved = _saved_dataset(p, split, flag) if p.is_dir() else None
        if saved is not None:
            files += saved
        elif p.is_dir():
            found = sorted(f for f in p.rglob("*") if f.is_file()
                           and not f.name.startswith(".") and f.name.endswith(TEXT_SUFFIXES))
            found = _without_outputs(found, [m.parent for m in p.rglob(MARK)], str(raw), flag,
                                     str(p))
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


def _open(path: str | Path, unpack: bool = True) -> BinaryIO:
    """A file's bytes, local or a store's (``electra.io.remote.open_bytes``)."""
    return remote.open_bytes(path, unpack)


def input_size(path: str | Path) -> int:
    """A local file's or a store's file's size in bytes."""
    return remote.size(path)


def _is_jsonl(path: str | Path) -> bool:
    return str(path).endswith((".jsonl", ".jsonl.gz"))


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


def _text_column(schema: Any, text_field: str, where: str) -> None:
    """Refuse a table without a text column named ``text_field``, naming the fields found."""
    import pyarrow as pa

    if text_field not in schema.names:
        raise UserError(f"{where}: no {text_field!r} field (the fields are "
                        f"{', '.join(schema.names)}); name the text field with --text-field")
    kind = schema.field(text_field).type
    if not (pa.types.is_string(kind) or pa.types.is_large_string(kind)
            or getattr(pa.types, "is_string_view", lambda _: False)(kind)):
        raise UserError(f"{where}: the {text_field!r} field holds {kind}, not text; name the "
                        f"text field with --text-field")


def _table_records(path: str | Path, text_field: str,
                   row_groups: list[int] | None = None) -> Iterator[str | None]:
    """The text field of each record of a Parquet or Arrow (IPC file or stream, as
    ``datasets`` writes) file, read in record batches (of a Parquet file's ``row_groups``
    alone, if given)."""
    import pyarrow as pa

    try:
        if str(path).endswith(".parquet"):
            import pyarrow.parquet as pq

            pf = pq.ParquetFile(remote.table_file(path))
            _text_column(pf.schema_arrow, text_field, str(path))
            batches: Iterable[Any] = pf.iter_batches(batch_size=_BATCH_ROWS,
                                                     row_groups=row_groups,
                                                     columns=[text_field])
        else:
            try:  # the stream format (what datasets writes), else the file format
                stream = pa.ipc.open_stream(remote.table_file(path, mapped=True))
                schema, batches = stream.schema, stream
            except pa.ArrowInvalid:
                file = pa.ipc.open_file(remote.table_file(path, mapped=True))
                schema = file.schema
                batches = (file.get_batch(i) for i in range(file.num_record_batches))
            _text_column(schema, text_field, str(path))
        for batch in batches:
            yield from batch.column(batch.schema.get_field_index(text_field)).to_pylist()
    except (pa.ArrowException, OSError) as err:
        form = "Parquet" if str(path).endswith(".parquet") else "Arrow"
        raise UserError(f"{path}: cannot be read as {form} ({str(err).splitlines()[0]}); the "
                        f"file is damaged or not {form}") from None


def _hub_records(source: str, text_field: str, split: str | None) -> Iterator[str | None]:
    """The text field of each record of a hub dataset, streamed by ``datasets``."""
    try:
        import datasets
    except ImportError:
        raise UserError(f"--input {source}: reading a hub dataset needs the datasets "
                        f"package (pip install datasets)") from None
    name, _, config = source[len(HUB):].partition("/")
    try:
        stream = datasets.load_dataset(name, config or None, split=split or "train",
                                       streaming=True)
        for record in stream:
            if text_field not in record:
                raise UserError(f"--input {source}: no {text_field!r} field (the fields "
                                f"are {', '.join(record)}); name it with --text-field")
            yield record[text_field]
    except UserError:
        raise
    except Exception as err:  # network, unknown names: datasets raises many kinds
        raise UserError(f"--input {source}: the hub dataset cannot be streamed "
                        f"({str(err).splitlines()[0] if str(err) else type(err).__name__})"
                        ) from None


def _record_lines(records: Iterable[str | None]) -> Iterator[tuple[str, int]]:
    """A record per document: its lines, then the document's end."""
    for text in records:
        if text:
            for part in text.split("\n"):
                yield part.strip(), 0
        yield "", 0


def _parse_lines(raws: Iterable[bytes], text_field: str, jsonl: bool,
                 where: Callable[[int], str]) -> Iterator[tuple[str, int]]:
    """(line, bad_bytes) for raw lines of a text or JSONL file, "" ending each JSONL record;
    ``where(i)`` names the ``i``-th raw line (1-based) in an error."""
    for i, raw in enumerate(raws, 1):
        text, bad = _decode(raw)
        if jsonl:
            if not text.strip():
                continue
            record = json_line(text, where(i))
            if not isinstance(record, dict) or text_field not in record:
                raise UserError(f"{where(i)}: no {text_field!r} field; name the field with "
                                f"--text-field")
            for part in str(record[text_field]).split("\n"):
                yield part.strip(), bad
                bad = 0
            yield "", 0
        else:
            yield text.strip(), bad


def _is_table(path: str | Path) -> bool:
    return str(path).endswith((".parquet", ".arrow"))


def iter_lines(path: str | Path, text_field: str, stats: ReadStats,
               split: str | None = None) -> Iterator[tuple[str, int]]:
    """(line, bad_bytes) for each line of a file, "" marking document ends; hashes the file."""
    if str(path).startswith(HUB):
        yield from _record_lines(_hub_records(str(path), text_field, split))
        stats.files[str(path)] = {"split": split or "train"}
        return
    if _is_table(path):
        yield from _record_lines(_table_records(path, text_field))
        path = Path(path)
        size = path.stat().st_size
        stats.files[str(path)] = {"sha256": sha256_file(path), "bytes": size}
        stats.bytes += size
        return
    h = hashlib.sha256()
    n = 0

    def hashed(f: BinaryIO) -> Iterator[bytes]:
        nonlocal n
        for raw in f:
            h.update(raw)
            n += len(raw)
            yield raw

    with _open(path) as f:
        yield from _parse_lines(hashed(f), text_field, _is_jsonl(path),
                                lambda i: f"{path}:{i}")
    yield "", 0  # a file always ends a document
    stats.files[str(path)] = {"sha256": h.hexdigest(), "bytes": n}
    stats.bytes += n


def file_stats(path: str, split: str | None = None) -> dict[str, object]:
    """What :func:`iter_lines` records of a file (its ``ReadStats.files`` entry), read alone:
    the sha256 and size of its bytes (a gzipped text file's once unpacked)."""
    if path.startswith(HUB):
        return {"split": split or "train"}
    h = hashlib.sha256()
    n = 0
    with _open(path, unpack=not _is_table(path)) as f:
        while block := f.read(1 << 20):
            h.update(block)
            n += len(block)
    return {"sha256": h.hexdigest(), "bytes": n}


def _without_outputs(found: list[Any], marked: list[Any], given: str, flag: str,
                     top: Any) -> list[Any]:
    """A folder's text files less those inside an electra output in it (a folder with the
    ``.electra.json`` mark: prepared data's vocab.txt, a run's files), which are no corpus
    (a note names each one skipped); the folder itself an output: one line."""
    if not marked:
        return found
    if any(str(m).rstrip("/") == str(top).rstrip("/") for m in marked):
        raise UserError(f"{flag} {given} is an electra output (its {MARK}), not text; give "
                        f"the text files it was made from")
    kept = [f for f in found if not any(str(f).startswith(str(m).rstrip("/") + "/")
                                        for m in marked)]
    for m in sorted({str(m) for m in marked}):
        print(f"electra: note: {flag} {given}: skipping {m}, an electra output inside it "
              f"(its files are no corpus)", file=sys.stderr)
    return kept


def remote_inputs(url: str, flag: str = "--input") -> list[str]:
    """The files of a store's URL, as :func:`expand_inputs` finds local ones: the file, the
    text files under a folder (``TEXT_SUFFIXES``), or a pattern's matches, sorted."""
    with remote.reached(url, flag):
        fs, inside = remote.filesystem(url)
        if glob.has_magic(inside):
            found = sorted(f for f in fs.glob(inside) if fs.isfile(f))
            if not found:
                raise UserError(f"{flag} {url}: the pattern matches no file")
        elif fs.isdir(inside):
            keys = fs.find(inside)
            found = sorted(f for f in keys if f.endswith(TEXT_SUFFIXES)
                           and not f.rpartition("/")[2].startswith("."))
            found = _without_outputs(found, [k.rpartition("/")[0] for k in keys
                                             if k.endswith("/" + MARK)], url, flag, inside)
            if not found:
                raise UserError(f"{flag} {url}: the folder holds no text files "
                                f"({', '.join(TEXT_SUFFIXES)})")
        elif fs.isfile(inside):
            found = [inside]
        else:
            raise FileNotFoundError(url)
        return [fs.unstrip_protocol(f) for f in found]


@dataclass(frozen=True)
class Piece:
    """A part of one input that a worker reads alone: the lines of a text or JSONL file that
    begin in bytes ``[start, end)``, a Parquet file's row groups ``[start, end)``, or (``end``
    -1) the whole file; ``last``: it ends its file (whose end ends a text file's document).
    The lines of a file's pieces, in order, are the file's (:func:`piece_lines`, tested equal
    to :func:`iter_lines`)."""

    path: str
    start: int = 0
    end: int = -1
    last: bool = True


PIECE_MIN = 1 << 20  # bytes: a chosen piece size is at least this...
PIECE_MAX = 256 << 20  # ...and at most this


def plan_pieces(files: list[str | Path], piece_bytes: int | None = None,
                workers: int = 1) -> list[Piece]:
    """Each input as pieces of about ``piece_bytes`` (None: about 4 a worker, 1 to 256 MiB;
    the output of a prepare does not depend on it): an uncompressed text or JSONL file cut by
    byte ranges (a line belongs to the piece it begins in), a Parquet file by its row groups
    (``start``, ``end``: a range of them); a gzipped or Arrow file, or a hub dataset, is one
    piece."""
    sizes = [0 if (str(path).startswith(HUB) or str(path).endswith(".gz") or _is_table(path))
             else input_size(path) for path in files]  # each read once (a URL's: a request)
    if piece_bytes is None:
        piece_bytes = min(PIECE_MAX, max(PIECE_MIN, sum(sizes) // (4 * workers) + 1))
    pieces = []
    for path, size in zip(files, sizes, strict=True):
        if str(path).endswith(".parquet"):
            pieces += _row_group_pieces(str(path), piece_bytes)
            continue
        if size <= piece_bytes:
            pieces.append(Piece(str(path)))
            continue
        starts = range(0, size, piece_bytes)
        pieces += [Piece(str(path), s, min(s + piece_bytes, size), s + piece_bytes >= size)
                   for s in starts]
    return pieces


def _row_group_pieces(path: str, piece_bytes: int) -> list[Piece]:
    """A Parquet file's row groups, consecutive ones together up to ``piece_bytes`` (their
    size unpacked, as the file's footer gives it)."""
    import pyarrow.parquet as pq

    try:
        with _open(path) as f:
            meta = pq.ParquetFile(f).metadata
    except Exception:  # not Parquet: the reader says so in one line, as it does for a file
        return [Piece(path)]
    sizes = [meta.row_group(i).total_byte_size for i in range(meta.num_row_groups)]
    if sum(sizes) <= piece_bytes:
        return [Piece(path)]
    pieces, start, size = [], 0, 0
    for i, n in enumerate(sizes):
        size += n
        if size >= piece_bytes or i == len(sizes) - 1:
            pieces.append(Piece(path, start, i + 1, i == len(sizes) - 1))
            start, size = i + 1, 0
    return pieces


def hashed_as_read(piece: Piece) -> bool:
    """Whether :func:`piece_lines` can checksum the piece's file as it reads it: a whole
    text or JSONL file (not a range, a table or a hub dataset)."""
    return piece.end < 0 and not piece.path.startswith(HUB) and not _is_table(piece.path)


def piece_lines(piece: Piece, text_field: str = "text", split: str | None = None,
                stats: ReadStats | None = None) -> Iterator[tuple[str, int]]:
    """(line, bad_bytes) for each line of a :class:`Piece`, as :func:`iter_lines` gives them
    (errors name the same file:line); with ``stats``, a piece :func:`hashed_as_read` has its
    file's checksum and size recorded there as iter_lines records them."""
    path = piece.path
    if stats is not None and hashed_as_read(piece):
        yield from iter_lines(path, text_field, stats, split)
        return
    if path.startswith(HUB):
        yield from _record_lines(_hub_records(piece.path, text_field, split))
        return
    if _is_table(path):
        groups = list(range(piece.start, piece.end)) if piece.end >= 0 else None
        yield from _record_lines(_table_records(path, text_field, groups))
        return
    first = piece.start

    def where(i: int) -> str:  # the line number, counted only for an error
        with _open(path) as f:
            before = f.read(first).count(b"\n") if first else 0
        return f"{path}:{before + i}"

    def lines(f: BinaryIO) -> Iterator[bytes]:
        nonlocal first
        if piece.start:  # the line that began before the range is the piece before's
            f.seek(piece.start - 1)
            first = piece.start - 1 + len(f.readline())
        pos = first
        for raw in f:
            if pos >= piece.end:
                return
            pos += len(raw)
            yield raw

    with _open(path) as f:
        yield from _parse_lines(f if piece.end < 0 else lines(f), text_field,
                                _is_jsonl(path), where)
    if piece.last:
        yield "", 0  # a file always ends a document


def read_chunks(files: list[Path], text_field: str = "text", chunk_bytes: int = 1 << 20,
                stats: ReadStats | None = None, split: str | None = None) -> Iterator[Chunk]:
    """Chunks of whole documents, about ``chunk_bytes`` of text each, streamed
    (:func:`chunk_lines` over every file's lines).

    Chunk boundaries depend only on the text, never on the number of workers.
    """
    stats = stats if stats is not None else ReadStats()
    lines = chain.from_iterable(iter_lines(path, text_field, stats, split) for path in files)
    return chunk_lines(lines, chunk_bytes, stats)


def chunk_lines(lines: Iterable[tuple[str, int]], chunk_bytes: int,
                stats: ReadStats | None = None, index: int = 0) -> Iterator[Chunk]:
    """Lines (and their bad bytes) in chunks of whole documents: a chunk ends at the first
    document end once it holds ``chunk_bytes`` characters, or (a document longer than 8
    chunks, cut so memory stays bounded) at the line that brings it to 8 times that.
    :func:`chunk_ends` finds the same ends from the lines' lengths alone."""
    stats = stats if stats is not None else ReadStats()
    chunk = Chunk(index, [])
    size = 0
    doc_open = False
    for line, bad in lines:
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


def chunk_ends(lengths: Iterable[np.ndarray], chunk_bytes: int
               ) -> Iterator[tuple[int, int]]:
    """Where :func:`chunk_lines` ends each chunk, from the lines' lengths alone (characters,
    0 for a blank line), given piece by piece: ``(piece, line)`` of each chunk's last line,
    the stream's last line for a last chunk. Vectorized: a search per chunk, not a step per
    line, so one process finds a large corpus's ends."""
    size = 0  # characters of the chunk so far, from the pieces before
    last = None  # (piece, line) of the stream's last line
    for k, c in enumerate(lengths):
        c = np.asarray(c, dtype=np.int64)
        if not len(c):
            continue
        last = (k, len(c) - 1)
        total = np.cumsum(c)
        blanks = np.flatnonzero(c == 0)
        i = 0
        while i < len(c):
            base = total[i - 1] if i else 0
            # Past chunk_bytes (a line with text: while below it, no blank line ends the
            # chunk; at once if the pieces before brought it there, the document still open).
            full = max(i, int(np.searchsorted(total, chunk_bytes - size + base)))
            cut = len(c)
            b = int(np.searchsorted(blanks, full))
            if b < len(blanks):
                cut = int(blanks[b])
            huge = int(np.searchsorted(total, 8 * chunk_bytes - size + base))
            cut = min(cut, huge)
            if cut >= len(c):
                size += int(total[-1] - base)
                break
            yield k, cut
            size = 0
            i = cut + 1
    if size and last is not None:
        yield last
