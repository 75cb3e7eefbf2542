"""Reading prepared shards: memory-mapped, seeded shuffled order, resumable, rank-aware.

The order is a permutation of the examples per epoch, drawn from ``(seed, epoch)``. Each
step consumes one *global* batch from it; a process of a distributed run takes its own
contiguous slice of that batch, so ranks read disjoint examples and the position in the
data (epoch, examples consumed) means the same thing at any world size.

Opening a split checks it cheaply: meta.json readable and complete, each file the size
meta.json implies, and a sample of rows with every token id inside the vocabulary and every
segment boundary inside its example. :meth:`ShardDataset.verify` (``electra prepare
--verify DATA``) checks every row and the files' checksums.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from electra.data.tokenizer import SpecialTokens
from electra.errors import UserError
from electra.io.files import read_json, sha256_file

FORMAT_VERSION = 1  # of the folders `electra prepare` writes
PACKED_FORMAT = 2  # `electra prepare --pack`: rows of several examples (two more files)
SHARD_FILES = ("ids.bin", "segments.bin", "word_starts.bin")
PACKED_FILES = ("sequences.bin", "types.bin")  # bits: where each example starts; segment B


def shard_files(packed: bool) -> tuple[str, ...]:
    """The files of each split."""
    return SHARD_FILES + PACKED_FILES if packed else SHARD_FILES
META_KEYS = ("format_version", "seq_len", "dtype", "vocab_size", "tokenizer_sha256",
             "special_tokens", "splits")


class ShardDataset:
    """One split (``train`` or ``val``) of a prepared folder, memory-mapped.

    ``word_starts``: batches also hold each token's word-start flag (for whole-word and span
    masking); data prepared without them is refused.
    """

    def __init__(self, folder: str | Path, split: str = "train",
                 word_starts: bool = False) -> None:
        self.folder: Any = self._location(folder)
        meta = self._read_meta()
        missing = [k for k in META_KEYS if not isinstance(meta, dict) or k not in meta]
        if missing:
            raise UserError(f"--data {folder}: meta.json lacks {', '.join(missing)}; prepare "
                            f"the data again")
        self.packed = meta.get("format_version") == PACKED_FORMAT and meta.get("packed") is True
        if meta.get("format_version") != FORMAT_VERSION and not self.packed:
            raise UserError(f"--data {folder}: format version {meta.get('format_version')} "
                            f"but this electra reads {FORMAT_VERSION} and {PACKED_FORMAT} "
                            f"(packed); prepare the data again")
        if split not in meta["splits"]:
            raise UserError(f"--data {folder}: no {split!r} split (it has "
                            f"{', '.join(meta['splits'])}); prepare with --val-fraction or "
                            f"--val-input for a validation split")
        self.meta = meta
        self.split = split
        self.seq_len: int = meta["seq_len"]
        self.special = SpecialTokens(**meta["special_tokens"])
        n = meta["splits"][split]["examples"]
        self.has_word_starts = bool(meta.get("word_starts"))
        if word_starts and not self.has_word_starts:
            raise UserError(f"--data {folder}: no word boundaries (it was prepared by an older "
                            f"electra), which whole-word and span masking need; prepare the "
                            f"data again")
        self.with_word_starts = word_starts
        shapes = [("ids.bin", meta["dtype"], self.seq_len), ("segments.bin", np.uint16, 2)]
        bits = (self.seq_len + 7) // 8
        if self.has_word_starts:
            shapes.append(("word_starts.bin", np.uint8, bits))
        if self.packed:
            shapes += [(name, np.uint8, bits) for name in PACKED_FILES]
        sizes = self._sizes(split)
        for name, dtype, width in shapes:
            expected = n * width * np.dtype(dtype).itemsize
            if sizes.get(name) != expected:
                raise UserError(f"--data {folder}: {split}/{name} is missing or not "
                                f"{expected} bytes as meta.json says (damaged or cut short); "
                                f"prepare the data again")
        self.ids = self._open(f"{split}/ids.bin", meta["dtype"], (n, self.seq_len))
        self.segments = self._open(f"{split}/segments.bin", np.uint16, (n, 2))
        self.word_starts = (self._open(f"{split}/word_starts.bin", np.uint8, (n, bits))
                            if self.has_word_starts else None)
        self.sequences, self.types = ((self._open(f"{split}/{name}", np.uint8, (n, bits))
                                       for name in PACKED_FILES)
                                      if self.packed else (None, None))
        self._check_rows(self._sample(n))

    # -- where the files are: a local folder (a store's, streamed: electra.data.stream) ----
    def _location(self, folder: str | Path) -> Any:
        return Path(folder)

    def _read_meta(self) -> Any:
        meta_path = self.folder / "meta.json"
        if not meta_path.is_file():
            hint = (" (an interrupted `electra prepare` left it incomplete; run it again)"
                    if self.folder.name.endswith(".partial") or
                    self.folder.with_name(self.folder.name + ".partial").exists() else "")
            raise UserError(f"--data {self.folder}: no meta.json, so this is not prepared "
                            f"data{hint}; make it with `electra prepare`")
        return read_json(meta_path, "the prepared data's description")

    def _sizes(self, split: str) -> dict[str, int]:
        """The split's files and their sizes in bytes."""
        d = self.folder / split
        return {p.name: p.stat().st_size for p in d.iterdir() if p.is_file()} \
            if d.is_dir() else {}

    def _open(self, rel: str, dtype: Any, shape: tuple[int, int]) -> Any:
        """One file of rows, indexed as an array (rows, width)."""
        return np.memmap(self.folder / rel, dtype=dtype, mode="r", shape=shape)

    def _sample(self, n: int) -> np.ndarray:
        """The rows checked when the split is opened."""
        return np.unique(np.concatenate([
            np.arange(min(n, 64)), np.arange(max(0, n - 64), n),
            np.random.default_rng(0).integers(0, max(n, 1), 128)])) if n else np.arange(0)

    @property
    def name(self) -> str:
        """The folder's name (what the cards call the data where meta.json names none)."""
        return Path(str(self.folder).rstrip("/")).name

    def beside(self, name: str) -> Path | None:
        """A small file of the folder beside the splits (its tokenizer.json), if it has
        one, as a local path."""
        path = self.folder / name
        return path if path.is_file() else None

    def unigram_counts(self) -> torch.Tensor:
        """How often each token occurs in this split (special tokens: never drawn)."""
        counts = np.zeros(self.vocab_size, dtype=np.int64)
        for first in range(0, len(self), 1 << 16):
            counts += np.bincount(np.asarray(self.ids[first : first + (1 << 16)]).ravel(),
                                  minlength=self.vocab_size)[: self.vocab_size]
        counts[self.special.ids()] = 0
        return torch.from_numpy(counts)

    def other(self, split: str) -> ShardDataset:
        """The same folder's ``split`` (the held-out rows beside the training ones)."""
        return ShardDataset(self.folder, split, word_starts=self.with_word_starts)

    def _check_rows(self, rows: np.ndarray | slice) -> None:
        """Token ids inside the vocabulary and segment ends inside the example, for ``rows``."""
        ids, seg = np.asarray(self.ids[rows]), np.asarray(self.segments[rows]).astype(np.int64)
        if ids.size and int(ids.max()) >= self.vocab_size:
            raise UserError(f"--data {self.folder}: {self.split}/ids.bin: token id "
                            f"{int(ids.max())} is outside the vocabulary of {self.vocab_size} "
                            f"that meta.json declares (damaged data, or meta.json from other "
                            f"data); prepare the data again")
        if seg.size and not ((seg[:, 0] >= 2) & (seg[:, 0] <= seg[:, 1])
                             & (seg[:, 1] <= self.seq_len)).all():
            raise UserError(f"--data {self.folder}: {self.split}/segments.bin holds segment "
                            f"ends outside their examples of {self.seq_len} tokens (damaged); "
                            f"prepare the data again")
        if self.sequences is not None and len(ids) and not (
                np.asarray(self.sequences[rows])[:, 0] >> 7).all():
            raise UserError(f"--data {self.folder}: {self.split}/sequences.bin has rows whose "
                            f"first token begins no example (damaged); prepare the data again")

    def verify(self, chunk: int = 1 << 16) -> dict[str, int]:
        """Every row checked, and the file checksums and token count against meta.json."""
        for start in range(0, len(self), chunk):
            self._check_rows(slice(start, start + chunk))
        tokens = int(self.segments[:, 1].astype(np.int64).sum())
        declared = self.meta["splits"][self.split]["tokens"]
        if tokens != declared:
            raise UserError(f"--data {self.folder}: {self.split} holds {tokens} tokens, "
                            f"meta.json says {declared} (damaged); prepare the data again")
        for name in shard_files(self.packed):
            want = self.meta.get("files", {}).get(f"{self.split}/{name}")
            if want and sha256_file(self.folder / self.split / name) != want["sha256"]:
                raise UserError(f"--data {self.folder}: {self.split}/{name} does not match "
                                f"its checksum in meta.json (damaged); prepare the data again")
        return {"examples": len(self), "tokens": tokens}

    def __len__(self) -> int:
        return self.ids.shape[0]

    @property
    def vocab_size(self) -> int:
        return int(self.meta["vocab_size"])

    def check_tokenizer(self, sha256: str | None, vocab_size: int,
                        what: str = "the model") -> None:
        """Refuse data made with another tokenizer or vocabulary size than ``what`` uses."""
        if vocab_size != self.vocab_size:
            raise UserError(f"--data {self.folder}: prepared with a vocabulary of "
                            f"{self.vocab_size} tokens but {what} has {vocab_size}; prepare "
                            f"the data with the model's tokenizer")
        if sha256 is not None and sha256 != self.meta["tokenizer_sha256"]:
            raise UserError(f"--data {self.folder}: prepared with another tokenizer than "
                            f"{what} uses (tokenizer checksums differ); prepare it again with "
                            f"the model's tokenizer")

    def batch(self, index: np.ndarray) -> dict[str, torch.Tensor]:
        """Examples ``index`` as tensors: input_ids, attention_mask, token_type_ids (B, T);
        packed rows also sequence_ids (B, T): 1, 2, ... for the examples side by side, 0 at
        the padding."""
        order = np.argsort(index, kind="stable")  # read the memmap in increasing order
        ids = np.empty((len(index), self.seq_len), dtype=np.int64)
        ids[order] = self.ids[index[order]]
        seg = self.segments[index].astype(np.int64)
        pos = np.arange(self.seq_len)[None, :]
        out = {
            "input_ids": torch.from_numpy(ids),
            "attention_mask": torch.from_numpy(pos < seg[:, 1:2]).long(),
            "token_type_ids": torch.from_numpy(
                (pos >= seg[:, 0:1]) & (pos < seg[:, 1:2])).long(),
        }
        if self.with_word_starts:
            assert self.word_starts is not None
            bits = np.unpackbits(self.word_starts[index], axis=1, count=self.seq_len)
            out["word_starts"] = torch.from_numpy(bits.astype(bool))
        if self.sequences is not None and self.types is not None:  # packed rows
            real = pos < seg[:, 1:2]
            begins = np.unpackbits(self.sequences[index], axis=1, count=self.seq_len)
            out["sequence_ids"] = torch.from_numpy(begins.cumsum(1, dtype=np.int32) * real)
            out["token_type_ids"] = torch.from_numpy(np.unpackbits(
                self.types[index], axis=1, count=self.seq_len).astype(np.int64))
        return out


@dataclass(frozen=True)
class Blocks:
    """``train.shuffle=blocks``: the epoch's order made of blocks of ``rows`` consecutive
    rows, ``window`` random blocks' rows shuffled together at a time, in ``parts`` parts of
    blocks of their own (each global batch an equal share of every part)."""

    rows: int
    window: int
    parts: int


def block_order(n: int, seed: int, epoch: int, blocks: Blocks, key: int = 0) -> np.ndarray:
    """An epoch's order under ``blocks`` (parts, rows of each part): the split's whole
    blocks drawn in a random order and dealt to the parts in turn (each part as many: a few
    blocks, and the rows past the last whole block, are left out of the epoch), then each
    part's blocks taken ``window`` at a time and their rows shuffled together. Drawn from
    ``(seed, epoch)`` alone (and ``key``: a mixture's source): every process computes the
    same."""
    whole = n // blocks.rows
    per = whole // blocks.parts
    drawn = np.random.default_rng([seed, key, epoch, 1]).permutation(whole)
    order = np.empty((blocks.parts, per * blocks.rows), dtype=np.int64)
    within = np.arange(blocks.rows)
    for p in range(blocks.parts):
        mine = drawn[p::blocks.parts][:per]
        for w in range(0, per, blocks.window):
            rows = (mine[w:w + blocks.window, None] * blocks.rows + within).reshape(-1)
            order[p, w * blocks.rows:w * blocks.rows + len(rows)] = np.random.default_rng(
                [seed, key, epoch, 2, p, w]).permutation(rows)
    return order


@dataclass
class LoaderState:
    epoch: int = 0
    position: int = 0  # examples of this epoch's order already consumed (globally)
    batches: int = 0  # batches handed out since the start (what ``sizes`` reads)


class BatchLoader:
    """Endless iterator of batches in a seeded order that can be saved and restored.

    Args:
        dataset: the memory-mapped split.
        batch_size: examples per batch *for this process*.
        seed: the order's seed.
        rank: this process's place among ``world_size`` processes.
        world_size: the processes; each takes its slice of every global batch.
        shuffle: False reads in file order (validation).
        sizes: the examples *for this process* of each batch, by its index from the start
            (batch-size warmup); None: ``batch_size`` always.
        blocks: the order of ``train.shuffle=blocks`` (:func:`block_order`); None: a
            permutation of every row each epoch.
    """

    def __init__(self, dataset: ShardDataset, batch_size: int, seed: int = 0, rank: int = 0,
                 world_size: int = 1, shuffle: bool = True,
                 sizes: Callable[[int], int] | None = None, blocks: Blocks | None = None
                 ) -> None:
        if batch_size < 1:
            raise UserError(f"batch size {batch_size} must be at least 1")
        global_batch = batch_size * world_size
        if len(dataset) < global_batch:
            raise UserError(f"--data {dataset.folder}: {len(dataset)} {dataset.split} examples "
                            f"are fewer than one global batch of {global_batch}; prepare more "
                            f"text or use a smaller batch")
        if blocks and shuffle:
            used = len(dataset) // blocks.rows // blocks.parts * blocks.rows * blocks.parts
            if used < global_batch:
                raise UserError(f"--data {dataset.folder}: train.shuffle=blocks reads "
                                f"{used:,} of its {len(dataset):,} rows (whole blocks of "
                                f"train.shuffle_block={blocks.rows}, dealt to "
                                f"train.partitions={blocks.parts} parts), fewer than one "
                                f"global batch of {global_batch}; lower train.shuffle_block")
        self.blocks = blocks if shuffle else None
        self.dataset = dataset
        self.batch_size = batch_size
        self.seed = seed
        self.rank = rank
        self.world_size = world_size
        self.shuffle = shuffle
        self.sizes = sizes
        self.state = LoaderState()
        self._order: np.ndarray | None = None
        self._order_epoch = -1

    def _epoch_order(self) -> np.ndarray:
        if self._order_epoch != self.state.epoch:
            n = len(self.dataset)
            if self.blocks:
                self._order = block_order(n, self.seed, self.state.epoch, self.blocks)
            elif self.shuffle:
                self._order = np.random.default_rng([self.seed, self.state.epoch]).permutation(n)
            else:
                self._order = np.arange(n)
            self._order_epoch = self.state.epoch
        assert self._order is not None
        return self._order

    def __iter__(self) -> BatchLoader:
        return self

    def __next__(self) -> dict[str, torch.Tensor]:
        n = self.sizes(self.state.batches) if self.sizes else self.batch_size
        global_batch = n * self.world_size
        if self.blocks:
            return self._from_blocks(n, global_batch)
        if self.state.position + global_batch > len(self.dataset):  # drop the ragged tail
            self.state = LoaderState(self.state.epoch + 1, 0, self.state.batches)
        order = self._epoch_order()
        start = self.state.position + self.rank * n
        index = order[start : start + n]
        self.state.position += global_batch
        self.state.batches += 1
        return self.dataset.batch(index)

    def _from_blocks(self, n: int, global_batch: int) -> dict[str, torch.Tensor]:
        """A global batch of ``train.shuffle=blocks``: each part's next rows, part after part;
        this process's slice of it (with as many processes as parts, its own part)."""
        parts = self.blocks.parts  # type: ignore[union-attr]
        if global_batch % parts:
            raise UserError(f"a global batch of {global_batch} rows does not divide into "
                            f"train.partitions={parts} parts; choose partitions that divide "
                            f"every batch (train.batch_warmup's too)")
        share = global_batch // parts
        if self.state.position // parts + share > self._epoch_order().shape[1]:
            self.state = LoaderState(self.state.epoch + 1, 0, self.state.batches)
        start = self.state.position // parts
        rows = self._epoch_order()[:, start:start + share].reshape(-1)
        self.state.position += global_batch
        self.state.batches += 1
        return self.dataset.batch(rows[self.rank * n:(self.rank + 1) * n])

    def state_dict(self) -> dict[str, Any]:
        return {"epoch": self.state.epoch, "position": self.state.position, "seed": self.seed,
                "batches": self.state.batches}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.seed = int(state["seed"])
        self.state = LoaderState(int(state["epoch"]), int(state["position"]),
                                 int(state.get("batches", 0)))  # older checkpoints: none



class PhasedLoader:
    """Several loaders in turn (train.phases: rows of one length, then another): batch ``i``
    from the last loader whose first batch is at most ``i``. Each keeps its own order and
    position; the state is all of theirs and the batches handed out."""

    def __init__(self, loaders: list[BatchLoader], firsts: list[int]) -> None:
        self.loaders, self.firsts, self.batches = loaders, firsts, 0

    def __iter__(self) -> PhasedLoader:
        return self

    def __next__(self) -> dict[str, torch.Tensor]:
        j = max(i for i, first in enumerate(self.firsts) if first <= self.batches)
        self.batches += 1
        return next(self.loaders[j])

    def state_dict(self) -> dict[str, Any]:
        return {"batches": self.batches, "phases": [x.state_dict() for x in self.loaders]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.batches = int(state["batches"])
        for loader, saved in zip(self.loaders, state["phases"], strict=True):
            loader.load_state_dict(saved)


class Prefetched:
    """A :class:`BatchLoader` one batch ahead: the next batch is read (and, for a GPU, copied
    into pinned memory, so that its transfer can overlap the step) in a thread while the
    current step runs. The same batches in the same order; ``state_dict`` is the position
    after the last batch handed out, so a checkpoint resumes exactly as without it.
    ``prepare``: host work on each batch done in that thread too (the micro-batches' layouts
    under unpadding: ``electra.train.pretraining.with_layouts``)."""

    def __init__(self, loader: Any, pin: bool = False,
                 prepare: Callable[[dict[str, Any]], dict[str, Any]] | None = None) -> None:
        from concurrent.futures import ThreadPoolExecutor

        self.loader, self.pin, self.prepare = loader, pin, prepare
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="electra-prefetch")
        self.pending: Any = None  # the next batch's future
        self.after = loader.state_dict()  # the position after the last batch handed out

    def _read(self) -> dict[str, Any]:
        batch = next(self.loader)
        if self.prepare is not None:  # work on the batch's rows, here rather than in the step
            batch = self.prepare(batch)
        return {k: v.pin_memory() if isinstance(v, torch.Tensor) else v
                for k, v in batch.items()} if self.pin else batch

    def __iter__(self) -> Prefetched:
        return self

    def __next__(self) -> dict[str, torch.Tensor]:
        batch = (self.pending or self.pool.submit(self._read)).result()
        self.after = self.loader.state_dict()  # the thread is idle: the loader is still
        self.pending = self.pool.submit(self._read)
        return batch

    def state_dict(self) -> dict[str, Any]:
        return dict(self.after)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self.pending is not None:
            self.pending.result()  # let the read in flight end, then forget it
            self.pending = None
        self.loader.load_state_dict(state)
        self.after = self.loader.state_dict()
