"""A prepared folder in a store, read where its rows are needed: ``pretrain --data URL`` with
``train.shuffle=blocks``.

The split's files are read in blocks of ``train.shuffle_block`` rows, each fetched whole (one
ranged read of each file the rows live in, all of a batch's missing blocks at once) into a
local cache of bounded size, then read from there: a process fetches only the blocks its
own rows are in (with ``train.partitions`` as the processes, the blocks of its own part:
its share), and never the folder whole. Under the order of ``train.shuffle=blocks``
(:func:`electra.data.loader.block_order`) a process's rows of a window come from that
window's blocks, so about two windows of blocks are ever in use; the rest of the cache is
what it may keep. The cache is ``ELECTRA_CACHE`` (else ``~/.cache/electra/remote``)
``/stream/``, one folder per URL and process, bounded by ``ELECTRA_CACHE_GB`` (50 by
default) shared among a node's processes (``LOCAL_WORLD_SIZE``); the blocks used longest
ago go first. A block is fetched to ``.part`` and renamed when whole, so a rerun after a
dropped connection fetches only what it lacks; rows are what a local folder of the same
data gives, bit for bit.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any

import numpy as np

from electra import environ
from electra.data.loader import ShardDataset
from electra.errors import UserError
from electra.io import remote
from electra.io.files import parse_json


class BlockCache:
    """One process's blocks, of every store folder it streams, on local disk
    (``stream/rank-N/``), the least recently used removed beyond ``bound`` bytes (one
    instance a process: :func:`block_cache`)."""

    def __init__(self, folder: Path, bound: float) -> None:
        from filelock import FileLock, Timeout

        folder.parent.mkdir(parents=True, exist_ok=True)
        for k in range(1, 1000):  # the first folder no other live process holds
            self.held = FileLock(f"{folder}.lock")
            try:
                self.held.acquire(timeout=0)  # held while this process lives
                break
            except Timeout:
                folder = folder.with_name(f"{folder.name.split('.')[0]}.{k}")
        self.folder, self.bound = folder, bound
        self.lock = threading.Lock()  # the prefetching thread and validation share it
        self.folder.mkdir(parents=True, exist_ok=True)
        self.used: OrderedDict[Path, int] = OrderedDict(  # what is here, oldest use first
            (p, p.stat().st_size) for p in sorted(self.folder.glob("*.bin"),
                                                  key=lambda p: p.stat().st_mtime))
        self.total = sum(self.used.values())
        self.mapped: dict[Path, np.ndarray] = {}  # the blocks opened, by file

    def blocks(self, source: StreamedShards, rel: str, wanted: np.ndarray, rows: int,
               width: int, dtype: np.dtype, total: int) -> dict[int, np.ndarray]:
        """Blocks ``wanted`` of ``source``'s file ``rel`` (``rows`` rows of ``width`` values
        each; the file ``total`` rows), fetched where missing, as arrays (rows, width)
        (mapped: a block removed later stays readable through them)."""
        with self.lock:
            return self._blocks(source, rel, wanted, rows, width, dtype, total)

    def _blocks(self, source: StreamedShards, rel: str, wanted: np.ndarray, rows: int,
                width: int, dtype: np.dtype, total: int) -> dict[int, np.ndarray]:
        row_bytes = width * dtype.itemsize
        key = f"{source.key}-{rel.replace('/', '-')}-{source.stamps.get(rel, '')}"
        paths = {int(b): self.folder / f"{key}-{int(b)}.bin" for b in wanted}
        missing = [b for b, p in paths.items() if p not in self.used]
        need = sum(min(rows, total - b * rows) * row_bytes for b in paths)
        if need > self.bound:
            raise UserError(f"--data {source.url}: a batch's blocks of {rel} take {_size(need)}, "
                            f"more than the stream's cache holds (ELECTRA_CACHE_GB, shared by "
                            f"a node's processes: {_size(self.bound)} each); raise it, or "
                            f"lower train.shuffle_block or train.shuffle_window")
        if missing:
            starts = [b * rows * row_bytes for b in missing]
            ends = [min((b + 1) * rows, total) * row_bytes for b in missing]
            with remote.reached(source.url, "--data"):
                got = source.fs.cat_ranges([f"{source.base}/{rel}"] * len(missing), starts,
                                           ends, on_error="raise")
            for b, data, s, e in zip(missing, got, starts, ends, strict=True):
                if isinstance(data, BaseException):
                    with remote.reached(source.url, "--data"):
                        raise data
                if len(data) != e - s:
                    raise UserError(f"--data {source.url}: {rel} came back cut short (block {b}: "
                                    f"{len(data)} of {e - s} bytes); run the command again "
                                    f"(with --resume): what was fetched is kept")
                part = paths[b].with_name(paths[b].name + ".part")
                part.write_bytes(data)
                part.replace(paths[b])
                self.used[paths[b]] = len(data)
                self.total += len(data)
                source.fetched.append((rel, b))
        out = {}
        for b, p in paths.items():
            self.used.move_to_end(p)
            if p not in self.mapped:
                self.mapped[p] = np.memmap(p, dtype=dtype, mode="r").reshape(-1, width)
            out[b] = self.mapped[p]  # (mapped: pages are read as rows are)
        self._trim(set(paths.values()))
        return out

    def _trim(self, keep: set[Path]) -> None:
        """The blocks used longest ago removed until the cache is within its bound."""
        if self.total <= self.bound:
            return  # (most batches: no walk over the cache's blocks)
        for p in list(self.used):
            if self.total <= self.bound:
                break
            if p in keep:
                continue
            self.total -= self.used.pop(p)
            self.mapped.pop(p, None)
            p.unlink(missing_ok=True)

    def size(self) -> int:
        """Bytes in the cache now."""
        return sum(p.stat().st_size for p in self.folder.glob("*.bin"))


_CACHES: dict[Path, BlockCache] = {}


def block_cache() -> BlockCache:
    """This process's block cache, one for every folder it streams: ``stream/rank-N`` (its
    ``RANK``; ``rank-N.K`` where another live process holds that one, as two runs on one
    machine would), bounded by ``ELECTRA_CACHE_GB`` shared by ``LOCAL_WORLD_SIZE``
    processes. A later process reuses a folder's blocks."""
    folder = remote.cache_root() / "stream" / f"rank-{environ.get('RANK')}"
    bound = environ.get("ELECTRA_CACHE_GB") * 1e9 / environ.get("LOCAL_WORLD_SIZE")
    mine = _CACHES.get(folder)
    if mine is None or mine.bound != bound or not mine.folder.is_dir():
        if mine is not None:
            mine.held.release()  # (its folder, for the new bound's)
        _CACHES[folder] = mine = BlockCache(folder, bound)
    return mine


def _size(n: float) -> str:
    return f"{n / 1e9:.3g} GB" if n >= 1e8 else f"{n / 1e6:.3g} MB"


class BlockFile:
    """One file of a split in a store, indexed as a (rows, width) array whose rows come
    through the process's :class:`BlockCache` a block at a time."""

    def __init__(self, source: StreamedShards, rel: str, dtype: Any,
                 shape: tuple[int, int], rows: int) -> None:
        self.source, self.rel, self.dtype = source, rel, np.dtype(dtype)
        self.shape, self.rows = shape, rows

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, index: Any) -> np.ndarray:
        columns: Any = slice(None)
        if isinstance(index, tuple):
            index, columns = index
        one = isinstance(index, int | np.integer)
        if one:
            idx = np.array([range(self.shape[0])[index]])  # (a negative index counted back)
        elif isinstance(index, slice):
            idx = np.arange(*index.indices(self.shape[0]))  # the slice's rows alone
        else:
            idx = np.asarray(index, dtype=np.int64)
        which = idx // self.rows
        wanted = np.unique(which)
        got = self.source.cache.blocks(self.source, self.rel, wanted, self.rows,
                                       self.shape[1], self.dtype, self.shape[0])
        out = np.empty((len(idx), self.shape[1]), dtype=self.dtype)
        for b in wanted:
            at = which == b
            out[at] = got[int(b)][idx[at] - b * self.rows]
        out = out[:, columns]
        return out[0] if one else out


class StreamedShards(ShardDataset):
    """A split of a prepared folder in a store (``URL``), its rows fetched in blocks of
    ``block_rows`` as batches need them (:class:`BlockFile`), opened and checked as a local
    folder is: meta.json read, each file's size against it, and the first and last rows'
    token ids and segments."""

    def __init__(self, url: str, split: str = "train", word_starts: bool = False,
                 block_rows: int = 2048) -> None:
        self.url = url.rstrip("/")
        self.key = hashlib.sha1(self.url.encode()).hexdigest()[:16]
        self.block_rows = block_rows
        self.fetched: list[tuple[str, int]] = []  # (file, block): what this split fetched
        self.stamps: dict[str, str] = {}  # file -> its stamp in the store, for the blocks' names
        with remote.reached(self.url, "--data"):
            self.fs, self.base = remote.filesystem(self.url)
        self.cache = block_cache()
        super().__init__(self.url, split, word_starts)

    def _location(self, folder: str | Path) -> Any:
        return str(folder)  # the URL as given (a Path would fold its //)

    def _read_meta(self) -> Any:
        with remote.reached(self.url, "--data"):
            if not self.fs.isfile(f"{self.base}/meta.json"):
                raise UserError(f"--data {self.url}: no meta.json, so this is not prepared "
                                f"data; make it with `electra prepare --out {self.url}`")
            data = self.fs.cat_file(f"{self.base}/meta.json")
        return parse_json(data.decode("utf-8", "replace"), f"--data {self.url}/meta.json",
                          "a prepared folder's", "prepare the data again")

    def _sizes(self, split: str) -> dict[str, int]:
        """The split's files' sizes, and each one's stamp (its ETag or modification time: a
        folder prepared anew at the URL is not read from blocks of the old one)."""
        with remote.reached(self.url, "--data"):
            found = self.fs.find(f"{self.base}/{split}", detail=True)
        for path, info in found.items():
            rel = f"{split}/{path.rpartition('/')[2]}"
            self.stamps[rel] = hashlib.sha1(remote.stamp(info).encode()).hexdigest()[:8]
        return {path.rpartition("/")[2]: int(info["size"]) for path, info in found.items()}

    def _open(self, rel: str, dtype: Any, shape: tuple[int, int]) -> Any:
        return BlockFile(self, rel, dtype, shape, self.block_rows)

    def _sample(self, n: int) -> np.ndarray:
        """The first and last block's rows (two blocks fetched per file)."""
        k = min(n, self.block_rows)
        return np.unique(np.concatenate([np.arange(k), np.arange(n - k, n)]))

    def beside(self, name: str) -> Path | None:
        with remote.reached(self.url, "--data"):
            if not self.fs.isfile(f"{self.base}/{name}"):
                return None
            path = self.cache.folder / f"{self.key}-{name}"
            self.fs.get_file(f"{self.base}/{name}", str(path) + ".part")
        Path(str(path) + ".part").replace(path)
        return path

    def other(self, split: str) -> ShardDataset:
        return StreamedShards(self.url, split, self.with_word_starts, self.block_rows)

    def verify(self, chunk: int = 1 << 16) -> dict[str, int]:
        raise UserError(f"--data {self.url}: `electra prepare --verify` checks a local "
                        f"folder; verify the data where it was prepared")
