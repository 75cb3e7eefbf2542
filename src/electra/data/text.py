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
import gzip
import hashlib
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from electra.errors import UserError
from electra.io.files import json_line, read_json, sha256_file

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


def _table_records(path: Path, text_field: str) -> Iterator[str | None]:
    """The text field of each record of a Parquet or Arrow (IPC file or stream, as
    ``datasets`` writes) file, read in record batches."""
    import pyarrow as pa

    try:
        if path.name.endswith(".parquet"):
            import pyarrow.parquet as pq

            pf = pq.ParquetFile(path)
            _text_column(pf.schema_arrow, text_field, str(path))
            batches: Iterable[Any] = pf.iter_batches(batch_size=_BATCH_ROWS,
                                                     columns=[text_field])
        else:
            try:  # the stream format (what datasets writes), else the file format
                stream = pa.ipc.open_stream(pa.memory_map(str(path)))
                schema, batches = stream.schema, stream
            except pa.ArrowInvalid:
                file = pa.ipc.open_file(pa.memory_map(str(path)))
                schema = file.schema
                batches = (file.get_batch(i) for i in range(file.num_record_batches))
            _text_column(schema, text_field, str(path))
        for batch in batches:
            yield from batch.column(batch.schema.get_field_index(text_field)).to_pylist()
    except (pa.ArrowException, OSError) as err:
        form = "Parquet" if path.suffix == ".parquet" else "Arrow"
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


def iter_lines(path: Path, text_field: str, stats: ReadStats,
               split: str | None = None) -> Iterator[tuple[str, int]]:
    """(line, bad_bytes) for each line of a file, "" marking document ends; hashes the file."""
    if str(path).startswith(HUB):
        yield from _record_lines(_hub_records(str(path), text_field, split))
        stats.files[str(path)] = {"split": split or "train"}
        return
    if path.name.endswith((".parquet", ".arrow")):
        yield from _record_lines(_table_records(path, text_field))
        size = path.stat().st_size
        stats.files[str(path)] = {"sha256": sha256_file(path), "bytes": size}
        stats.bytes += size
        return
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
                record = json_line(text, f"{path}:{lineno}")
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
                stats: ReadStats | None = None, split: str | None = None) -> Iterator[Chunk]:
    """Chunks of whole documents, about ``chunk_bytes`` of text each, streamed.

    A document longer than 8 chunks is cut at a line boundary so memory stays bounded.
    Chunk boundaries depend only on the text, never on the number of workers.
    """
    stats = stats if stats is not None else ReadStats()
    chunk = Chunk(0, [])
    size = 0
    doc_open = False
    for path in files:
        for line, bad in iter_lines(path, text_field, stats, split):
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
