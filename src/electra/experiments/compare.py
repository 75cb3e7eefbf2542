"""`electra compare`: the paper's equal-compute comparison of pretraining objectives.

Each objective (``electra``, ``mlm``, ``random``, ... any ``objective.kind``) pretrains the
same discriminator-sized model on the same data for the same training FLOPs (generator and
discriminator, forward and backward, counted by :mod:`electra.objectives.flops`), so each gets the
number of steps its cost per step buys. Its discriminator is kept at fractions of the budget
(25, 50 and 100% by default), and every kept model, plus the same architecture from random
init, is fine-tuned on each task with each seed (the paper's recipe, ``electra finetune``).

    DIR/compare.json                the comparison: objectives, budget in FLOPs, tasks, seeds
    DIR/pretrain/OBJECTIVE/         each objective's pretraining run (`electra pretrain`)
    DIR/models/OBJECTIVE-PCT/       its discriminator at PCT% of the budget
    DIR/finetune/MODEL/TASK-KEY/    each fine-tune (`electra finetune`'s folder; KEY: a hash
                                    of the task's settings and the seeds)
    DIR/results.json, results.md    per seed, medians, the table with the average
    DIR/compare.png                 score against pretraining FLOPs

Running the same command again continues: finished parts are read back, an interrupted
pretraining or fine-tune continues from its last checkpoint. Other tasks, seeds or
fine-tuning settings in the same DIR reuse its pretrained models; other pretraining
settings (objectives, budget, fractions, base config) are refused.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from electra.config import (
    DEFAULT_TIMEOUT_S,
    FinetuneConfig,
    ObjectiveConfig,
    RunConfig,
    config_diffs,
    config_from_dict,
    parse_bool,
    parse_set,
    raw_run_config,
)
from electra.errors import UserError
from electra.io.files import read_json, write_json
from electra.io.outputs import MARK, Claim, claim_out
from electra.objectives.flops import step_flops_per_sequence
from electra.objectives.registry import OBJECTIVES

FRACTIONS = (0.25, 0.5, 1.0)
RANDOM_INIT = "random-init"
GLUE_FOLDERS = {"cola": "CoLA", "sst2": "SST-2", "mrpc": "MRPC", "stsb": "STS-B",
                "qqp": "QQP", "mnli": "MNLI", "qnli": "QNLI", "rte": "RTE", "wnli": "WNLI"}
# The paper's dev metric per task (section 3.1): Spearman for STS-B, Matthews correlation for
# CoLA, accuracy for the others; a custom regression task: Spearman.
PAPER_METRIC = {"cola": "mcc", "stsb": "spearman"}
DEMO_FLOPS = 2.0e13
"""--budget demo: training FLOPs per objective for the tiny model: ~600 ELECTRA steps of 32
examples at an 8k vocabulary (the demo's run, about 1.5 minutes of a 2-core CPU)."""
DEMO_TASKS = "sst2:max_train_examples=2000"
DEFAULT_TASKS = "sst2,mrpc,stsb,rte"
_DURATION = re.compile(r"^(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?(?:(\d+(?:\.\d+)?)s)?$")


@dataclass(frozen=True)
class Task:
    """One task of the comparison: a GLUE task or a custom file pair, with its settings."""

    name: str  # how results name it: sst2, or a custom task's name
    task: str  # the GLUE task, or "custom"
    folder: str | None = None  # GLUE: the task's folder
    train: str | None = None
    dev: str | None = None
    text_columns: str = "text"
    label_column: str = "label"
    regression: bool = False
    sets: tuple[str, ...] = ()  # fine-tuning settings for this task (key=value)

    @property
    def metric(self) -> str:
        if self.task == "custom":
            return "spearman" if self.regression else "accuracy"
        return PAPER_METRIC.get(self.task, "accuracy")


def parse_tasks(text: str, glue: str | None) -> list[Task]:
    """``--tasks``: comma-separated ``TASK[:key=value...]``. TASK is a GLUE task (read from
    ``--glue DIR``, e.g. DIR/SST-2) or ``custom`` with ``name=``, ``train=FILE``,
    ``dev=FILE``, and optionally ``text=COL[+COL]``, ``label=COL``, ``regression=true``;
    any other key=value is a fine-tuning setting for that task (e.g.
    ``sst2:max_train_examples=10000``)."""
    from electra.data.tasks import GLUE

    tasks: list[Task] = []
    for spec in [s.strip() for s in text.split(",") if s.strip()]:
        head, *items = spec.split(":")
        key = head.lower().replace("-", "")
        if key not in GLUE and key != "custom":
            raise UserError(f"--tasks {head}: unknown task; valid tasks: {', '.join(GLUE)}, or "
                            f"custom:name=N:train=FILE:dev=FILE")
        opts = dict(parse_set(i, "max_train_examples=10000") for i in items)
        own = {k: opts.pop(k) for k in ("name", "train", "dev", "text", "label", "regression")
               if k in opts}
        sets = tuple(f"{k}={v}" for k, v in opts.items())
        config_from_dict(FinetuneConfig, dict(opts), f"--tasks {spec}")  # refuse bad keys now
        if key == "custom":
            missing = [k for k in ("name", "train", "dev") if k not in own]
            if missing:
                raise UserError(f"--tasks {spec}: a custom task needs {', '.join(missing)}, "
                                f"e.g. custom:name=reviews:train=train.csv:dev=dev.csv")
            tasks.append(Task(str(own["name"]), "custom", None, str(own["train"]),
                              str(own["dev"]), str(own.get("text", "text")).replace("+", ","),
                              str(own.get("label", "label")),
                              parse_bool(own.get("regression", False),
                                         f"--tasks {spec}: regression"),
                              sets))
            continue
        if own:
            raise UserError(f"--tasks {spec}: {', '.join(own)} belong to custom tasks; a GLUE "
                            f"task is read from --glue DIR")
        if glue is None:
            raise UserError(f"--tasks {head} is a GLUE task: give --glue DIR, the folder "
                            f"holding {GLUE_FOLDERS[key]}/ (train.tsv, dev.tsv)")
        folder = Path(glue) / GLUE_FOLDERS[key]
        if not folder.is_dir() and (Path(glue) / key).is_dir():
            folder = Path(glue) / key
        if not folder.is_dir():
            raise UserError(f"--glue {glue}: no {GLUE_FOLDERS[key]}/ folder for task {key}; "
                            f"give the folder that holds GLUE's task folders")
        tasks.append(Task(key, key, str(folder), sets=sets))
    names = [t.name for t in tasks]
    if not tasks or len(set(names)) != len(names):
        raise UserError(f"--tasks {text}: give distinct tasks separated by commas, e.g. "
                        f"sst2,mrpc,stsb,rte")
    return tasks


def parse_objectives(text: str) -> list[str]:
    names = [s.strip() for s in text.split(",") if s.strip()]
    unknown = [n for n in names if n not in OBJECTIVES]
    if unknown or not names or len(set(names)) != len(names):
        what = f"unknown objective {unknown[0]!r}" if unknown else "give distinct objectives"
        raise UserError(f"--objectives {text}: {what}; valid: {', '.join(OBJECTIVES)}")
    return names


def parse_fractions(text: str) -> list[float]:
    try:
        values = sorted({float(s) for s in text.split(",") if s.strip()})
    except ValueError:
        values = []
    if not values or not all(0 < v <= 1 for v in values) or values[-1] != 1.0:
        raise UserError(f"--fractions {text}: give fractions of the budget in (0, 1], ending "
                        f"with 1, e.g. 0.25,0.5,1")
    return values


def parse_budget(text: str) -> tuple[str, float]:
    """``--budget``: ("flops", N), ("seconds", S) for a duration such as 30m, 1h or 90s, or
    ("demo", DEMO_FLOPS)."""
    text = text.strip().lower()
    if text == "demo":
        return "demo", DEMO_FLOPS
    try:
        value = float(text)
        if math.isfinite(value) and value > 0:
            return "flops", value
    except ValueError:
        pass
    m = _DURATION.match(text)
    if text and m and any(m.groups()):
        h, mi, s = (float(g or 0) for g in m.groups())
        seconds = 3600 * h + 60 * mi + s
        if seconds > 0:
            return "seconds", seconds
    raise UserError(f"--budget {text}: give training FLOPs per objective (e.g. 3e15), a "
                    f"duration of this machine's compute (e.g. 30m, 1h, 90s), or demo")


# -- the plan ----------------------------------------------------------------------------


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
        return out / "finetune" / model / f"{task.name}-{digest}"


def objective_config(base: RunConfig, kind: str, given: dict[str, Any] | None = None,
                     budget_flops: float | None = None, seq_len: int = 128) -> RunConfig:
    """The base config with ``objective.kind`` = ``kind`` and, with a budget, the steps it
    buys (warmup scaled with them). The objective's other settings carry over; the [MASK]
    and random-token fractions are the kind's own (BERT's 0.8/0.1 for mlm) unless ``given``
    sets them."""
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
    per_step = step_flops_per_sequence(cfg.model, objective, seq_len) * cfg.train.batch_size
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
        from electra.experiments.demo import demo_config

        demo = demo_config(600).to_dict()
        raw = {s: {**demo[s], **raw.get(s, {})} for s in demo}
    return RunConfig.from_dict(raw)


def make_plan(data_meta: dict[str, Any], raw: dict[str, Any], objectives: list[str],
              budget: tuple[str, float], fractions: list[float], tasks: list[Task],
              seeds: list[int], finetune_sets: list[str],
              measure: Any = None) -> Plan:
    """Resolve the configs and the steps each objective's budget buys. ``measure(cfg)``
    (a duration budget): this machine's training FLOP/s on ``cfg``."""
    base = _base_config(raw, budget[0])
    base = dataclasses.replace(base, model=base.model.replace(
        vocab_size=data_meta["vocab_size"], pad_token_id=data_meta["pad_id"]))
    T = data_meta["seq_len"]
    given = {k: raw.get("objective", {}).get(k) for k in ("mask_token_prob",
                                                          "random_token_prob")}
    configs = {o: objective_config(base, o, given) for o in objectives}  # refused if unfit
    flops = {o: step_flops_per_sequence(c.model, c.objective, T) * c.train.batch_size
             for o, c in configs.items()}
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
    configs = {o: objective_config(base, o, given, budget_flops, T) for o in objectives}
    return Plan(base, configs, fractions, budget_flops, flops, tasks, seeds,
                list(finetune_sets))


def measure_rate(cfg: RunConfig, data: Any, device: str = "auto", steps: int = 4) -> float:
    """Training FLOP/s of ``cfg``'s objective here: the median of ``steps`` timed steps of
    the model alone (after two warm-ups), on a real batch."""
    import numpy as np

    from electra.model.kernels import kernels_for
    from electra.objectives.pretraining import ElectraPretrainingModel
    from electra.train.runtime import autocast, resolve_device, synchronize

    dev = resolve_device(device)
    torch.manual_seed(cfg.train.seed)
    model = ElectraPretrainingModel(cfg.model, cfg.objective, data.special,
                                    kernels_for(dev)).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.train.lr)
    B = min(cfg.train.batch_size // cfg.train.grad_accum, len(data))
    batch = {k: v.to(dev) for k, v in data.batch(np.arange(B)).items()}
    times = []
    for i in range(steps + 2):
        t0 = time.perf_counter()
        with autocast(dev, cfg.train.precision):
            out = model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"],
                        rng=torch.Generator(dev).manual_seed(i))
        out.loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        synchronize(dev)
        if i >= 2:
            times.append(time.perf_counter() - t0)
    per_step = step_flops_per_sequence(cfg.model, cfg.objective, data.seq_len) * B
    return per_step / statistics.median(times)


# -- running it ---------------------------------------------------------------------------


def main(data: str, out: str, budget: str, objectives: str = "electra,mlm,random",
         tasks: str | None = None, glue: str | None = None, seeds: str = "1,2,3",
         preset: str | None = None, config: str | None = None, sets: list[str] | None = None,
         finetune_sets: list[str] | None = None, fractions: str = "0.25,0.5,1",
         device: str = "auto", progress: bool = True,
         dist_timeout: float = DEFAULT_TIMEOUT_S) -> dict[str, Any] | None:
    """`electra compare`: check everything, then pretrain, fine-tune and report."""
    from electra.config import load_finetune_config
    from electra.data.loader import ShardDataset
    from electra.finetune import parse_seeds
    from electra.tasks.registry import load_task
    from electra.train.runtime import start

    kind_budget = parse_budget(budget)
    objective_list = parse_objectives(objectives)
    fraction_list = parse_fractions(fractions)
    seed_list = parse_seeds(seeds)
    task_list = parse_tasks(tasks or (DEMO_TASKS if kind_budget[0] == "demo" else
                                      DEFAULT_TASKS), glue)
    load_finetune_config(finetune_sets or [])  # refuse unknown settings now
    if kind_budget[0] == "demo" and (preset or config):
        raise UserError("--budget demo brings its own model (the tiny preset); drop --preset "
                        "and --config, or give a budget in FLOPs or time")
    if kind_budget[0] != "demo" and not (preset or config):
        raise UserError("give the base model and training settings: --config BASE.toml or "
                        "--preset NAME (or --budget demo)")
    if kind_budget[0] == "seconds" and _world_size() > 1:
        raise UserError(f"--budget {budget}: under torchrun give the budget in FLOPs (a "
                        f"duration is measured on one process); e.g. measure it with a "
                        f"one-process run, whose compare.json records the FLOPs")
    raw = raw_run_config(preset, config, sets or [])
    shards = ShardDataset(data, "train")
    loaded = {t.name: load_task(t.task, t.folder, t.train, t.dev, t.text_columns,
                                t.label_column, t.regression) for t in task_list}  # read now,
    # not after hours of pretraining
    inputs = [("--data", data), ("--config", config), ("--glue", glue),
              *[(f"--tasks {t.name}", p) for t in task_list for p in (t.train, t.dev)]]
    with start(device, dist_timeout, keep_memory=True) as rt, \
            claim_out(out, "comparison", "compare", resume=True, inputs=inputs, rt=rt) as claim:
        # --out is checked (and held) before a duration budget is measured
        kind_budget = _saved_budget(Path(out), kind_budget, budget)
        plan = make_plan(shards.meta | {"pad_id": shards.special.pad,
                                        "vocab_size": shards.vocab_size,
                                        "seq_len": shards.seq_len},
                         raw, objective_list, kind_budget, fraction_list, task_list, seed_list,
                         finetune_sets or [],
                         measure=lambda cfg: measure_rate(cfg, shards, device))
        return run_compare(plan, data, claim, rt, progress, budget, loaded)


def _world_size() -> int:
    import os

    return int(os.environ.get("WORLD_SIZE", "1"))


def run_compare(plan: Plan, data: str, claim: Claim, rt: Any, progress: bool = True,
                budget_text: str = "", loaded: dict[str, Any] | None = None
                ) -> dict[str, Any] | None:
    """Pretrain every objective, fine-tune every model, write the results into the claimed
    --out (rank 0). ``loaded``: the tasks' data, read already (else read when first needed)."""
    out = claim.path
    rt.on_main(lambda: _claim(claim, plan, budget_text), "checking --out")
    for objective in plan.objectives:
        _pretrain_objective(plan, objective, data, out, rt, progress)
    scores = _finetune_all(plan, data, out, rt, progress, dict(loaded or {}))
    if not rt.is_main:
        rt.barrier()
        return None
    results = summarize(plan, scores)
    write_json(out / "results.json", results)
    (out / "results.md").write_text(table(plan, results) + "\n")
    plot(plan, results, out / "compare.png")
    print(table(plan, results))
    print(f"compare: wrote {out}/results.json, results.md and compare.png")
    rt.barrier()
    return results


def _claim(claim: Claim, plan: Plan, budget_text: str) -> None:
    """Start DIR, or continue it when it holds this same comparison (the same pretraining;
    other fine-tuning settings reuse the pretrained models)."""
    out, spec = claim.path, plan.spec()
    marker = out / "compare.json"
    if marker.is_file():
        saved = read_json(marker, "the comparison's settings")
        saved_spec = saved.get("spec", {}) if isinstance(saved, dict) else {}
        before = saved_spec.get("pretraining", {k: saved_spec[k] for k in (
            "objectives", "fractions", "budget_flops") if k in saved_spec})  # or 1st layout
        diffs = config_diffs(before, spec["pretraining"], set())
        if diffs or set(before) != set(spec["pretraining"]):
            diffs = diffs or ["the pretraining settings differ"]
            raise UserError(f"--out {out} holds a different comparison ({'; '.join(diffs[:3])}"
                            f"); choose another --out, or rerun with the same settings to "
                            f"continue it")
        if saved_spec.get("finetuning") != spec["finetuning"]:
            print(f"compare: {out} continues with other fine-tuning settings (tasks, seeds); "
                  f"its pretrained models are reused", flush=True)
            write_json(marker, {**saved, "spec": spec})
        return
    if out.exists() and (not out.is_dir() or any(p.name != MARK for p in out.iterdir())):
        raise UserError(f"--out {out} is not empty and holds no comparison (compare.json); "
                        f"choose a new folder")
    claim.mark(out)
    write_json(marker, {"budget": budget_text, "budget_flops": plan.budget_flops,
                        "spec": spec})


def _saved_budget(out: Path, budget: tuple[str, float], text: str) -> tuple[str, float]:
    """A duration budget continued in the same DIR: the FLOPs measured the first time."""
    marker = out / "compare.json"
    if budget[0] != "seconds" or not marker.is_file():
        return budget
    saved = read_json(marker, "the comparison's settings")
    if isinstance(saved, dict) and saved.get("budget") == text:
        print(f"compare: --budget {text} was measured as {saved['budget_flops']:.3g} FLOPs "
              f"when {out} was started; continuing with that", flush=True)
        return "flops", float(saved["budget_flops"])
    return budget


def _pretrain_objective(plan: Plan, objective: str, data: str, out: Path, rt: Any,
                        progress: bool) -> None:
    """Pretrain ``objective`` to each fraction of its budget, keeping the discriminator."""
    from electra.pretrain import PretrainOptions, pretrain

    cfg = plan.objectives[objective]
    run = out / "pretrain" / objective
    for fraction, end in zip(plan.fractions, plan.ends(objective), strict=True):
        name = f"{objective}-{round(100 * fraction)}"
        keep = out / "models" / name / "discriminator"
        if (keep / "model.safetensors").is_file():
            continue
        if rt.is_main:
            print(f"compare: pretraining {objective} to {fraction:.0%} of the budget (step "
                  f"{end} of {cfg.train.max_steps}, {end * plan.flops_per_step[objective]:.3g}"
                  f" FLOPs)", flush=True)
        pretrain(PretrainOptions(data=data, out=str(run), config=cfg, resume=True,
                                 progress=progress, stop_at=end), rt)
        rt.on_main(lambda e=end, k=keep, f=fraction: _keep(run, e, k, objective, f),
                   "keeping the discriminator")


def _keep(run: Path, step: int, folder: Path, objective: str, fraction: float) -> None:
    """The discriminator of ``run``'s checkpoint at ``step``, as a model folder."""
    from electra.io import folders
    from electra.io.models import open_model
    from electra.io.tokenizer import load_tokenizer
    from electra.train.checkpoint import step_dir

    models = open_model(step_dir(run / "checkpoints", step)).parts
    folders.save(models["discriminator"], "discriminator", folder,
                 load_tokenizer(run), step=step, objective=objective,
                 fraction=fraction)


def _finetune_all(plan: Plan, data: str, out: Path, rt: Any, progress: bool,
                  loaded: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Fine-tune every model on every task (finished ones read back); their results.json.
    ``loaded``: task name -> its data, added to when a task is first read."""
    from electra.config import load_finetune_config
    from electra.finetune import model_source, run_finetune
    from electra.tasks.registry import load_task

    scores: dict[str, dict[str, Any]] = {}
    for name, objective, _, _ in plan.models():
        scores[name] = {}
        for task in plan.tasks:
            folder = plan.finetune_folder(out, name, task)
            if (folder / "results.json").is_file():
                scores[name][task.name] = read_json(folder / "results.json")
                continue
            if task.name not in loaded:
                loaded[task.name] = load_task(task.task, task.folder, task.train, task.dev,
                                              task.text_columns, task.label_column,
                                              task.regression)
            if objective is None:
                first = next(iter(plan.objectives))
                shape = out / "models" / f"{first}-100"
                source = model_source(random_init=str(shape))
            else:
                source = model_source(str(out / "models" / name))
            if rt.is_main:
                print(f"compare: fine-tuning {name} on {task.name}, seeds "
                      f"{','.join(map(str, plan.seeds))}", flush=True)
            cfg = load_finetune_config([*plan.finetune_sets, *task.sets])
            result = run_finetune(source, dataclasses.replace(loaded[task.name]), folder, cfg,
                                  plan.seeds, rt, resume=True, progress=progress)
            scores[name][task.name] = result
    return scores


# -- results ------------------------------------------------------------------------------


def task_score(result: dict[str, Any], task: Task) -> list[float]:
    """The task's paper metric (x100) for each seed, from a fine-tune's results.json."""
    return [100 * seed_result["dev"][task.metric]
            for seed_result in result["seeds"].values()]


def summarize(plan: Plan, scores: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """results.json: per model, its pretraining FLOPs and, per task and for the average,
    every seed's score, the median, min and max."""
    models = []
    for name, objective, fraction, flops in plan.models():
        per_task = {}
        for task in plan.tasks:
            result = scores[name][task.name]
            per_task[task.name] = _spread(task_score(result, task))
            per_task[task.name]["warned_seeds"] = [
                int(s) for s, d in result.get("details", {}).items() if d.get("warnings")]
        seeds = [statistics.mean(per_task[t.name]["seeds"][i] for t in plan.tasks)
                 for i in range(len(plan.seeds))]
        models.append({"model": name, "objective": objective, "fraction": fraction,
                       "pretrain_flops": flops,
                       "steps": (plan.ends(objective)[plan.fractions.index(fraction)]
                                 if objective else 0),
                       "tasks": per_task, "average": _spread(seeds)})
    return {"budget_flops": plan.budget_flops, "seeds": plan.seeds,
            "metrics": {t.name: t.metric for t in plan.tasks},
            "steps": {o: c.train.max_steps for o, c in plan.objectives.items()},
            "flops_per_step": plan.flops_per_step, "models": models}


def _spread(values: list[float]) -> dict[str, Any]:
    return {"seeds": [round(v, 4) for v in values], "median": round(statistics.median(values),
                                                                    4),
            "min": round(min(values), 4), "max": round(max(values), 4)}


def table(plan: Plan, results: dict[str, Any]) -> str:
    """Markdown: one row per objective at each budget fraction, one column per task and (with
    several tasks) the average; medians over seeds (min-max)."""
    names = [t.name for t in plan.tasks]
    metric = {t.name: t.metric for t in plan.tasks}
    avg = len(names) > 1
    head = " | ".join([f"{n} ({metric[n]})" for n in names] + (["average"] if avg else []))
    lines = [f"| model | budget | pretraining FLOPs | steps | {head} |",
             f"|---|---|---|---|{'---|' * (len(names) + avg)}"]
    for m in results["models"]:
        cells = [_cell(m["tasks"][n], len(plan.seeds))
                 + (" !" if m["tasks"][n]["warned_seeds"] else "") for n in names]
        if avg:
            cells.append(_cell(m["average"], len(plan.seeds)))
        budget = f"{m['fraction']:.0%}" if m["objective"] else "-"
        lines.append(f"| {m['objective'] or RANDOM_INIT} | {budget} | "
                     f"{m['pretrain_flops']:.3g} | {m['steps']} | {' | '.join(cells)} |")
    seeds = ",".join(map(str, plan.seeds))
    warned = any(m["tasks"][n]["warned_seeds"] for m in results["models"] for n in names)
    return ("\n".join(lines) + f"\n\nMedian over seeds {seeds} of each task's dev score x100 "
            f"(min-max in brackets)" + ("; the average is each seed's mean over the tasks."
                                        if avg else ".")
            + ("\n! a seed predicted one class everywhere or its training loss never fell: "
               "see finetune/MODEL/TASK/results.md" if warned else ""))


def _cell(s: dict[str, Any], n: int) -> str:
    return f"{s['median']:.1f}" + (f" ({s['min']:.1f}-{s['max']:.1f})" if n > 1 else "")


def plot(plan: Plan, results: dict[str, Any], path: Path) -> Path:
    """compare.png: one panel per task and one for the average; score against pretraining
    FLOPs, a line per objective (median, min-max bars over seeds), random init flat."""
    from electra.experiments.plot import _pyplot

    plt = _pyplot()
    panels = [t.name for t in plan.tasks] + (["average"] if len(plan.tasks) > 1 else [])
    cols = min(3, len(panels))
    rows = math.ceil(len(panels) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.4 * rows), squeeze=False)
    for ax, panel in zip(axes.flat, panels, strict=False):
        for objective in plan.objectives:
            pts = [m for m in results["models"] if m["objective"] == objective]
            stats = [m["average"] if panel == "average" else m["tasks"][panel] for m in pts]
            x = [m["pretrain_flops"] for m in pts]
            y = [s["median"] for s in stats]
            err = [[s["median"] - s["min"] for s in stats], [s["max"] - s["median"]
                                                             for s in stats]]
            ax.errorbar(x, y, yerr=err, marker="o", capsize=3, label=objective)
        rand = next(m for m in results["models"] if m["objective"] is None)
        s = rand["average"] if panel == "average" else rand["tasks"][panel]
        ax.axhline(s["median"], color="gray", linestyle="--", label=RANDOM_INIT)
        ax.axhspan(s["min"], s["max"], color="gray", alpha=0.15)
        metric = "mean" if panel == "average" else {t.name: t.metric for t in plan.tasks}[panel]
        ax.set_title(f"{panel} ({metric})")
        ax.set_xlabel("pretraining FLOPs")
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=8)
    fig.suptitle(f"equal compute: {plan.budget_flops:.3g} training FLOPs per objective, "
                 f"seeds {','.join(map(str, plan.seeds))}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
