"""Where a command's data comes from, decided here and in ``electra.io`` alone.

A **source** is one prepared folder a run reads rows from (:class:`Source`): a folder on this
machine (memory-mapped), a store's URL mirrored whole into the local cache first, or a store's
URL streamed in blocks through a bounded cache (``train.shuffle=blocks``,
``electra.data.stream``). :func:`source` picks one, in one place, from the path and the run's
order; a kind of a plug-in's own (``toy:seed=N`` in the tests) is one class and one
:func:`register` line, and trains through ``pretrain --data toy:...``. A mixture is a list of
(source, share) per length phase (:func:`open_phases`; ``--data``'s grammar:
``electra.data.mixspec``).

The raw files ``prepare`` and the tokenizer trainer read are listed by :func:`input_files`
(local paths, folders, patterns and saved datasets; a store's files by URL); a data file a
command reads whole (``--train``, ``--dev``, a URL's file) is :func:`local_path`'s. This
module imports no torch: the early checks (``electra.commands.checks``) ask it whether a path
names anything (:func:`missing`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from electra.config import TrainConfig, parse_phases
from electra.data.mixspec import Share, parse_data
from electra.data.text import expand_inputs, remote_inputs
from electra.errors import UserError
from electra.io import remote

if TYPE_CHECKING:
    from electra.data.loader import ShardDataset


class Source(Protocol):
    """One prepared folder's rows: where they are, and each split opened as a dataset (with
    the word boundaries where ``words``)."""

    @property
    def path(self) -> str: ...

    def open(self, split: str, words: bool) -> ShardDataset: ...


@dataclass(frozen=True)
class Folder:
    """A prepared folder on this machine, memory-mapped."""

    path: str

    def open(self, split: str, words: bool) -> ShardDataset:
        from electra.data.loader import ShardDataset  # (torch: read when a source opens)

        return ShardDataset(self.path, split, word_starts=words)


@dataclass(frozen=True)
class Mirrored:
    """A store's prepared folder, mirrored whole into the local cache (``electra.io.remote``)
    and read as a local one."""

    path: str

    def open(self, split: str, words: bool) -> ShardDataset:
        from electra.data.loader import ShardDataset  # (torch: read when a source opens)

        return ShardDataset(remote.local(self.path, "--data"), split, word_starts=words)


@dataclass(frozen=True)
class Streamed:
    """A store's prepared folder, its rows fetched in blocks of ``block_rows`` as batches
    need them (``electra.data.stream``)."""

    path: str
    block_rows: int = 2048

    def open(self, split: str, words: bool) -> ShardDataset:
        from electra.data.stream import StreamedShards  # (torch: as the loader)

        return StreamedShards(self.path, split, word_starts=words, block_rows=self.block_rows)


# A kind of source of a plug-in's own, by its prefix (``toy`` reads ``toy:...``): a maker
# from (the path as given, the run's train config or None).
KINDS: dict[str, Callable[[str, Any], Source]] = {}


def register(prefix: str, make: Callable[[str, Any], Source]) -> None:
    """Add a kind of source read from paths ``PREFIX:...`` (the one line a plug-in adds)."""
    if prefix in KINDS or prefix in remote.PACKAGES or prefix == "file":
        raise ValueError(f"source prefix {prefix!r} is already taken")
    KINDS[prefix] = make


def _kind(path: str) -> Callable[[str, Any], Source] | None:
    prefix, sep, _ = path.partition(":")
    return KINDS.get(prefix) if sep else None


def source(path: str, tc: TrainConfig | None = None) -> Source:
    """The source ``path`` names, chosen here once: a registered kind's, a URL streamed
    under ``train.shuffle=blocks`` or mirrored otherwise, a local folder."""
    make = _kind(path)
    if make is not None:
        return make(path, tc)
    if remote.is_url(path):
        if tc is not None and tc.shuffle == "blocks":
            return Streamed(path, tc.shuffle_block)
        return Mirrored(path)
    return Folder(path)


def missing(path: str) -> bool:
    """Whether ``path`` names nothing: a local path that does not exist (a URL, or a
    registered kind's path, is asked when it is read)."""
    return not (remote.is_url(path) or _kind(path) or Path(path).exists())


def local_inputs(pairs: Iterable[tuple[str, Any]]) -> list[tuple[str, Any]]:
    """The (flag, path) pairs that name this machine's paths (what the outputs rule compares
    an ``--out`` with: a registered kind's path is none)."""
    return [(flag, p) for flag, p in pairs if not (isinstance(p, str) and _kind(p))]


def local_path(path: str, flag: str) -> str:
    """A file or folder a command reads whole, as a local path: a URL's mirror in the cache
    (``electra.io.remote.local``), else the path as given."""
    return str(remote.local(path, flag)) if remote.is_url(path) else path


def local_paths(value: str | None, flag: str) -> str | None:
    """A data flag's comma-separated paths (``--train a,b``), each :func:`local_path`'s;
    None stays None."""
    if value is None:
        return None
    return ",".join(local_path(v, flag) for v in value.split(","))


def input_files(paths: Iterable[str], flag: str = "--input",
                split: str | None = None) -> list[Any]:
    """The raw input files of ``paths`` (``prepare``'s, the tokenizer trainer's): local
    paths (``electra.data.text.expand_inputs``: files, folders' text files, patterns, saved
    datasets, ``hub:`` names) and a store's files by URL (``electra.data.text.remote_inputs``:
    ``--engine ray`` reads them on the cluster's nodes), each once, in the order given."""
    paths = list(paths)
    if not any(remote.is_url(p) for p in paths):
        return list(expand_inputs(paths, flag, split=split))
    files: list[Any] = []
    for p in paths:
        for f in remote_inputs(p, flag) if remote.is_url(p) else expand_inputs([p], flag, split):
            if f not in files:
                files.append(f)
    return files


def open_phases(data: str, tc: TrainConfig, words: bool
                ) -> dict[int, list[tuple[ShardDataset, Share]]]:
    """``--data``'s prepared folders by their length, in the order ``train.phases`` reads
    them (one phase without phases): each phase's folder, or its mixture's folders with their
    shares (``electra.data.mixture``); each checked, all of one tokenizer, a phase's all of
    one length."""
    groups = parse_data(data)
    phases = parse_phases(tc.phases)
    if len(groups) > 1 and not phases:
        raise UserError(f"--data {data}: {len(groups)} folders; give one, or set "
                        f"train.phases=LEN:FRACTION,... to train on each length in turn (a mix "
                        f"of one length: A:WEIGHT+B:WEIGHT)")
    found: dict[int, list[tuple[ShardDataset, Share]]] = {}
    for group in groups:
        mix = [(source(s.path, tc).open("train", words), s) for s in group]
        n = mix[0][0].seq_len
        other = next((d for d, _ in mix if d.seq_len != n), None)
        if other is not None:
            raise UserError(f"--data {data}: {other.folder} holds {other.seq_len}-token "
                            f"rows and {mix[0][0].folder} {n}-token ones; a mixture's folders "
                            f"hold one length (each length a phase, comma-separated)")
        if n in found:
            raise UserError(f"--data {data}: two folders hold {n}-token rows; give one "
                            f"folder (or one mixture, A:WEIGHT+B:WEIGHT) per length")
        found[n] = mix
    first = next(iter(found.values()))[0][0]
    for d, _ in (x for mix in found.values() for x in mix):
        if d.meta["tokenizer_sha256"] != first.meta["tokenizer_sha256"]:
            raise UserError(f"--data {data}: {d.folder} was prepared with another "
                            f"tokenizer than {first.folder}; prepare every folder with one")
    lengths = [n for n, *_ in phases] or list(found)
    absent = [n for n in lengths if n not in found]
    unused = [n for n in found if n not in lengths]
    if absent or unused:
        what = (f"no folder holds {absent[0]}-token rows; prepare one with --seq-len "
                f"{absent[0]} and add it as --data A,B" if absent else
                f"no phase reads its {unused[0]}-token rows; name that length in the phases "
                f"or drop the folder")
        raise UserError(f"train.phases={tc.phases} with --data {data}: {what} (the "
                        f"folders hold {', '.join(map(str, sorted(found)))})")
    return {n: found[n] for n in lengths}


def held_out(data: ShardDataset) -> ShardDataset | None:
    """The held-out split beside ``data``, where it was prepared with one (read as ``data``
    is: with word boundaries where it has them)."""
    return data.other("val") if "val" in data.meta["splits"] else None
