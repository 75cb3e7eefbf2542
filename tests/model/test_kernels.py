"""The kernel seam: the fast CPU path and the reference path, chosen by construction."""

from __future__ import annotations

import torch
from helpers import make_batch, tiny_config

from electra.model import Discriminator


def test_cpu_training_attention_equals_sdpa_and_its_dropout_is_unbiased():
    """CPU training with attention dropout runs `written_attention` (lane masks on the
    probabilities) instead of SDPA's math kernel: without dropout the two agree; with it the
    mean output over many draws is the no-dropout output, and gradients reach q, k and v."""
    import torch.nn.functional as F

    from electra.model import Dropout
    from electra.model.kernels import written_attention

    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 3, 10, 8) for _ in range(3))
    mask = torch.ones(2, 1, 1, 10, dtype=torch.bool)
    mask[1, ..., 6:] = False
    plain = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    torch.testing.assert_close(written_attention(q, k, v, mask, torch.nn.Identity()), plain)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        half = written_attention(q, k, v, mask, torch.nn.Identity())
    assert half.dtype == torch.bfloat16
    torch.testing.assert_close(half.float(), plain, rtol=0.05, atol=0.05)

    drop = Dropout(0.3).train()
    mean = torch.stack([written_attention(q, k, v, mask, drop) for _ in range(4000)]).mean(0)
    torch.testing.assert_close(mean, plain, rtol=0, atol=0.03)
    leaf = [t.clone().requires_grad_() for t in (q, k, v)]
    written_attention(*leaf, mask, drop).sum().backward()
    assert all(t.grad is not None and t.grad.abs().sum() > 0 for t in leaf)


def test_block_uses_sdpa_outside_cpu_training_with_attention_dropout(monkeypatch):
    """The fast CPU kernels write attention out only in training with attention dropout;
    the reference kernels never do (SDPA with its own dropout)."""
    from electra.model import kernels

    calls = []
    monkeypatch.setattr(kernels, "written_attention", lambda *a: calls.append(1) or a[2])
    d = Discriminator(tiny_config(attention_dropout=0.1))
    ids, mask, _ = make_batch([12, 9], 12)
    d.eval()(ids, mask)
    assert calls == []  # evaluation: SDPA, no dropout
    d.train()(ids, mask)
    assert len(calls) == tiny_config().num_layers
    calls.clear()
    Discriminator(tiny_config(attention_dropout=0.0)).train()(ids, mask)
    assert calls == []
    Discriminator(tiny_config(attention_dropout=0.1), kernels=kernels.REFERENCE).train()(
        ids, mask)
    assert calls == []
    assert kernels.kernels_for("cpu") is kernels.FAST_CPU
    assert kernels.kernels_for("meta") is kernels.REFERENCE  # any other device: torch's
