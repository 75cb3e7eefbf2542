"""One fine-tune's loop parts: the epoch's batches (random, or grouped by length) and their
resumable state."""

from __future__ import annotations

import pytest
import torch

from electra.train.finetuning import EpochBatches


def epoch(batches: EpochBatches) -> list[torch.Tensor]:
    return [batches.next() for _ in range(batches.steps_per_epoch)]


def padding(lengths: torch.Tensor, batch: torch.Tensor) -> float:
    """The fraction of a batch padded to its longest row: what a step computes for nothing."""
    rows = lengths[batch]
    return float(1 - rows.sum() / (rows.max() * len(rows)))


@pytest.mark.parametrize("n", [1000, 1003, 5])
def test_grouped_batches_cover_the_epoch_with_little_padding(n):
    g = torch.Generator().manual_seed(0)
    lengths = torch.randint(4, 129, (n,), generator=g)
    steps = max(1, n // 8)
    plain, grouped = (EpochBatches(n, 8, steps, seed=3, lengths=x) for x in (None, lengths))
    for b in (plain, grouped):
        used = torch.cat(epoch(b))
        assert len(used) == min(n, steps * 8) and len(set(used.tolist())) == len(used)
        assert all(len(x) == min(8, n) for x in epoch(b))  # every step a whole batch
    if n >= 1000:
        pad = {name: sum(padding(lengths, x) for x in epoch(b)) / steps
               for name, b in (("plain", plain), ("grouped", grouped))}
        assert pad["grouped"] < 0.1 < 0.4 < pad["plain"], pad
        # still random: two seeds give other batches, the first batch is not always longest
        other = EpochBatches(n, 8, steps, seed=4, lengths=lengths)
        assert not torch.equal(torch.cat(epoch(other)), torch.cat(epoch(grouped)))


def test_grouped_batches_resume_mid_epoch_exactly():
    lengths = torch.randint(4, 129, (403,), generator=torch.Generator().manual_seed(1))
    a = EpochBatches(403, 8, 50, seed=5, lengths=lengths)
    seen = [a.next() for _ in range(70)]  # into the second epoch
    b = EpochBatches(403, 8, 50, seed=5, lengths=lengths)
    b.load_state_dict(a.state_dict())
    assert all(torch.equal(a.next(), b.next()) for _ in range(60))
    fresh = EpochBatches(403, 8, 50, seed=5, lengths=lengths)
    assert all(torch.equal(x, fresh.next()) for x in seen)  # the same seed, the same batches
