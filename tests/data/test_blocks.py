"""``train.shuffle=blocks`` (issue 61, ``electra.data.loader.block_order``): the order a store's
folder streams in. Each epoch is the rows of its whole blocks once, each window's rows from
that window's blocks alone, each part from blocks of its own; drawn from (seed, epoch), so
one process and N read the same global batches; with as many processes as parts each reads
only its part's blocks; resumable bit for bit."""

from __future__ import annotations

import re

import numpy as np
import pytest

from electra.config import TrainConfig
from electra.data.loader import BatchLoader, Blocks, ShardDataset, block_order
from electra.errors import UserError


def test_an_epoch_is_its_whole_blocks_rows_once_window_by_window_part_by_part():
    blocks = Blocks(rows=10, window=3, parts=2)
    order = block_order(257, seed=5, epoch=0, blocks=blocks)  # 25 whole blocks; 7 rows over
    assert order.shape == (2, 120)  # 12 blocks a part (the 25th left out this epoch)
    flat = order.ravel()
    assert len(set(flat.tolist())) == 240 and flat.max() < 250  # no row twice, none past
    assert len(set((flat // 10).tolist())) == 24
    for part in order:
        for w in range(0, 120, 30):  # a window: 3 blocks' 30 rows, shuffled together
            rows = part[w:w + 30]
            assert len(set((rows // 10).tolist())) == 3
            assert sorted(rows.tolist()) != rows.tolist()  # shuffled, not in file order
    assert set((order[0] // 10).tolist()).isdisjoint(set((order[1] // 10).tolist()))
    again = block_order(257, seed=5, epoch=0, blocks=blocks)
    assert np.array_equal(order, again)  # (seed, epoch) alone
    assert not np.array_equal(order, block_order(257, seed=5, epoch=1, blocks=blocks))
    assert not np.array_equal(order, block_order(257, seed=6, epoch=0, blocks=blocks))


def _global_batches(data: ShardDataset, blocks: Blocks, world: int, steps: int,
                    batch: int = 8) -> list[np.ndarray]:
    """Each step's global batch as the ``world`` processes read it (their rows in rank
    order), and which rows each process read."""
    loaders = [BatchLoader(data, batch // world, seed=2, rank=r, world_size=world,
                           blocks=blocks) for r in range(world)]
    return [np.concatenate([next(ld)["input_ids"].numpy() for ld in loaders])
            for _ in range(steps)]


def test_one_process_and_two_read_the_same_global_batches_and_each_its_part(letters_data):
    data = ShardDataset(letters_data)
    blocks = Blocks(rows=8, window=2, parts=2)
    steps = 3 * len(data) // 8  # past the epoch's end: a new epoch's order, alike
    one, two = (_global_batches(data, blocks, w, steps) for w in (1, 2))
    assert all(np.array_equal(a, b) for a, b in zip(one, two, strict=True))
    # With two processes and two parts, each process's rows are its own part's blocks.
    read: list[set[int]] = [set(), set()]
    loaders = [BatchLoader(data, 4, seed=2, rank=r, world_size=2, blocks=blocks)
               for r in range(2)]
    for r, ld in enumerate(loaders):
        original = data.batch
        seen: list[np.ndarray] = []
        data.batch = lambda index, seen=seen, original=original: (  # type: ignore[method-assign]
            seen.append(index), original(index))[1]
        for _ in range(len(data) // 8 - 1):  # within the first epoch
            next(ld)
        data.batch = original  # type: ignore[method-assign]
        read[r] = set((np.concatenate(seen) // 8).tolist())
    part = block_order(len(data), 2, 0, blocks)
    assert read[0] <= set((part[0] // 8).tolist()) and read[1] <= set((part[1] // 8).tolist())
    assert read[0].isdisjoint(read[1])


def test_a_blocks_loader_resumes_bit_for_bit(letters_data):
    data = ShardDataset(letters_data)
    blocks = Blocks(rows=8, window=3, parts=1)
    a = BatchLoader(data, 8, seed=1, blocks=blocks)
    for _ in range(7):
        next(a)
    saved = a.state_dict()
    rest = [next(a)["input_ids"] for _ in range(40)]
    b = BatchLoader(data, 8, seed=1, blocks=blocks)
    b.load_state_dict(saved)
    assert all(x.equal(next(b)["input_ids"]) for x in rest)


def test_the_settings_are_checked(letters_data):
    with pytest.raises(UserError, match=re.escape("train.partitions=3 must divide "
                                                  "train.batch_size=8")):
        TrainConfig(batch_size=8, shuffle="blocks", partitions=3)
    with pytest.raises(UserError, match=re.escape("train.partitions=2 parts the blocks of "
                                                  "train.shuffle=blocks")):
        TrainConfig(batch_size=8, partitions=2)
    with pytest.raises(UserError, match=re.escape("train.shuffle must be one of rows, "
                                                  "blocks")):
        TrainConfig(shuffle="files")
    data = ShardDataset(letters_data)
    with pytest.raises(UserError, match=re.escape("lower train.shuffle_block")):
        BatchLoader(data, 8, blocks=Blocks(rows=len(data) // 2 + 1, window=1, parts=2))
