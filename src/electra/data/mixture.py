"""Weighted mixtures of prepared folders: ``--data`` names, for each length phase, one folder
or several with their weights (``web:0.7+books:0.3``; the grammar, the weights' scaling and
the sources' names: ``electra.data.mixspec``), and each global batch draws its rows from them
at those weights, deterministically and resumably. The metrics lines count each source's real
tokens (``tokens_from_web``), the run's config.json keeps the mix. A source keeps its own
shuffled order, epoch and position, as one folder does
(:class:`electra.data.loader.BatchLoader`); which source each row of a global batch comes
from is drawn from ``(seed, batch index)`` alone, so every rank draws the same and takes its
own rows, and a resumed run draws on where it stopped.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np
import torch

from electra.data.loader import Blocks, ShardDataset, block_order
from electra.data.mixspec import Share
from electra.errors import UserError


class _Stream:
    """One source's examples in a seeded shuffled order per epoch, taken a few at a time
    across epochs (the global order every rank computes alike)."""

    def __init__(self, n: int, seed: int, key: int, blocks: Blocks | None = None) -> None:
        # train.shuffle=blocks: its folder's blocks in one part (a mixture's rows are drawn
        # across folders, so parts do not apply)
        self.n, self.seed, self.key = n, seed, key
        self.blocks = replace(blocks, parts=1) if blocks else None
        self.epoch, self.position = 0, 0
        self._order: np.ndarray | None = None
        self._order_epoch = -1

    def order(self) -> np.ndarray:
        if self._order_epoch != self.epoch:
            self._order = block_order(self.n, self.seed, self.epoch, self.blocks, self.key)[0] \
                if self.blocks else np.random.default_rng(
                    [self.seed, self.key, self.epoch]).permutation(self.n)
            self._order_epoch = self.epoch
        assert self._order is not None
        return self._order

    def take(self, count: int) -> np.ndarray:
        out = []
        while count:
            order = self.order()  # (train.shuffle=blocks: the rows of its whole blocks)
            k = min(count, len(order) - self.position)
            out.append(order[self.position:self.position + k])
            self.position += k
            count -= k
            if self.position == len(order):
                self.epoch, self.position = self.epoch + 1, 0
        return np.concatenate(out) if out else np.zeros(0, dtype=np.int64)


class MixedLoader:
    """Endless batches of a weighted mixture of prepared folders of one length (this rank's
    rows of each global batch), resumable: ``state_dict`` holds the batches handed out, each
    source's epoch and position, and the real tokens this rank drew from each.

    ``sizes``: the examples *for this process* of each batch, by its index (batch warmup);
    None: ``batch_size`` always."""

    def __init__(self, datasets: list[ShardDataset], sources: list[Share], batch_size: int,
                 seed: int = 0, rank: int = 0, world_size: int = 1,
                 sizes: Callable[[int], int] | None = None, blocks: Blocks | None = None
                 ) -> None:
        first = datasets[0]
        for d in datasets[1:]:
            if (d.seq_len, d.packed) != (first.seq_len, first.packed):
                raise UserError(f"--data: {d.folder} holds {d.seq_len}-token"
                                f"{' packed' if d.packed else ''} rows and {first.folder} "
                                f"{first.seq_len}-token{' packed' if first.packed else ''} "
                                f"ones; a mixture's folders are prepared alike")
        short = next((d for d in datasets if blocks and len(d) < blocks.rows), None)
        if short is not None:
            raise UserError(f"--data: {short.folder} holds {len(short):,} rows, less than a "
                            f"block of train.shuffle_block={blocks.rows}; lower it")  # type: ignore[union-attr]
        self.datasets, self.sources = datasets, sources
        self.weights = np.array([s.weight for s in sources])
        self.batch_size, self.seed, self.rank, self.world_size = batch_size, seed, rank, \
            world_size
        self.sizes = sizes
        self.batches = 0
        self.streams = [_Stream(len(d), seed, k, blocks) for k, d in enumerate(datasets)]
        self.tokens = {s.name: 0 for s in sources}

    def __iter__(self) -> MixedLoader:
        return self

    def __next__(self) -> dict[str, torch.Tensor]:
        n = self.sizes(self.batches) if self.sizes else self.batch_size
        G = n * self.world_size
        picks = np.random.default_rng([self.seed, 7919, self.batches]).choice(
            len(self.sources), size=G, p=self.weights)  # each global row's source
        index = np.empty(G, dtype=np.int64)
        for k, stream in enumerate(self.streams):
            rows = np.flatnonzero(picks == k)
            index[rows] = stream.take(len(rows))
        self.batches += 1
        mine = slice(self.rank * n, (self.rank + 1) * n)
        picks, index = picks[mine], index[mine]
        parts, where = [], []
        for k in np.unique(picks):
            rows = np.flatnonzero(picks == k)
            batch = self.datasets[k].batch(index[rows])
            parts.append(batch)
            where.append(rows)
            self.tokens[self.sources[k].name] += int(batch["attention_mask"].sum())
        back = np.argsort(np.concatenate(where), kind="stable")  # the rows in drawn order
        return {key: torch.cat([p[key] for p in parts])[torch.from_numpy(back)]
                for key in parts[0]}

    def state_dict(self) -> dict[str, Any]:
        return {"batches": self.batches, "seed": self.seed, "tokens": dict(self.tokens),
                "sources": {s.name: {"epoch": st.epoch, "position": st.position}
                            for s, st in zip(self.sources, self.streams, strict=True)}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """A mixture's state; each source of this mix found in it resumes where it was, a
        new one (a decay branch onto another mix) from its start. A one-folder loader's
        state (a branch off a run of one folder) gives the batches handed out alone."""
        self.batches = int(state.get("batches", 0))
        saved = state.get("sources") or {}
        for s, stream in zip(self.sources, self.streams, strict=True):
            at = saved.get(s.name)
            stream.epoch, stream.position = (int(at["epoch"]), int(at["position"])) if at \
                else (0, 0)
        self.tokens = {s.name: int((state.get("tokens") or {}).get(s.name, 0))
                       for s in self.sources}


def source_tokens(state: dict[str, Any]) -> dict[str, int]:
    """The real tokens drawn from each source so far (this rank's), from a loader's state:
    a mixture's, or a phased loader's (each phase's summed by name); {} for one folder."""
    if "tokens" in state:
        return dict(state["tokens"])
    out: dict[str, int] = {}
    for phase in state.get("phases", []):
        for name, n in source_tokens(phase).items():
            out[name] = out.get(name, 0) + n
    return out
