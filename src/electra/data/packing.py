"""One chunk of documents -> packed ``[CLS] A [SEP] B [SEP]`` examples: what each worker of
`electra prepare` does (a local process's or a Ray actor's), with its own tokenizer
(:func:`init_worker`) and the chunk's own seeded RNG, so the shards do not depend on who
packs which chunk (:mod:`electra.data.prepare` describes the packing and the files).
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import chain
from typing import Any

import numpy as np

from electra.data.text import Chunk
from electra.data.tokenizer import SpecialTokens


@dataclass
class Packed:
    """Examples from one chunk, per split."""

    ids: dict[str, np.ndarray]
    segments: dict[str, np.ndarray]
    word_starts: dict[str, np.ndarray] = field(default_factory=dict)  # packed bits
    counts: dict[str, int] = field(default_factory=dict)
    sequences: dict[str, np.ndarray] = field(default_factory=dict)  # packed rows: starts, bits
    types: dict[str, np.ndarray] = field(default_factory=dict)  # packed rows: segment B, bits


def token_dtype(vocab_size: int) -> np.dtype:
    return np.dtype(np.uint16) if vocab_size <= 1 << 16 else np.dtype(np.uint32)


class ExampleBuilder:
    """The original ELECTRA example builder, working on (offset, length) spans of a flat array."""

    def __init__(self, seq_len: int, rng: random.Random, special: SpecialTokens,
                 dtype: np.dtype, carry: bool = False) -> None:
        self.max_length = seq_len
        self.target_length = seq_len
        self.rng = rng
        self.special = special
        self.dtype = dtype
        self.sentences: list[tuple[int, int]] = []  # spans into the chunk's flat ids
        self.length = 0
        self.examples: list[tuple[list[tuple[int, int]], list[tuple[int, int]]]] = []
        self.dropped = 0  # tokens beyond the example length at a split
        self.carry = carry  # ...or those tokens start the next example
        self.kept = 0  # text tokens written into examples

    def add_sentence(self, start: int, n: int) -> None:
        self.sentences.append((start, n))
        self.length += n
        if self.length >= self.target_length:
            self.create_example()

    def end_document(self) -> None:
        while self.length:  # under carry, an example can leave tokens for the next
            self.create_example()

    def create_example(self) -> None:
        rng = self.rng
        # Small chance of a single segment, as in classification tasks.
        first_target = 100_000 if rng.random() < 0.1 else (self.target_length - 3) // 2
        first: list[tuple[int, int]] = []
        second: list[tuple[int, int]] = []
        n_first = n_second = 0
        for start, n in self.sentences:
            # To A if A is empty, if it stays under its target, or half the time when it would
            # go over; otherwise to B. Once B has begun, everything goes to B (the original
            # let a later short sentence jump back into A, out of order).
            if n_second == 0 and (n_first == 0 or n_first + n < first_target
                                  or (n_first < first_target and rng.random() < 0.5)):
                first.append((start, n))
                n_first += n
            else:
                second.append((start, n))
                n_second += n
        # Trim to the length, leaving room for [CLS] A [SEP] (B [SEP]).
        keep_first = min(n_first, self.max_length - 2)
        keep_second = min(n_second, max(0, self.max_length - keep_first - 3))
        self.examples.append((_cut(first, keep_first), _cut(second, keep_second)))
        self.kept += keep_first + keep_second
        # What does not fit is a suffix of the text: A's tail (then all of B), or B's tail.
        rest = _tail(first, keep_first) + _tail(second, keep_second)
        self.sentences = rest if self.carry else []
        self.length = sum(n for _, n in self.sentences)
        if not self.carry:
            self.dropped += sum(n for _, n in rest)
        # Small chance of a random shorter target for the next example.
        if rng.random() < 0.05:
            self.target_length = rng.randint(5, self.max_length)
        else:
            self.target_length = self.max_length
        if self.length >= self.target_length:  # carried tokens that fill an example
            self.create_example()

    def to_arrays(self, flat: np.ndarray, flat_starts: np.ndarray, pack: bool = False
                  ) -> tuple[np.ndarray, ...]:
        """(N, seq_len) token ids, (N, 2) [end of the first example's A, total length] and
        (N, seq_len / 8) packed word-start bits (every sentence also starts a word) of the
        rows: one example each, or under ``pack`` several side by side (:func:`pack_rows`),
        with two more bit arrays: where each example starts, and its segment B's tokens."""
        s, T = self.special, self.max_length
        rows = pack_rows([_length(a, b) for a, b in self.examples], T) if pack else [
            [i] for i in range(len(self.examples))]
        ids = np.full((len(rows), T), s.pad, dtype=self.dtype)
        seg = np.zeros((len(rows), 2), dtype=np.uint16)
        starts = np.zeros((len(rows), T), dtype=bool)
        begins, second_seg = np.zeros_like(starts), np.zeros_like(starts)
        for r, row in enumerate(rows):
            at = 0
            for i in row:
                first, second = self.examples[i]
                ids[r, at] = s.cls
                begins[r, at] = True
                a_end = _put(ids[r], starts[r], first, at + 1, flat, flat_starts, s.sep)
                end = (_put(ids[r], starts[r], second, a_end, flat, flat_starts, s.sep)
                       if second else a_end)
                second_seg[r, a_end:end] = True
                seg[r, 0] = seg[r, 0] or a_end
                at = end
            seg[r, 1] = at
        out = (ids, seg, np.packbits(starts, axis=1))
        return (*out, np.packbits(begins, axis=1), np.packbits(second_seg, axis=1)) if pack \
            else out


def _length(first: list[tuple[int, int]], second: list[tuple[int, int]]) -> int:
    """An example's tokens: [CLS] A [SEP] (B [SEP])."""
    return 2 + sum(n for _, n in first) + (1 + sum(n for _, n in second) if second else 0)


def pack_rows(lengths: list[int], size: int) -> list[list[int]]:
    """Examples (their ``lengths``, in order) placed into rows of ``size`` tokens, first fit:
    each goes into the first row begun before it that still has room, else begins a row. A
    full-length example is a row of its own; the shorter ones (a document's end, the random
    shorter targets) fill each other's rows. Rows in the order they were begun."""
    rows: list[list[int]] = []
    room: list[int] = []  # free tokens of each row
    open_rows: list[int] = []  # the rows with room for the shortest example (3 tokens)
    for i, n in enumerate(lengths):
        k = next((r for r in open_rows if room[r] >= n), None)
        if k is None:
            k = len(rows)
            rows.append([])
            room.append(size)
            open_rows.append(k)
        rows[k].append(i)
        room[k] -= n
        if room[k] < 3:
            open_rows.remove(k)
    return rows


def _put(row: np.ndarray, row_starts: np.ndarray, spans: list[tuple[int, int]], pos: int,
         flat: np.ndarray, flat_starts: np.ndarray, sep: int) -> int:
    """Copy a segment's sentences into ``row`` from ``pos``, then [SEP]; the next position.
    Each sentence (or piece of a long one) also starts a word."""
    for start, n in spans:
        row[pos : pos + n] = flat[start : start + n]
        row_starts[pos : pos + n] = flat_starts[start : start + n]
        row_starts[pos] = True
        pos += n
    row[pos] = sep
    return pos + 1


def _tail(spans: list[tuple[int, int]], keep: int) -> list[tuple[int, int]]:
    """The spans' tokens after the first ``keep`` (the part :func:`_cut` leaves out)."""
    out = []
    for start, n in spans:
        if keep >= n:
            keep -= n
            continue
        out.append((start + keep, n - keep))
        keep = 0
    return out


def _cut(spans: list[tuple[int, int]], keep: int) -> list[tuple[int, int]]:
    out = []
    for start, n in spans:
        if keep <= 0:
            break
        out.append((start, min(n, keep)))
        keep -= n
    return out


_TOKENIZER: Any = None
_SETTINGS: dict[str, Any] = {}


def init_worker(tokenizer_json: str, settings: dict[str, Any]) -> None:
    global _TOKENIZER, _SETTINGS
    from tokenizers import Tokenizer

    _TOKENIZER = Tokenizer.from_str(tokenizer_json)
    _SETTINGS = settings


def pack_chunk(chunk: Chunk) -> Packed:
    """Encode one chunk's lines and pack them into examples (train/val by document)."""
    st = _SETTINGS
    seq_len: int = st["seq_len"]
    special: SpecialTokens = st["special"]
    dtype = np.dtype(st["dtype"])
    lines = chunk.lines
    text = [line for line in lines if line]
    encs = _TOKENIZER.encode_batch(text, add_special_tokens=False) if text else []
    ids_per_line = [e.ids for e in encs]
    lens = [len(x) for x in ids_per_line]
    flat = np.fromiter(chain.from_iterable(ids_per_line), dtype=dtype, count=sum(lens))
    flat_starts = _word_starts(encs, lens)

    rng = random.Random(f"{st['seed']}/{st['split_name']}/{chunk.index}")
    val_rng = random.Random(f"{st['seed']}/val/{chunk.index}")
    val_fraction: float = st["val_fraction"] or 0.0
    builders = {name: ExampleBuilder(seq_len, rng, special, dtype, st["overflow"] == "carry")
                for name in ("train", "val")}
    piece = seq_len - 2
    split = st["split_name"]
    if val_fraction:
        split = "val" if val_rng.random() < val_fraction else "train"
    builder = builders[split]
    offset = 0
    k = 0
    long_lines = empty_lines = 0
    for line in lines:
        if not line:  # end of document
            builder.end_document()
            if val_fraction:
                split = "val" if val_rng.random() < val_fraction else "train"
            builder = builders[split]
            continue
        n = lens[k]
        k += 1
        if n == 0:
            empty_lines += 1  # only characters the tokenizer drops
        elif n > piece:  # a sentence longer than an example: cut into pieces, keep all
            long_lines += 1
            for start in range(offset, offset + n, piece):
                builder.add_sentence(start, min(piece, offset + n - start))
        else:
            builder.add_sentence(offset, n)
        offset += n
    for b in builders.values():
        b.end_document()
    out = Packed(ids={}, segments={})
    for name, b in builders.items():
        arrays = b.to_arrays(flat, flat_starts, st["pack"])
        out.ids[name], out.segments[name], out.word_starts[name] = arrays[:3]
        if st["pack"]:
            out.sequences[name], out.types[name] = arrays[3:]
    out.counts = {"tokens_in": int(flat.size), "tokens_dropped": sum(
        b.dropped for b in builders.values()), "tokens_packed": sum(
        b.kept for b in builders.values()), "long_lines_cut": long_lines,
        "lines": len(text), "lines_without_tokens": empty_lines}
    return out


def _word_starts(encs: list[Any], lens: list[int]) -> np.ndarray:
    """For every token of the encoded lines: whether it begins a word, by the tokenizer's own
    word ids (a new id, or the first token of a line)."""
    total = sum(lens)
    words = np.fromiter((-1 if w is None else w for e in encs for w in e.word_ids),
                        dtype=np.int64, count=total)
    starts = np.ones(total, dtype=bool)
    starts[1:] = words[1:] != words[:-1]
    starts[np.cumsum([0, *lens[:-1]])[np.asarray(lens) > 0]] = True
    return starts


def shard_rows(p: Packed, split_name: str
               ) -> Iterator[tuple[str, dict[str, np.ndarray], dict[str, int]]]:
    """Where a chunk's rows go: for each split that has rows in ``p``, the split they are
    written to (``split_name``'s val for a validation input's, else their own), their arrays
    by shard file name, and what they count (examples, tokens, sequences)."""
    for name in ("train", "val"):
        ids, seg = p.ids[name], p.segments[name]
        if not len(ids):
            continue
        parts = {"ids.bin": ids, "segments.bin": seg, "word_starts.bin": p.word_starts[name],
                 "sequences.bin": p.sequences.get(name), "types.bin": p.types.get(name)}
        yield (split_name if split_name == "val" else name,
               {file: a for file, a in parts.items() if a is not None},
               {"examples": len(ids), "tokens": int(seg[:, 1].sum(dtype=np.int64)),
                "sequences": (int(np.unpackbits(p.sequences[name]).sum())
                              if name in p.sequences else len(ids))})
