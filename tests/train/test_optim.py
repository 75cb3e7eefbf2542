"""The optimizer's parts: the schedule, weight-decay groups, layer-wise learning rates."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from helpers import small_model

from electra.model.bodies import model_preset
from electra.tasks.sequence.head import SequenceClassifier
from electra.train.optim import (
    layer_depth,
    layerwise_groups,
    param_groups,
    schedule,
    warmup_linear,
)


def test_schedule_and_weight_decay_groups():
    f = warmup_linear(10, 110)
    assert [f(0), f(5), f(10), f(60), f(110), f(200)] == [0.0, 0.5, 1.0, 0.5, 0.0, 0.0]
    from electra.objectives.pretraining import ElectraPretrainingModel

    m = ElectraPretrainingModel(small_model(vocab_size=50))
    decay, plain = param_groups(m, 0.01)
    names = {id(p): n for n, p in m.named_parameters()}
    assert all(p.ndim == 2 for p in decay["params"])
    assert all(n.endswith(("bias", "norm.weight")) for n in (names[id(p)] for p in
                                                              plain["params"]))
    n_all = sum(p.numel() for p in m.parameters())
    assert n_all == sum(p.numel() for p in decay["params"] + plain["params"])


def test_each_schedule_by_hand():
    """10 warmup steps of 110: linear is ELECTRA's; cosine follows half a cosine from the
    peak at 10 to 0 at 110; wsd holds the peak until the last 20% (step 88), then falls
    linearly to 0 at 110."""
    linear = schedule("linear", 10, 110)
    assert [linear(s) for s in (0, 5, 10, 60, 110)] == [0.0, 0.5, 1.0, 0.5, 0.0]
    cosine = schedule("cosine", 10, 110)
    assert cosine(5) == 0.5 and cosine(10) == 1.0 and cosine(110) == pytest.approx(0.0)
    assert cosine(60) == pytest.approx(0.5) and cosine(35) == pytest.approx(
        0.5 * (1 + math.cos(math.pi / 4)))
    wsd = schedule("wsd", 10, 110, decay_fraction=0.2)
    assert [wsd(s) for s in (5, 10, 50, 87, 88, 99, 110)] == [
        0.5, 1.0, 1.0, 1.0, 1.0, pytest.approx(0.5), 0.0]
    # The stable phase's rate does not depend on where the run will end.
    assert all(schedule("wsd", 10, n, 0.1)(50) == 1.0 for n in (100, 1000, 10_000))
    # ModernBERT's 1-sqrt decay: a quarter of the decay done leaves 1 - 1/2 of the peak.
    sqrt = schedule("wsd", 10, 110, decay_fraction=0.2, decay_shape="1-sqrt")
    assert [sqrt(s) for s in (50, 88, 93.5, 99, 110)] == [
        1.0, 1.0, pytest.approx(0.5), pytest.approx(1 - math.sqrt(0.5)), 0.0]


def test_layerwise_learning_rates_follow_the_formula():
    cfg = model_preset("tiny", vocab_size=100, num_layers=4)
    model = SequenceClassifier(cfg, 3)
    lr, d, L = 1e-3, 0.8, 4
    groups = layerwise_groups(model, lr, d, 0.01)
    rate = {id(p): g["lr"] for g in groups for p in g["params"]}
    for name, p in model.named_parameters():
        if name.startswith("head_"):
            expected = lr  # the task head: full rate
        elif name.startswith("encoder.layers."):
            i = int(name.split(".")[2])
            expected = lr * d ** (L - 1 - i)  # top layer (i = 3) full, each below x0.8
        else:
            assert name.startswith("encoder.embeddings"), name
            expected = lr * d**L  # one step below layer 0
        assert rate[id(p)] == pytest.approx(expected), name
    assert layer_depth("encoder.layers.3.query.weight", L) == 4
    assert sum(len(g["params"]) for g in groups) == len(list(model.parameters()))
    # optimizer=muon: the same rates, each depth's block matrices in a Muon group of their own
    split = layerwise_groups(model, lr, d, 0.01, muon=True)
    assert {id(p): g["lr"] for g in split for p in g["params"]} == rate
    names = {id(p): n for n, p in model.named_parameters()}
    assert {names[id(p)] for g in split if g["muon"] for p in g["params"]} == {
        n for n, p in model.named_parameters() if n.startswith("encoder.layers.") and p.ndim == 2}


def test_an_optimizer_state_of_three_qkv_parameters_resumes_on_the_fused_one():
    """A checkpoint's AdamW state written when query, key and value were three parameters
    (split here from a fused run's) loads as the fused parameter's, and the next step is
    bitwise the one the fused run takes."""
    import copy

    from helpers import tiny_config

    from electra.model import Discriminator
    from electra.train.optim import adamw, param_groups
    from electra.train.parallel import fuse_qkv_state

    torch.manual_seed(0)
    model = Discriminator(tiny_config())
    opt = adamw(param_groups(model, 0.01), lr=1e-3)
    for _ in range(2):
        for p in model.parameters():
            p.grad = torch.randn_like(p)
        opt.step()
    saved, twin = copy.deepcopy(opt.state_dict()), copy.deepcopy(model)
    names = {id(p): n for n, p in model.named_parameters()}
    old = {"state": {}, "param_groups": []}  # the three-tensor layout
    for group, live in zip(saved["param_groups"], opt.param_groups, strict=True):
        ids = []
        for i, p in zip(group["params"], live["params"], strict=True):
            parts = [saved["state"][i]]
            if names[id(p)].endswith(("qkv.weight", "qkv.bias")):
                parts = [{k: v if k == "step" else v.chunk(3)[j].clone()
                          for k, v in saved["state"][i].items()} for j in range(3)]
            for part in parts:
                old["state"][len(old["state"])] = part
                ids.append(len(old["state"]) - 1)
        old["param_groups"].append({**group, "params": ids})
    twin_opt = adamw(param_groups(twin, 0.01), lr=1e-3)
    twin_opt.load_state_dict(fuse_qkv_state(old, twin_opt, twin))
    grads = [torch.randn_like(p) for p in model.parameters()]
    for m, o in ((model, opt), (twin, twin_opt)):
        for p, g in zip(m.parameters(), grads, strict=True):
            p.grad = g.clone()
        o.step()
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), twin.parameters(),
                                                 strict=True))
    assert fuse_qkv_state(saved, opt, model) is saved  # the fused layout passes as it is


@pytest.mark.parametrize("max_norm,nan", [(0.5, False), (1e6, False), (1e6, True)])
def test_clip_grad_norm_is_torchs_bitwise(max_norm, nan):
    """Clipped, left as they are, and a NaN gradient (the NaN norm scales every gradient to
    NaN, as torch's does)."""
    from electra.train.optim import clip_grad_norm

    torch.manual_seed(0)
    grads = [torch.randn(s) * 3 for s in ((7, 5), (5,), (64, 3), (1,))]
    if nan:
        grads[1][2] = float("nan")
    ours = [torch.nn.Parameter(torch.zeros_like(g)) for g in grads]
    theirs = [torch.nn.Parameter(torch.zeros_like(g)) for g in grads]
    for a, b, g in zip(ours, theirs, grads, strict=True):
        a.grad, b.grad = g.clone(), g.clone()
    norm = clip_grad_norm(ours, max_norm)
    same = torch.testing.assert_close  # rtol = atol = 0: exactly equal, NaN equal to NaN
    same(norm, torch.nn.utils.clip_grad_norm_(theirs, max_norm), rtol=0, atol=0, equal_nan=True)
    for a, b in zip(ours, theirs, strict=True):
        same(a.grad, b.grad, rtol=0, atol=0, equal_nan=True)
    assert not nan or all(a.grad.isnan().all() for a in ours)


def test_muon_takes_the_blocks_matrices_and_steps_as_torchs_two_optimizers():
    """train.optimizer=muon: every 2-d weight in the encoders' blocks goes to Muon (with
    weight decay), the embeddings, heads, norms and biases to AdamW; three steps of the one
    optimizer equal torch's Muon (match_rms_adamw) and fused AdamW stepped side by side, and
    its state dict reloads into a fresh one that continues identically."""
    from electra.objectives.pretraining import ElectraPretrainingModel
    from electra.train.optim import MuonAdamW, make_optimizer

    torch.manual_seed(0)
    m = ElectraPretrainingModel(small_model(vocab_size=50))
    names = {id(p): n for n, p in m.named_parameters()}
    muon, decay, _plain = param_groups(m, 0.01, muon=True)
    assert muon["muon"] and muon["weight_decay"] == 0.01
    assert {names[id(p)] for p in muon["params"]} == {
        n for n, p in m.named_parameters() if p.ndim == 2 and ".layers." in n}
    assert any("qkv.weight" in names[id(p)] for p in muon["params"])
    assert {names[id(p)].split(".")[-2] for p in decay["params"]} >= {"word_embeddings",
                                                                        "head_out"}
    ref = ElectraPretrainingModel(small_model(vocab_size=50))
    ref.load_state_dict(m.state_dict())
    mine = make_optimizer("muon", param_groups(m, 0.01, muon=True), 1e-3, (0.9, 0.999), 1e-6)
    rg = param_groups(ref, 0.01, muon=True)
    theirs = [torch.optim.Muon(rg[:1], lr=1e-3, adjust_lr_fn="match_rms_adamw"),
              torch.optim.AdamW(rg[1:], lr=1e-3, betas=(0.9, 0.999), eps=1e-6, fused=True)]

    def step(model, opts, seed):
        g = torch.Generator().manual_seed(seed)
        for p in model.parameters():
            p.grad = torch.randn(p.shape, generator=g)
        for o in opts:
            o.step()

    for i in range(3):
        step(m, [mine], i)
        step(ref, theirs, i)
    assert all(torch.equal(a, b) for a, b in zip(m.state_dict().values(),
                                                 ref.state_dict().values(), strict=True))
    again = ElectraPretrainingModel(small_model(vocab_size=50))
    again.load_state_dict(m.state_dict())
    fresh = MuonAdamW(param_groups(again, 0.01, muon=True), 1e-3, (0.9, 0.999), 1e-6)
    fresh.load_state_dict(copy.deepcopy(mine.state_dict()))  # (not sharing its tensors)
    step(m, [mine], 9)
    step(again, [fresh], 9)
    assert all(torch.equal(a, b) for a, b in zip(m.state_dict().values(),
                                                 again.state_dict().values(), strict=True))
