"""Linear layers' weights cast once a micro-batch (``electra.train.cast``): bitwise what
autocast and autograd compute without it, on every body, in bf16 and fp16, over accumulated
micro-batches; and the trainer uses it only where autograd's gradient hooks are not needed."""

from __future__ import annotations

import contextlib

import pytest
import torch
from helpers import make_batch, tiny_config

from electra.config import LoopConfig
from electra.model import Discriminator
from electra.model.layers import Linear
from electra.train.cast import CastOnce

BODIES = {
    "bert": {},
    "modernbert": {"body": "modernbert", "preset": "modernbert-small"},
    "deberta": {"body": "deberta", "position_buckets": 8, "max_relative_positions": 32},
}


def model_for(body: str, seed: int = 0) -> torch.nn.Module:
    over = dict(BODIES[body])
    preset = over.pop("preset", None)
    cfg = tiny_config(hidden_dropout=0.1, attention_dropout=0.1, **over)
    if preset is not None:
        from electra.model.bodies import model_preset

        cfg = model_preset(preset, **{k: getattr(cfg, k) for k in (
            "vocab_size", "embedding_size", "hidden_size", "num_layers", "num_heads",
            "intermediate_size", "max_position_embeddings", "hidden_dropout",
            "attention_dropout")})
    torch.manual_seed(seed)
    model = Discriminator(cfg)
    with torch.no_grad():  # biases and norms off their initial values
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.02)
    return model.train()


def grads_after(model: torch.nn.Module, dtype: torch.dtype, cast: bool,
                micro_batches: int) -> dict[str, torch.Tensor]:
    """The gradients of ``micro_batches`` forward/backward passes under autocast (the same
    dropout masks either way), with or without the weights cast once."""
    model.zero_grad(set_to_none=True)
    plan = CastOnce(model, dtype) if cast else None
    for j in range(micro_batches):
        ids, mask, types = make_batch([12, 9, 16], 16, seed=j)
        torch.manual_seed(100 + j)
        with torch.autocast("cpu", dtype=dtype), plan() if plan else contextlib.nullcontext():
            model(ids, mask, types).float().square().mean().backward()
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("body", sorted(BODIES))
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_casting_once_is_bitwise_autocast(body, dtype):
    model = model_for(body)
    for n in (1, 2):  # one micro-batch (.grad written), two (the second added to it)
        theirs = grads_after(model, dtype, cast=False, micro_batches=n)
        ours = grads_after(model, dtype, cast=True, micro_batches=n)
        assert ours.keys() == theirs.keys()
        for name in theirs:
            assert ours[name].dtype == torch.float32
            assert torch.equal(ours[name], theirs[name]), (body, dtype, n, name)


def test_the_plan_holds_every_trainable_linear_layer_once():
    model = model_for("bert")
    plan = CastOnce(model, torch.bfloat16)
    layers = [m for m in model.modules() if isinstance(m, Linear)]
    assert plan.layers == layers and len(plan.params) == 2 * len(layers)
    model.head_out.requires_grad_(False)  # a frozen layer stays on autocast's path
    assert model.head_out not in CastOnce(model, torch.bfloat16).layers


def test_outside_the_plan_a_layer_is_torchs_linear():
    layer = Linear(4, 3)
    x = torch.randn(2, 5, 4)
    assert torch.equal(layer(x), torch.nn.functional.linear(x, layer.weight, layer.bias))
    plan = CastOnce(layer, torch.bfloat16)
    with torch.autocast("cpu", dtype=torch.bfloat16), plan():
        y = layer(x)
        assert layer.cast[0].dtype == torch.bfloat16
    assert layer.cast is None
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert torch.equal(y, layer(x))


def test_the_trainer_casts_once_in_one_eager_process_under_16_bit_autocast():
    import dataclasses
    from types import SimpleNamespace

    from electra.train.cast import cast_once
    from electra.train.trainer import Settings

    model = model_for("bert")
    one, two = SimpleNamespace(enabled=False), SimpleNamespace(enabled=True)
    plain = Settings(lr=1e-3, max_steps=1, warmup_steps=0)
    assert isinstance(cast_once(model, one, plain, "bf16"), CastOnce)
    assert isinstance(cast_once(model, one, plain, "fp16"), CastOnce)
    for rt, settings, precision in [
            (one, plain, "fp32"),  # nothing to cast
            (two, plain, "bf16"),  # DDP, FSDP: they reduce on AccumulateGrad's hooks
            (one, dataclasses.replace(plain, loop=LoopConfig(compile=True)), "bf16"),  # fused
            (one, dataclasses.replace(plain, cuda_graphs=True), "bf16"),
            (one, dataclasses.replace(plain, loop=LoopConfig(cast_once=False)), "bf16")]:
        assert cast_once(model, rt, settings, precision) is contextlib.nullcontext


def test_a_layer_a_micro_batch_leaves_unused_gets_no_gradient():
    """As autograd leaves it: None, so the optimizer skips it (a multi-task step trains one
    task's head), not zeros, which AdamW's decay would move."""
    used, unused = Linear(4, 3), Linear(4, 3)
    plan = CastOnce(torch.nn.ModuleList([used, unused]), torch.bfloat16)
    with torch.autocast("cpu", dtype=torch.bfloat16), plan():
        used(torch.randn(5, 4)).float().sum().backward()
    assert used.weight.grad is not None and used.bias.grad is not None
    assert unused.weight.grad is None and unused.bias.grad is None


@pytest.mark.parametrize("shape, view", [
    ((6, 4), None), ((2, 3, 4), None), ((3, 2, 4), (1, 0, 2)),  # 2-D; folded; permuted
    ((2, 5, 4), "slice"), ((4,), None)])  # a slice (cast to a contiguous copy); 1-D
def test_a_layer_matches_autocast_on_every_input_layout(shape, view):
    """aten::linear folds a 2-D or contiguous input to rows for one addmm, and runs any
    other as matmul then the bias: the layer takes the same path on the same cast input."""
    torch.manual_seed(0)
    layer = Linear(4, 3)
    with torch.no_grad():
        layer.bias.normal_()
    outs = []
    for cast in (False, True):
        x = torch.randn(shape, generator=torch.Generator().manual_seed(1), requires_grad=True)
        y = x.permute(view) if isinstance(view, tuple) else x[:, 1:4] if view else x
        layer.zero_grad(set_to_none=True)
        plan = CastOnce(layer, torch.bfloat16) if cast else None
        with torch.autocast("cpu", dtype=torch.bfloat16), \
                plan() if plan else contextlib.nullcontext():
            out = layer(y)
            (out.float() * torch.linspace(-1, 1, out.numel()).view(out.shape)).sum().backward()
        outs.append((out, x.grad, layer.weight.grad, layer.bias.grad))
    for a, b in zip(*outs, strict=True):
        assert a.dtype == b.dtype and torch.equal(a, b)
