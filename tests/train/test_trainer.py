"""The scaffold both loops share, on a toy model: accumulation is one big batch, a
non-finite step is skipped (and counted) or stops the run naming how to go on."""

from __future__ import annotations

import contextlib
import dataclasses

import pytest
import torch
from helpers import no_syncs
from torch import nn

from electra.config import LoopConfig
from electra.runtime import Runtime
from electra.train.trainer import RandomStreams, Settings, Trainer, TrainingDiverged


def trainer(model: nn.Module, **settings) -> Trainer:
    """A trainer of ``model``: ``settings`` a LoopConfig's fields or the Settings' own."""
    rt = Runtime()
    shared = {f.name for f in dataclasses.fields(LoopConfig)}
    loop = LoopConfig(**{"precision": "fp32", "grad_clip": 0.0,
                         **{k: v for k, v in settings.items() if k in shared}})
    s = Settings(**{"lr": 0.1, "max_steps": 10, "warmup_steps": 0,
                    **{k: v for k, v in settings.items() if k not in shared}}, loop=loop)
    return Trainer(model, rt, s, lambda m: [{"params": list(m.parameters())}],
                   streams=RandomStreams(rt, 0))


def regression():
    torch.manual_seed(0)
    x, y = torch.randn(8, 4), torch.randn(8)

    def micro_step(model: nn.Module, j: int, accum: int = 1):
        part = slice(j * 8 // accum, (j + 1) * 8 // accum)
        loss = ((model(x[part]).squeeze(-1) - y[part]) ** 2).sum() / 8  # the global mean
        return loss, {}

    return micro_step


@pytest.mark.parametrize("accum", [2, 4])
def test_accumulated_micro_batches_step_like_one_batch(accum):
    step = regression()
    weights = {}
    for n in (1, accum):
        torch.manual_seed(1)
        # eps far above sqrt(v): AdamW's step is ~ lr * m / eps, linear in the gradient, so a
        # wrongly scaled accumulation shows (Adam itself would hide a constant scale)
        t = trainer(nn.Linear(4, 1), grad_accum=n, lr=100.0, adam_eps=100.0)
        for _ in range(3):
            assert t.train_step(lambda m, j, n=n: step(m, j, n), tokens=8) is not None
        weights[n] = [p.detach().clone() for p in t.model.parameters()]
        assert t.step == 3 and t.tokens == 24
    for a, b in zip(weights[1], weights[accum], strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_a_nonfinite_step_is_skipped_then_stops_the_run():
    torch.manual_seed(1)
    t = trainer(nn.Linear(4, 1), max_nonfinite_skips=1)
    before = [p.detach().clone() for p in t.model.parameters()]

    def poisoned(model: nn.Module, j: int):
        return model(torch.ones(2, 4)).sum() * float("nan"), {}

    assert t.train_step(poisoned) is None  # skipped: no update, no step
    assert (t.step, t.skips) == (0, 1)
    assert all(torch.equal(a, b) for a, b in zip(before, t.model.parameters(), strict=True))
    assert all(p.grad is None for p in t.model.parameters())  # nothing carried over
    with pytest.raises(TrainingDiverged, match=r"not finite at step 1 .*max_nonfinite_skips"):
        t.train_step(poisoned)


def test_every_counts_the_steps_taken():
    t = trainer(nn.Linear(4, 1))
    step = regression()
    seen = []
    for _ in range(6):
        t.train_step(step, tokens=8)
        seen.append((t.every(2), t.every(3), t.every(0)))
    assert [s[0] for s in seen] == [False, True, False, True, False, True]
    assert [s[1] for s in seen] == [False, False, True, False, False, True]
    assert not any(s[2] for s in seen)


def test_the_sync_free_step_never_reads_the_device_and_trains_as_the_host_checked_one(
        sync_free, monkeypatch):
    step = regression()
    weights = []
    for sync_free in (True, False):
        torch.manual_seed(1)
        t = trainer(nn.Linear(4, 1), grad_clip=1.0)
        assert t.sync_free
        t.sync_free = sync_free
        for _ in range(4):
            with no_syncs(monkeypatch) if sync_free else contextlib.nullcontext():
                t.train_step(step, tokens=torch.tensor(8.0))
        assert (t.step, t.tokens) == (4, 32)
        weights.append([p.detach().clone() for p in t.model.parameters()])
        assert t.metrics()["loss"] > 0
    for a, b in zip(*weights, strict=True):
        assert torch.equal(a, b)  # bitwise


def test_the_sync_free_step_skips_a_nonfinite_step_on_the_device_and_stops_at_the_line(
        sync_free):
    torch.manual_seed(1)
    t = trainer(nn.Linear(4, 1), max_nonfinite_skips=1)
    good = regression()
    t.train_step(good, tokens=8)
    before = [p.detach().clone() for p in t.model.parameters()]
    moments = {k: v.clone() for k, v in t.optimizer.state[t.params[0]].items()}

    def poisoned(model: nn.Module, j: int):
        return model(torch.ones(2, 4)).sum() * float("nan"), {}

    assert t.train_step(poisoned, tokens=8) is not None  # counted as a step, read later
    assert all(torch.equal(a, b) for a, b in zip(before, t.model.parameters(), strict=True))
    for k, v in t.optimizer.state[t.params[0]].items():
        assert torch.equal(v, moments[k]), k  # Adam's moments and step count untouched
    record = t.metrics()
    assert (record["step"], record["tokens"], t.skips) == (2, 8, 1)  # the skipped step's
    assert record["loss"] == pytest.approx(good(t.model, 0)[0].item(), rel=0.5)  # not NaN
    t.train_step(poisoned, tokens=8)
    with pytest.raises(TrainingDiverged, match=r"in 1 of the 1 steps up to step 3;.*skips"):
        t.metrics()


def test_compile_compiles_the_whole_step_in_one_process_and_each_unit_under_processes(
        monkeypatch):
    """``compile`` in one process: the module the step calls is compiled whole, its blocks
    are left alone; under DDP/FSDP (and CUDA graphs) each compile unit is compiled."""
    from electra.train import trainer as scaffold

    class Unit(nn.Linear):
        compile_unit = True

    t = trainer(nn.Sequential(Unit(4, 4), nn.Linear(4, 1), Unit(1, 1)), compile=True)
    assert isinstance(t.step_model, torch._dynamo.eval_frame.OptimizedModule)
    assert t.step_model._orig_mod is t.model
    assert [m._compiled_call_impl is not None for m in t.model] == [False, False, False]
    settings = Settings(lr=0.1, max_steps=1, warmup_steps=0, loop=LoopConfig(compile=True))
    assert scaffold.compile_scope(settings, Runtime()) == "step"
    assert scaffold.compile_scope(settings, Runtime(world_size=2)) == "blocks"
    assert scaffold.compile_scope(dataclasses.replace(settings, cuda_graphs=True),
                                  Runtime()) == "blocks"
    monkeypatch.setattr(scaffold, "compile_scope", lambda settings, rt: "blocks")
    t = trainer(nn.Sequential(Unit(4, 4), nn.Linear(4, 1), Unit(1, 1)), compile=True)
    assert t.step_model is t.model
    assert [m._compiled_call_impl is not None for m in t.model] == [True, False, True]


def test_cuda_graphs_compile_each_unit_static_in_reduce_overhead_and_mark_every_step(
        monkeypatch):
    """``cuda_graphs``: each compile unit compiled in reduce-overhead mode (CUDA graphs) with
    static shapes, and every optimizer step starts a new generation of the graphs (their
    outputs of the step before may then be overwritten), once per step, not per micro-batch."""
    class Unit(nn.Linear):
        compile_unit = True

    how, marks = [], []
    monkeypatch.setattr(nn.Module, "compile", lambda self, **kw: how.append((type(self), kw)))
    monkeypatch.setattr(torch.compiler, "cudagraph_mark_step_begin", lambda: marks.append(1))
    t = trainer(nn.Sequential(Unit(4, 4), nn.Linear(4, 1)), cuda_graphs=True, grad_accum=2)
    assert how == [(Unit, {"mode": "reduce-overhead", "dynamic": False})]
    step = regression()
    for _ in range(3):
        t.train_step(lambda m, j: step(m, j, 2), tokens=8)
    assert len(marks) == 3
