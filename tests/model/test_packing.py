"""Packed rows (``Kernels.layout`` with ``sequence_ids``): several sequences side by side in a
row, each attending within itself and placed from position 0, give every sequence the hidden
states it gets alone (fp32), for both bodies, unpadded or padded, through the dense band and
the blocked local-attention kernel, with gradients."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from helpers import small_model

from electra.model import encoder_for
from electra.model.kernels import FAST_CPU, sequence_mask, sequence_positions

# Row 0: three sequences and padding; row 1: one sequence filling the row; row 2: two.
LENGTHS = [[20, 15, 10], [64], [33, 31]]
T = 64


def packed_rows(vocab: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(ids, token types, sequence ids) of :data:`LENGTHS`, each sequence [CLS]-like first."""
    g = torch.Generator().manual_seed(0)
    ids = torch.zeros(len(LENGTHS), T, dtype=torch.long)
    types = torch.zeros_like(ids)
    groups = torch.zeros_like(ids)
    for b, lengths in enumerate(LENGTHS):
        at = 0
        for k, n in enumerate(lengths):
            ids[b, at:at + n] = torch.randint(5, vocab, (n,), generator=g)
            types[b, at + n // 2:at + n] = 1  # a second segment in each
            groups[b, at:at + n] = k + 1
            at += n
    return ids, types, groups


def test_positions_and_mask_of_packed_rows():
    groups = torch.tensor([[1, 1, 1, 2, 2, 0]])
    assert sequence_positions(groups).tolist() == [[0, 1, 2, 0, 1, 0]]
    mask = sequence_mask(groups)[0, 0]
    assert mask[1].tolist() == [True, True, True, False, False, False]
    assert mask[4].tolist() == [False, False, False, True, True, False]
    assert mask[5].tolist() == [False] * 5 + [True]  # padding sees itself alone


@pytest.mark.parametrize("unpad", [True, False], ids=["unpadded", "padded"])
@pytest.mark.parametrize("body, local", [("bert", 128), ("modernbert", 32),
                                         ("modernbert", 8)],
                         ids=["bert", "modernbert-band", "modernbert-blocks"])
def test_a_packed_row_gives_each_sequence_its_states_alone(unpad, body, local):
    """ModernBERT's local window 8 (4 each side) in 64-token rows runs the blocked kernel
    (8 windows fit), 32 the dense band; alone, the shorter sequences run the dense band."""
    torch.manual_seed(0)
    cfg = small_model(vocab_size=200, body=body, local_attention=local, global_every=2,
                      num_layers=3, hidden_dropout=0.0, attention_dropout=0.0)
    kernels = dataclasses.replace(FAST_CPU, unpad=unpad)
    enc = encoder_for(cfg, kernels=kernels).eval()
    ids, types, groups = packed_rows(200)
    h = enc(ids, groups > 0, types, sequence_ids=groups)
    (h * (groups > 0)[..., None]).pow(2).sum().backward()  # the padding's states aside
    packed_grads = {n: p.grad.clone() for n, p in enc.named_parameters()}
    enc.zero_grad()
    total = 0
    for b, lengths in enumerate(LENGTHS):
        at = 0
        for n in lengths:
            alone = enc(ids[b:b + 1, at:at + n], None, types[b:b + 1, at:at + n])
            torch.testing.assert_close(h[b, at:at + n], alone[0], atol=1e-5, rtol=1e-5)
            total = total + alone.pow(2).sum()
            at += n
    total.backward()
    for name, p in enc.named_parameters():
        torch.testing.assert_close(packed_grads[name], p.grad, atol=1e-4, rtol=1e-4, msg=name)
