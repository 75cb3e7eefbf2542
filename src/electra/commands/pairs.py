"""`electra pairs`: (query, positive) pairs made from raw text alone, two spans of one
document (Contriever's independent cropping, Izacard et al. 2021, arXiv 2112.09118): the
first, unsupervised stage of an embedding model for a user who has only a corpus.

    electra pairs --input corpus/*.txt --out pairs.jsonl
    electra finetune --model RUN --task embedding --train pairs.jsonl --dev ... --out stage1
    electra finetune --model stage1/seed-1 --task embedding --train curated.jsonl ...

The text is read as `electra prepare` reads it (text files one sentence or paragraph a line
with a blank line between documents, JSONL, Parquet, Arrow, gzip, folders, globs), streamed a
document at a time. A document of more than ``--chunk-words`` words is cut into pieces of that
many, each a document of its own; a piece of fewer than ``--min-words`` is left out. From each,
two spans are cropped independently: each a run of consecutive words, its length drawn
uniformly between ``--min-ratio`` and ``--max-ratio`` of the piece (Contriever's 0.1 and 0.5)
and its start uniformly, then each of its words deleted with probability ``--delete``
(Contriever's 0.1; 0 by default). ``--max-pairs N`` keeps a uniform random sample of N pieces'
pairs (reservoir sampling: N pairs held), in the corpus's order; without it every piece's pair
is written as it is made. Seeded (``--seed``): the same input and settings give the same file.
"""

from __future__ import annotations

import json
import random
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from electra.data.text import ReadStats, expand_inputs, iter_lines
from electra.errors import UserError
from electra.io.outputs import check_file_out, write_file
from electra.io.progress import progress as bar_of


@dataclass(frozen=True)
class Cropping:
    """How a piece of a document becomes a pair (Contriever's defaults where it has one)."""

    min_ratio: float = 0.1
    max_ratio: float = 0.5
    min_words: int = 16
    chunk_words: int = 256
    delete: float = 0.0

    def check(self) -> None:
        if not 0 < self.min_ratio <= self.max_ratio <= 1:
            raise UserError(f"--min-ratio {self.min_ratio:g} --max-ratio {self.max_ratio:g}: "
                            f"give 0 < min <= max <= 1 (each span's share of its piece; "
                            f"Contriever's 0.1 and 0.5)")
        if self.min_words < 2:
            raise UserError(f"--min-words {self.min_words}: give 2 or more (a piece needs "
                            f"words to crop two spans from)")
        if self.chunk_words < self.min_words:
            raise UserError(f"--chunk-words {self.chunk_words}: give at least --min-words "
                            f"{self.min_words}")
        if not 0 <= self.delete < 1:
            raise UserError(f"--delete {self.delete:g}: give a probability in [0, 1), e.g. "
                            f"0.1 (Contriever's)")

    def span(self, words: list[str], rng: random.Random) -> str:
        """One crop of ``words``: a run of consecutive words, each then kept with probability
        1 - ``delete`` (at least one kept)."""
        n = max(1, round(rng.uniform(self.min_ratio, self.max_ratio) * len(words)))
        start = rng.randrange(len(words) - n + 1)
        run = words[start:start + n]
        if self.delete:
            kept = [w for w in run if rng.random() >= self.delete]
            run = kept or [run[rng.randrange(len(run))]]
        return " ".join(run)


def pieces(files: list[Path], crop: Cropping) -> Iterator[list[str]]:
    """Each document's words cut into pieces of ``chunk_words`` from its start (its last piece
    kept where it has ``min_words``), streamed: a long document's full pieces as they come."""
    size, words = crop.chunk_words, []
    for path in files:
        for line, _ in iter_lines(path, "text", ReadStats()):
            if line.strip():
                words.extend(line.split())
                while len(words) >= 2 * size:
                    yield words[:size]
                    words = words[size:]
                continue
            yield from (words[i:i + size] for i in range(0, len(words), size)
                        if len(words[i:i + size]) >= crop.min_words)
            words = []


def _write(out: TextIO, pair: tuple[str, str]) -> None:
    out.write(json.dumps({"query": pair[0], "positive": pair[1]}, ensure_ascii=False) + "\n")


def pairs(input: list[str], out: str, min_ratio: float = 0.1, max_ratio: float = 0.5,
          min_words: int = 16, chunk_words: int = 256, delete: float = 0.0,
          max_pairs: int | None = None, seed: int = 0, progress: bool = True) -> int:
    """`electra pairs` (see the module's docstring); returns how many pairs it wrote."""
    crop = Cropping(min_ratio, max_ratio, min_words, chunk_words, delete)
    crop.check()
    if max_pairs is not None and max_pairs < 1:
        raise UserError(f"--max-pairs {max_pairs}: give how many pairs to keep, 1 or more")
    files = expand_inputs(input)
    target = check_file_out(out, "pairs", [("--input", f) for f in files], suffix=".jsonl")
    rng, written = random.Random(seed), 0

    def write(part: Path) -> None:
        nonlocal written
        kept: list[tuple[int, tuple[str, str]]] = []  # (index, pair): --max-pairs' sample
        with open(part, "w", encoding="utf-8") as f, \
                bar_of(None, "pairs: cropping", "piece", progress) as bar:
            for i, words in enumerate(pieces(files, crop)):
                pair = (crop.span(words, rng), crop.span(words, rng))
                bar.update(1)
                if max_pairs is None:
                    _write(f, pair)
                    written += 1
                elif len(kept) < max_pairs:
                    kept.append((i, pair))
                elif (j := rng.randrange(i + 1)) < max_pairs:
                    kept[j] = (i, pair)
            for _, pair in sorted(kept):
                _write(f, pair)
                written += 1
        if not written:
            raise UserError(f"--input {' '.join(input)}: no document has --min-words "
                            f"{min_words} words to crop a pair from; lower --min-words")

    write_file(target, write, "pairs")
    print(f"wrote {written:,} pairs (two spans of one document each) to {target}",
          file=sys.stderr)
    return written
