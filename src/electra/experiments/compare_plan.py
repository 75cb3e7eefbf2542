"""`electra compare`'s plan: each objective's config and the steps its FLOP budget buys, and
the checkpoint steps at the budget's fractions (``Plan``, :func:`make_plan`)."""

from __future__ import annotations

import dataclasses
import json
import math
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from electra.config import ModelConfig, config_from_dict
from electra.errors import UserError
from electra.experiments.compare_spec import RANDOM_INIT, Task, Variant
from electra.experiments.demo import demo_config
from electra.io.outputs import inside
from electra.model.kernels import kernels_for
from electra.objectives.config import ObjectiveConfig
from electra.objectives.flops import step_flops_per_sequence
from electra.objectives.masking import Batch, Draws
from electra.objectives.pretraining import ElectraPretrainingModel
from electra.run_config import RunConfig
from electra.runtime import autocast, resolve_device, synchronize
from electra.saved.start import load_generator


@dataclass
class Plan:
    """What the comparison runs: each objective's config and steps, the models, the tasks."""

    base: RunConfig
    objectives: dict[str, RunConfig]  # each with train.max_steps set by the budget
    fractions: list[float]
    budget_flops: float
    flops_per_step: dict[str, int]
    tasks: list[Task]
    seeds: list[int]
    finetune_sets: list[str]

    def ends(self, objective: str) -> list[int]:
        """The steps at which ``objective`` keeps its discriminator."""
        steps = self.objectives[objective].train.max_steps
        return [max(1, round(f * steps)) for f in self.fractions]

    def models(self) -> list[tuple[str, str | None, float, float]]:
        """(name, objective, fraction, pretraining FLOPs) of every model fine-tuned."""
        out: list[tuple[str, str | None, float, float]] = []
        for o in self.objectives:
            for f, end in zip(self.fractions, self.ends(o), strict=True):
                out.append((f"{o}-{round(100 * f)}", o, f, end * self.flops_per_step[o]))
        return [*out, (RANDOM_INIT, None, 0.0, 0.0)]

    def spec(self) -> dict[str, Any]:
        """compare.json's settings: the pretraining (what makes two comparisons the same
        one) and the fine-tuning (which may change: tasks and seeds can be added later)."""
        return json.loads(json.dumps({  # tuples as lists, as read back
            "pretraining": {"objectives": {o: c.to_dict() for o, c in self.objectives.items()},
                            "fractions": self.fractions, "budget_flops": self.budget_flops},
            "finetuning": {"tasks": [dataclasses.asdict(t) for t in self.tasks],
                           "seeds": self.seeds, "finetune_sets": self.finetune_sets}}))

    def finetune_folder(self, out: Path, model: str, task: Task) -> Path:
        """DIR/finetune/MODEL/TASK-KEY: KEY names the task's files and settings and the
        seeds, so that changed fine-tuning settings never read back another's results."""
        import hashlib

        key = json.dumps([dataclasses.asdict(task), self.finetune_sets, self.seeds])
        digest = hashlib.sha256(key.encode()).hexdigest()[:8]
        return inside(out, "finetune", model, f"{task.name}-{digest}")

def objective_config(base: RunConfig, kind: str, given: dict[str, Any] | None = None,
                     budget_flops: float | None = None, seq_len: int = 128,
                     generator: ModelConfig | None = None) -> RunConfig:
    """The base config with ``objective.kind`` = ``kind`` and, with a budget, the steps it
    buys (warmup scaled with them). The objective's other settings carry over; the [MASK]
    and random-token fractions are the kind's own (BERT's 0.8/0.1 for mlm) unless ``given``
    sets them (``given``: the variant's own objective settings too). ``generator``: a frozen
    generator's config (fast_electra: its forward is in the step's FLOPs)."""
    try:
        objective = config_from_dict(ObjectiveConfig,
                                     {**base.objective.to_dict(), "kind": kind,
                                      "mask_token_prob": None, "random_token_prob": None,
                                      **(given or {})}, "[objective]")
        cfg = dataclasses.replace(base, objective=objective)
    except UserError as err:
        raise UserError(f"--objectives {kind}: the base config does not fit this objective "
                        f"({err})") from None
    if budget_flops is None:
        return cfg
    per_step = step_flops_per_sequence(cfg.model, objective, seq_len,
                                       generator) * cfg.train.batch_size
    steps = int(budget_flops // per_step)
    warmup = round(base.train.warmup_steps * steps / base.train.max_steps)
    train = config_from_dict(type(base.train), {**base.train.to_dict(), "max_steps": max(
        steps, 1), "warmup_steps": min(warmup, max(steps - 1, 0))}, "[train]")
    return dataclasses.replace(cfg, train=train)

def _base_config(raw: dict[str, Any], budget_kind: str) -> RunConfig:
    """The config every objective starts from: the one given, or the demo's (then --set)."""
    if "kind" in raw.get("objective", {}):
        raise UserError(f"the base config sets objective.kind = {raw['objective']['kind']!r}, "
                        f"which --objectives decides for each run; remove it from the config")
    if raw.get("objective", {}).get("two_stage_steps"):
        raise UserError("the base config sets objective.two_stage_steps; compare the two-stage "
                        "variant with `electra pretrain` runs (its cost changes at the stage "
                        "boundary)")
    if budget_kind == "demo":
        demo = demo_config(600).to_dict()
        raw = {s: {**demo[s], **raw.get(s, {})} for s in demo}
    return RunConfig.from_dict(raw)

def make_plan(data_meta: dict[str, Any], raw: dict[str, Any],
              objectives: list[Variant] | list[str], budget: tuple[str, float],
              fractions: list[float], tasks: list[Task], seeds: list[int],
              finetune_sets: list[str], measure: Any = None) -> Plan:
    """Resolve the configs and the steps each objective's budget buys. ``measure(cfg)``
    (a duration budget): this machine's training FLOP/s on ``cfg``. ``objectives``: the
    variants (or plain kinds), each run under its name."""
    base = _base_config(raw, budget[0])
    base = dataclasses.replace(base, model=base.model.replace(
        vocab_size=data_meta["vocab_size"], pad_token_id=data_meta["pad_id"]))
    T = data_meta["seq_len"]
    given = {k: raw.get("objective", {}).get(k) for k in ("mask_token_prob",
                                                          "random_token_prob")}
    variants = [v if isinstance(v, Variant) else Variant(v, v) for v in objectives]
    objectives = [v.name for v in variants]
    by_name = {v.name: v for v in variants}
    configs = {v.name: objective_config(base, v.kind, {**given, **v.given})
               for v in variants}  # refused if unfit
    frozen = {o: frozen_config(c) for o, c in configs.items()}
    flops = {o: step_flops_per_sequence(c.model, c.objective, T, frozen[o])
             * c.train.batch_size for o, c in configs.items()}
    budget_flops = budget[1]
    if budget[0] == "seconds":
        rate = measure(configs[objectives[0]])
        budget_flops = float(f"{budget[1] * rate:.3g}")
        print(f"compare: {objectives[0]} trains at {rate / 1e9:.0f} GFLOP/s here, so "
              f"{budget[1]:g} s is {budget_flops:.3g} FLOPs per objective", flush=True)
    worst = max(flops, key=lambda o: flops[o])  # the dearest step
    least = math.ceil(1 / min(fractions) - 1e-9) * flops[worst]  # a step at every fraction
    if budget_flops < least:
        raise UserError(f"--budget {budget_flops:.3g} FLOPs is too small: one step of "
                        f"{worst} costs {flops[worst]:.3g} FLOPs (batch "
                        f"{base.train.batch_size} x {T} tokens), and the {min(fractions):g} "
                        f"fraction needs at least one; give at least {least:.3g}")
    configs = {o: objective_config(base, by_name[o].kind, {**given, **by_name[o].given},
                                   budget_flops, T, frozen[o]) for o in objectives}
    return Plan(base, configs, fractions, budget_flops, flops, tasks, seeds,
                list(finetune_sets))

def frozen_config(cfg: RunConfig) -> ModelConfig | None:
    """The config of ``cfg``'s frozen generator (objective fast_electra), read from its
    folder; None for the objectives that train their own."""
    if cfg.objective.generator is None:
        return None
    return load_generator(cfg.objective.generator, flag="--objectives fast_electra:"
                          "generator").config


def measure_rate(cfg: RunConfig, data: Any, device: str = "auto", steps: int = 4) -> float:
    """Training FLOP/s of ``cfg``'s objective here: the median of ``steps`` timed steps of
    the model alone (after two warm-ups), on a real batch."""
    import numpy as np

    dev = resolve_device(device)
    torch.manual_seed(cfg.train.seed)
    model = ElectraPretrainingModel(cfg.model, cfg.objective, data.special,
                                    kernels_for(dev))
    if cfg.objective.generator is not None:
        model.attach_generator(load_generator(cfg.objective.generator, data).module)
    model = model.to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.train.lr)
    B = min(cfg.train.batch_size // cfg.train.grad_accum, len(data))
    batch = Batch.of({k: v.to(dev) for k, v in data.batch(np.arange(B)).items()})
    times = []
    for i in range(steps + 2):
        t0 = time.perf_counter()
        with autocast(dev, cfg.train.precision):
            out = model(batch, Draws(rng=torch.Generator(dev).manual_seed(i)))
        out.loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        synchronize(dev)
        if i >= 2:
            times.append(time.perf_counter() - t0)
    per_step = step_flops_per_sequence(cfg.model, cfg.objective, data.seq_len,
                                       frozen_config(cfg)) * B
    return per_step / statistics.median(times)
