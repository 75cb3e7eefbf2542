"""The kernel seam: the fast CPU path and the reference path, chosen by construction."""

from __future__ import annotations

import pytest
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


@pytest.mark.slow
@pytest.mark.parametrize("padded", [True, False])
def test_a_compiled_block_equals_the_eager_one(padded):
    """``train.compile`` compiles each block (``compile_unit``): its outputs and gradients
    equal eager's (1e-5), padded and unpadded."""
    import copy

    from electra.model import Block
    from electra.model.kernels import FAST_CPU

    torch.manual_seed(0)
    cfg = tiny_config(hidden_dropout=0.0, attention_dropout=0.0)
    eager = Block(cfg)
    compiled = copy.deepcopy(eager)
    compiled.compile()
    _, mask, _ = make_batch([12, 7, 3], 12)
    layout = FAST_CPU.layout(None if padded else mask)
    x = torch.randn(3, 12, cfg.hidden_size)
    x = layout.tokens(x)
    results = []
    for block in (eager, compiled):
        inp = x.clone().requires_grad_()
        out = block(inp, layout)
        (out.pow(2).mean()).backward()
        results.append((out.detach(), inp.grad, [p.grad for p in block.parameters()]))
    (a, ga, pa), (b, gb, pb) = results
    torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(gb, ga, rtol=1e-5, atol=1e-5)
    for p, q in zip(pa, pb, strict=True):
        torch.testing.assert_close(q, p, rtol=1e-5, atol=1e-5)
