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
    """The fast CPU kernels write attention out in training with attention dropout, and
    without it where a backward follows on short rows (up to 128 keys in fp32: SDPA's CPU
    backward is the slower there); evaluation and a forward without gradient run SDPA; the
    reference kernels never write it out (SDPA with its own dropout)."""
    from electra.model import kernels

    calls = []
    monkeypatch.setattr(kernels, "written_attention", lambda *a: calls.append(1) or a[2])
    layers = tiny_config().num_layers
    d = Discriminator(tiny_config(attention_dropout=0.1))
    ids, mask, _ = make_batch([12, 9], 12)
    d.eval()(ids, mask)
    assert calls == []  # evaluation: SDPA, no dropout
    d.train()(ids, mask)
    assert len(calls) == layers
    calls.clear()
    undropped = Discriminator(tiny_config(attention_dropout=0.0, max_position_embeddings=160))
    undropped.train()(ids, mask)
    assert len(calls) == layers  # short rows in training: written out
    calls.clear()
    with torch.no_grad():
        undropped(ids, mask)
    long_ids, long_mask, _ = make_batch([150, 140], 150)
    undropped(long_ids, long_mask)
    assert calls == []  # no backward to follow; rows past 128 keys in fp32: SDPA
    Discriminator(tiny_config(attention_dropout=0.1), kernels=kernels.REFERENCE).train()(
        ids, mask)
    assert calls == []
    assert kernels.kernels_for("cpu") is kernels.FAST_CPU
    assert kernels.kernels_for("meta") is kernels.REFERENCE  # any other device: torch's
    assert [kernels.writes_short(t, n) for t, n in [(torch.float32, 128), (torch.float32, 129),
            (torch.bfloat16, 256), (torch.bfloat16, 257)]] == [True, False, True, False]


def test_written_attention_without_dropout_has_sdpa_gradients():
    """Short rows in training attend written out: the same outputs and gradients as SDPA's
    (fp32, 1e-5), with a padding mask and with an additive bias (DeBERTa's)."""
    import torch.nn.functional as F

    from electra.model.kernels import FAST_CPU

    torch.manual_seed(0)
    mask = torch.ones(2, 1, 1, 10, dtype=torch.bool)
    mask[1, ..., 6:] = False
    bias = torch.randn(2, 3, 10, 10)
    for run in ("mask", "bias"):
        leaf = [torch.randn(2, 3, 10, 8, requires_grad=True) for _ in range(3)]
        ref = [t.detach().clone().requires_grad_() for t in leaf]
        assert FAST_CPU.writes(*leaf, 0.0, torch.nn.Identity())  # a module in training
        if run == "mask":
            out = FAST_CPU.attention(*leaf, mask, 0.0, torch.nn.Identity())
            want = F.scaled_dot_product_attention(*ref, attn_mask=mask)
        else:
            out = FAST_CPU.biased_attention(*leaf, bias, 0.3, 0.0, torch.nn.Identity())
            want = F.scaled_dot_product_attention(*ref, attn_mask=bias, scale=0.3)
        g = torch.randn_like(want)
        out.backward(g)
        want.backward(g)
        torch.testing.assert_close(out, want, rtol=1e-5, atol=1e-5)
        for a, b in zip(leaf, ref, strict=True):
            torch.testing.assert_close(a.grad, b.grad, rtol=1e-5, atol=1e-5)


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
