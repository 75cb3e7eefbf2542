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
    DIR/results.json, results.md    per seed, medians, the table with the average (results.md
                                    after each model too: the rows so far)
    DIR/compare.png                 score against pretraining FLOPs

Each objective is pretrained and its models fine-tuned before the next (random init after
the first). Running the same command again continues: finished parts are read back, an
interrupted pretraining or fine-tune continues from its last checkpoint, and an objective
whose every fine-tune has its results.json is not pretrained again, so a long comparison can
move to another machine with only its small files (compare.json, the .electra.json marks,
each model folder's config and tokenizer, the fine-tunes' results.json). Other tasks, seeds or
fine-tuning settings in the same DIR reuse its pretrained models; other pretraining
settings (objectives, budget, fractions, base config) are refused.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import torch

from electra import environ
from electra.commands.finetune import model_source, parse_seeds, run_finetune
from electra.commands.pretrain import PretrainOptions, pretrain
from electra.config import DEFAULT_TIMEOUT_S, config_diffs
from electra.data.loader import ShardDataset
from electra.data.tokenizer import load_tokenizer
from electra.errors import UserError
from electra.experiments.compare_plan import Plan, make_plan, measure_rate
from electra.experiments.compare_results import plot, summarize, table
from electra.experiments.compare_spec import (
    DEFAULT_TASKS,
    DEMO_TASKS,
    RANDOM_INIT,
    Task,
    parse_budget,
    parse_fractions,
    parse_objectives,
    parse_tasks,
    with_probes,
)
from electra.io.checkpoint import step_dir
from electra.io.files import read_json, write_json
from electra.io.outputs import MARK, Claim, claim_out
from electra.io.trackers import grouped
from electra.model import Discriminator
from electra.run_config import raw_run_config
from electra.runtime import start
from electra.saved import folders
from electra.saved.models import open_model
from electra.tasks.registry import check_families, head_for_task, load_finetune_config, load_task


def main(data: str, out: str, budget: str, objectives: str = "electra,mlm,random",
         tasks: str | None = None, glue: str | None = None, seeds: str = "1,2,3",
         preset: str | None = None, config: str | None = None, sets: list[str] | None = None,
         finetune_sets: list[str] | None = None, fractions: str = "0.25,0.5,1",
         probe: str | None = None, device: str = "auto", progress: bool = True,
         dist_timeout: float = DEFAULT_TIMEOUT_S) -> dict[str, Any] | None:
    """`electra compare`: check everything, then pretrain, fine-tune and report."""
    kind_budget = parse_budget(budget)
    objective_list = parse_objectives(objectives)
    fraction_list = parse_fractions(fractions)
    seed_list = parse_seeds(seeds)
    task_list = with_probes(parse_tasks(tasks or (DEMO_TASKS if kind_budget[0] == "demo"
                                                  else DEFAULT_TASKS), glue), probe)
    for t in task_list:  # refuse unknown settings, and those no task reads, now
        if not t.zero_shot:
            check_families(load_finetune_config([*(finetune_sets or []), *t.sets]),
                           {t.task: head_for_task(t.task)})
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
    loaded = {t.name: load_task(t.task, **t.reading) for t in task_list
              if not t.zero_shot}  # read now, not after hours of pretraining
    for t in task_list:
        if t.zero_shot:  # its data read and checked now too
            t.evaluation().read()
    inputs = [("--data", data), ("--config", config), ("--glue", glue),
              *[(f"--tasks {t.name}", p) for t in task_list
                for p in ((t.folder,) if t.zero_shot else (t.train, t.dev))]]
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
    return int(environ.get("WORLD_SIZE"))

def run_compare(plan: Plan, data: str, claim: Claim, rt: Any, progress: bool = True,
                budget_text: str = "", loaded: dict[str, Any] | None = None
                ) -> dict[str, Any] | None:
    """Pretrain every objective, fine-tune every model, write the results into the claimed
    --out (rank 0). ``loaded``: the tasks' data, read already (else read when first needed)."""
    out = claim.path
    rt.on_main(lambda: _claim(claim, plan, budget_text), "checking --out")
    loaded = dict(loaded or {})
    scores: dict[str, dict[str, Any]] = {}
    with grouped(out):  # trackers (train.log_to, log_to): one store and group in DIR
        for objective in plan.objectives:  # each objective pretrained, then its models
            mine = [m[0] for m in plan.models() if m[1] == objective]  # fine-tuned
            if not all(_finished(plan, out, name) for name in mine):
                _pretrain_objective(plan, objective, data, out, rt, progress)
            if RANDOM_INIT not in scores and _shape(plan, out, needed=False):
                mine.append(RANDOM_INIT)  # the control as soon as it has a shape
            for name in mine:
                scores[name] = _finetune_model(plan, name, out, rt, progress, loaded)
                rt.on_main(lambda: _partial(plan, scores, out), "writing results.md")
        if RANDOM_INIT not in scores:
            _shape(plan, out)  # says why
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

def _partial(plan: Plan, scores: dict[str, dict[str, Any]], out: Path) -> None:
    """results.md as the rows come: the models fine-tuned so far, and how many remain."""
    results = summarize(plan, scores)
    left = len(plan.models()) - len(results["models"])
    (out / "results.md").write_text(table(plan, results) + (
        f"\n\nSo far: {left} of {len(plan.models())} models still to fine-tune (`electra "
        f"compare` again with the same settings goes on)." if left else "") + "\n")


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
    models = open_model(step_dir(run / "checkpoints", step)).parts
    folders.save(models["discriminator"], "discriminator", folder,
                 load_tokenizer(run), step=step, objective=objective,
                 fraction=fraction)

def _zero_shot(plan: Plan, out: Path, name: str, objective: str | None, task: Task,
               folder: Path, rt: Any) -> dict[str, Any]:
    """``sts`` or ``retrieval``: the model's embeddings scored as they are, in a results.json
    shaped as a fine-tune's (one entry, no seed: nothing random). Random init: the first
    objective's shape with weights drawn from seed 0."""
    model = out / "models" / name
    if objective is None and not (model / "discriminator/model.safetensors").is_file():
        source = model_source(random_init=str(_shape(plan, out)))
        torch.manual_seed(0)
        if rt.is_main:
            folders.save(Discriminator(source.config), "discriminator",
                         model / "discriminator", load_tokenizer(source.tokenizer))
    result: dict[str, Any] = {}
    if rt.is_main:
        print(f"compare: scoring {name}'s embeddings on {task.name}", flush=True)
        ev = task.evaluation()
        found = ev(model)
        result = {"seeds": {"-": {"dev": {task.metric: ev.primary(found)}}}, "zero_shot": True}
        if "bm25" in found:  # retrieval: BM25's score on the same set, the lexical baseline
            result["bm25"] = found["bm25"][task.metric]
        folder.mkdir(parents=True, exist_ok=True)
        write_json(folder / "results.json", result)
    return result


def _finished(plan: Plan, out: Path, name: str) -> bool:
    """Whether every task of model ``name`` has its results.json: its objective is not
    pretrained again (its models and pretraining run may be gone)."""
    return all((plan.finetune_folder(out, name, t) / "results.json").is_file()
               for t in plan.tasks)


def _finetune_model(plan: Plan, name: str, out: Path, rt: Any, progress: bool,
                    loaded: dict[str, Any]) -> dict[str, Any]:
    """Fine-tune model ``name`` on every task (finished ones read back); task name -> its
    results.json. ``loaded``: task name -> its data, added to when a task is first read."""
    objective = next(o for n, o, *_ in plan.models() if n == name)
    scores: dict[str, Any] = {}
    for task in plan.tasks:
        folder = plan.finetune_folder(out, name, task)
        if (folder / "results.json").is_file():
            scores[task.name] = read_json(folder / "results.json")
            continue
        if task.zero_shot:
            scores[task.name] = _zero_shot(plan, out, name, objective, task, folder, rt)
            continue
        if task.name not in loaded:
            loaded[task.name] = load_task(task.task, **task.reading)
        source = model_source(random_init=str(_shape(plan, out))) if objective is None \
            else model_source(str(out / "models" / name))
        if rt.is_main:
            print(f"compare: fine-tuning {name} on {task.name}, seeds "
                  f"{','.join(map(str, plan.seeds))}", flush=True)
        cfg = load_finetune_config([*plan.finetune_sets, *task.sets])
        scores[task.name] = run_finetune(source, dataclasses.replace(loaded[task.name]),
                                         folder, cfg, plan.seeds, rt, resume=True,
                                         progress=progress)
    return scores


def _shape(plan: Plan, out: Path, needed: bool = True) -> Path | None:
    """Random init's shape and tokenizer: the first kept model's folder (every objective
    pretrains the same shape); its config is enough, the weights may be gone."""
    for name, objective, *_ in plan.models():
        folder = out / "models" / name / "discriminator"
        if objective is not None and (folder / "config.json").is_file():
            return folder
    if not needed:
        return None
    raise UserError(f"{out}/models holds no pretrained model's config.json to give random "
                    f"init its shape; pretrain one objective again (remove its finetune/ "
                    f"folders) or start a new --out")
