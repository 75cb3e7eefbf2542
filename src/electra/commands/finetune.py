"""`electra finetune`: the discriminator fine-tuned on one task, or on several at once
(``--task a,b,c``: one encoder, a head per task), once per seed, on the scaffold.

The paper's recipe as defaults (``electra.config.FinetuneConfig``): AdamW, lr 3e-4 for
small-size and 1e-4 for base-size models, layer-wise learning-rate decay 0.8 (0.9 for
24-layer models; ``electra.train.optim.layerwise_groups``), 10% warmup then linear decay, 3 epochs
(10 for RTE and STS-B), batch 32, max length 128. The scaffold (``electra.train.trainer``) adds
gradient accumulation, fp16 with loss scaling, non-finite handling and checkpoints; the loop
is ``electra.train.finetuning`` (one task is several with one).

    OUT/seed-S/               model.safetensors, config.json (labels, task), tokenizer files,
                              metrics.jsonl and tb/ (training loss per epoch), result.json
    OUT/seed-S/predictions/   GLUE submission files (with --predict test)
    OUT/results.json, OUT/results.md   per-seed metrics and their medians

Several tasks: each task's model (the encoder + its head) in ``OUT/seed-S/TASK/``, a
fine-tuned model folder that `evaluate`, `predict`, `export` and `--model` take (continuing a
task alone from the shared encoder, MT-DNN's recipe, is ``--model OUT/seed-S/TASK``); the
seed's metrics.jsonl holds every task's dev scores; results per task and seed.

Everything is written into ``OUT.partial/`` and renamed to ``OUT`` at the end. An interrupted
run continues with ``--resume``: finished seeds (with their ``result.json``) are kept, the
seed in progress restarts from its last checkpoint (``OUT.partial/seed-S/checkpoints``, at
the end of every epoch or every ``save_every`` steps), bitwise as if never stopped.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from torch import nn

from electra.commands.finetuned import (
    begin,
    check_split,
    classifier_card,
    load_classifier,
    opening,
    report,
    save_classifier,
)
from electra.config import (
    DEFAULT_TIMEOUT_S,
    MAX_SEED,
    FinetuneConfig,
)
from electra.data.sources import local_paths
from electra.data.tokenizer import load_tokenizer
from electra.errors import UserError
from electra.evaluation.registry import EVALUATORS, evaluator
from electra.io import hub
from electra.io.files import disk_errors, publish, read_json, write_json
from electra.io.outputs import Claim, claim_out
from electra.io.progress import reporting
from electra.io.trackers import check_reachable, parse_log_to
from electra.model.bodies import model_preset
from electra.runtime import (
    Runtime,
    bound_kernel_cache,
    check_compile,
    placed,
    resolve_device,
    start,
)
from electra.saved import folders
from electra.saved.hf import POOLINGS
from electra.saved.models import LayerSpec, encoder_part, fine_tuned, open_model
from electra.tasks.base import TaskData, head_of
from electra.tasks.registry import (
    check_families,
    check_reading,
    finetune_config,
    head_for_task,
    load_finetune_config,
    load_task,
)
from electra.train.finetuning import (
    ModelSource,
    Selections,
    check_trainable,
    dev_predictions,
    finetune_tasks,
    kept_predictions,
    scores,
)

if TYPE_CHECKING:
    from tokenizers import Tokenizer  # (the types only: the readers stay light)


def model_source(model: str | None = None, random_init: str | None = None,
                 tokenizer: str | None = None) -> ModelSource:
    """``--model RUN`` (a pretraining run, its discriminator/ or a checkpoint, a fine-tuned
    model, or a transformers ElectraForPreTraining folder), or
    ``--random-init PRESET --tokenizer PATH`` / ``--random-init RUN`` (that run's shape)."""
    if random_init and hub.is_hub_id(random_init):  # a downloaded model's shape
        random_init = hub.resolve(random_init, "--random-init")
    if tokenizer:
        tokenizer = hub.resolve(tokenizer, "--tokenizer")
    if random_init:
        if Path(random_init).is_dir():  # a model folder's shape (and tokenizer), fresh
            folder = Path(random_init)  # weights: its config alone is read
            if (folder / "discriminator" / "config.json").is_file():
                folder = folder / "discriminator"
            if not (folder / "config.json").is_file():
                folders.resolve(random_init, "discriminator", "--random-init")  # says why
            cfg, _ = folders.read_config(folder, "discriminator", "--random-init")
            return ModelSource(None, cfg, folder, "random-init")
        if not tokenizer:
            raise UserError("--random-init PRESET needs --tokenizer (vocab.txt or "
                            "tokenizer.json)")
        vocab = load_tokenizer(tokenizer).get_vocab_size()
        return ModelSource(None, model_preset(random_init, vocab_size=vocab), Path(tokenizer),
                           "random-init")
    if not model:
        raise UserError("give --model RUN (or --random-init PRESET --tokenizer PATH)")
    name, model = model, hub.resolve(model, "--model")  # the name results.json keeps
    meta = read_json(Path(model) / "config.json", "a model folder's config") if (
        Path(model) / "config.json").is_file() else {}
    part = encoder_part(model)  # a fine-tuned model's, or a run's (a checkpoint's)
    opened = open_model(model, part)
    module = opened[part]
    return ModelSource(opened.tokenizer, module.config, opened.tokenizer, str(name),  # type: ignore[arg-type]
                       module.encoder.state_dict(), _loaded(Path(model), meta))  # type: ignore[union-attr]


def _loaded(folder: Path, meta: Any) -> str:
    """What ``--model FOLDER`` takes its encoder from, and what of it is left behind."""
    meta = meta if isinstance(meta, dict) else {}
    if (folder / "manifest.json").is_file():
        return (f"the encoder of checkpoint {folder.name}'s discriminator (its replaced-token "
                f"head and the generator left out)")
    if "model_type" in meta:
        kind = (meta.get("architectures") or [meta["model_type"]])[0]
        return f"the encoder of a transformers {kind} folder (its head left out)"
    if fine_tuned(folder):
        return (f"the encoder of a model fine-tuned on {meta.get('task', 'a task')} (its "
                f"{head_of(meta).name} head left out)")
    return "the encoder of its discriminator (its replaced-token head left out)"


def parse_seeds(text: str) -> list[int]:
    try:
        seeds = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        seeds = []
    if not seeds or len(set(seeds)) != len(seeds) or min(seeds) < 0 or max(seeds) > MAX_SEED:
        raise UserError(f"--seeds {text}: give distinct integers from 0 to 2**32-1 separated "
                        f"by commas, e.g. 1,2,3")
    return seeds


def main(task: str, out: str, model: str | None = None, random_init: str | None = None,
         tokenizer: str | None = None, data: str | None = None, train: str | None = None,
         dev: str | None = None, seeds: str = "1", sets: list[str] | None = None,
         overwrite: bool = False, resume: bool = False, predict: str | None = None,
         device: str = "auto", progress: bool = True,
         dist_timeout: float = DEFAULT_TIMEOUT_S, **reading: Any) -> dict[str, Any] | None:
    """`electra finetune`: the task, the model to start from, the settings, then one
    fine-tune per seed in this command's runtime. ``reading``: what the task families read
    beside their files (``text_columns``, ``label_column``, ``regression``, ``tag_column``:
    ``electra.tasks.registry.load_task``)."""
    bound_kernel_cache()
    data, train, dev = (local_paths(v, flag) for v, flag in (
        (data, "--data"), (train, "--train"), (dev, "--dev")))  # URLs: mirrored here
    seed_list = parse_seeds(seeds)
    cfg = load_finetune_config(sets or [])
    check_reachable(parse_log_to(cfg.log_to, "log_to"), "log_to")
    names = [t.strip() for t in task.split(",")]
    check_families(cfg, {n: head_for_task(n) for n in names})  # before any file is read
    check_reading(names, reading)
    if len(names) > 1:
        tasks = load_tasks(names, data, train, dev, predict=predict, **reading)
    else:
        one = load_task(task, data=data, train=train, dev=dev, predict=predict, **reading)
        tasks = {one.name: one}
    source = model_source(model, random_init, tokenizer)
    inputs = [("--model", model), ("--random-init", random_init), ("--tokenizer", tokenizer),
              *[(flag, p) for flag, value in (("--data", data), ("--train", train),
                                              ("--dev", dev)) if value
                for p in (value.split(",") if len(names) > 1 else [value]) if p]]
    with start(device, dist_timeout) as rt:
        return run_finetune(source, tasks, out, cfg, seed_list, rt, overwrite=overwrite,
                            resume=resume, progress=progress, inputs=inputs)


def load_tasks(names: list[str], data: str | None, train: str | None, dev: str | None,
               **reading: Any) -> dict[str, TaskData]:
    """``--task a,b,c``: each task's data, ``--data``/``--train``/``--dev`` given as
    comma-separated lists in the tasks' order (an empty entry where a task reads none)."""
    if any(not n for n in names):
        raise UserError(f"--task {','.join(names)}: an empty task name; give names separated "
                        f"by commas, e.g. --task rte,mrpc")
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise UserError(f"--task: {', '.join(twice)} is given twice; name each task once")

    def per_task(flag: str, value: str | None) -> list[str | None]:
        if value is None:
            return [None] * len(names)
        parts = value.split(",")
        if len(parts) != len(names):
            raise UserError(f"{flag} has {len(parts)} entr{'y' if len(parts) == 1 else 'ies'} "
                            f"for {len(names)} tasks; give one "
                            f"per task, in --task's order, empty where a task reads none "
                            f"(e.g. {flag} {','.join(['X'] + [''] * (len(names) - 1))})")
        return [p or None for p in parts]

    datas, trains, devs = (per_task(f, v) for f, v in (("--data", data), ("--train", train),
                                                        ("--dev", dev)))
    loaded = [load_task(n, data=datas[i], train=trains[i], dev=devs[i], **reading)
              for i, n in enumerate(names)]
    same = sorted({d.name for d in loaded if [e.name for e in loaded].count(d.name) > 1})
    if same:
        raise UserError(f"--task {','.join(names)}: {', '.join(same)} is given twice (under "
                        f"two names); name each task once")
    return {d.name: d for d in loaded}


def evaluate(model: str, task: str, data: str | None = None, dev: str | None = None,
             split: str = "dev", text_columns: str | None = None, precision: str | None = None,
             pooling: str | None = None, device: str = "auto", progress: bool = True,
             first_stage: str | None = None, top_k: int | None = None,
             fusion: str | None = None,
             layer: LayerSpec | None = None, generator: bool = False,
             truncate_dim: int | None = None, **reading: Any) -> dict[str, Any]:
    """`electra evaluate`: reload a fine-tuned model and score a task's dev split(s); a
    collapsed model (nearly one class) is flagged as fine-tuning flags it. The text columns
    are the model's own (saved when it was fine-tuned) unless --text-columns names others;
    ``precision`` runs the model at another precision than the fine-tune's. An evaluation of
    embeddings (``electra.evaluation``: ``sts``, ``retrieval``) scores any model's
    embeddings (``pooling``; fp32 unless ``precision``) instead. ``device``: where the model
    runs (auto: CUDA when present)."""
    resolve_device(device)  # before any file is read
    bound_kernel_cache()
    scored_alone = dev is not None and data is None and head_for_task(task).name == task
    if task in EVALUATORS and not scored_alone:  # (rerank --dev: the reranker alone)
        if pooling is not None and pooling not in POOLINGS:  # before any file is read
            raise UserError(f"pooling={pooling!r}: choose one of {', '.join(POOLINGS)}")
        ev = evaluator(task, data=data, dev=dev, split=split, text_columns=text_columns,
                       label_column=reading.get("label_column"), first_stage=first_stage,
                       top_k=top_k, fusion=fusion, layer=layer, generator=generator or None,
                       truncate_dim=truncate_dim)
        res = ev.printed(ev(model, pooling, precision=precision or "fp32", device=device,
                            progress=progress))
        print(json.dumps(res))
        return res
    for flag, value, who in (("--first-stage", first_stage, "rerank with --data"),
                             ("--top-k", top_k, "rerank with --data"),
                             ("--fusion", fusion, "rerank with --data"),
                             ("--layer", layer, "sts, retrieval"),
                             ("--generator", generator or None, "sts, retrieval"),
                             ("--truncate-dim", truncate_dim, "sts, retrieval")):
        if value is not None:
            raise UserError(f"{flag}: --task {task} does not read it (--task {who} "
                            f"do{'es' if ',' not in who else ''}); drop it")
    check_reading([task], reading)
    data, dev = local_paths(data, "--data"), local_paths(dev, "--dev")
    classifier, meta = load_classifier(model)
    classifier = placed(classifier, device)
    if meta["task"] not in head_for_task(task).trained_on(task):
        raise UserError(f"--model {model} was fine-tuned on {meta['task']}, not {task}")
    columns = text_columns or ",".join(meta.get("text_columns") or ["text"])
    task_data = load_task(task, data=data, dev=dev, split=split, text_columns=columns,
                          **reading)
    cfg = finetune_config(meta["finetune"], f"{model}/config.json")
    if precision is not None:
        cfg = dataclasses.replace(cfg, precision=precision)
    task_data = head_of(meta).for_model(task_data, meta, cfg, model)
    with reporting(None, f"evaluate: {task}", "input", progress):
        preds = dev_predictions(classifier, load_tokenizer(model), task_data, cfg)
    res = scores(task_data, preds)
    for split_name, (p, y) in preds.items():
        for warning in task_data.head.report(split_name, p, y, task_data)[0]:
            print(f"electra: warning: {warning}", file=sys.stderr)
    print(json.dumps(res))
    return res


# -- the whole command: seeds, resume, results ----------------------------------------


def resolve(source: ModelSource, tasks: dict[str, TaskData], cfg: FinetuneConfig,
            world_size: int) -> tuple[FinetuneConfig, dict[str, FinetuneConfig]]:
    """The run's settings and each task's. One task: the paper's defaults for the model and
    the task (RTE's 10 epochs, SQuAD's 512 tokens). Several: the model's defaults (3 epochs
    unless set), each task with its own length. Each task's family settings whole, its own
    alone; a family setting no task reads is refused."""
    check_families(cfg, {t: d.head for t, d in tasks.items()})
    if len(tasks) == 1:
        ((name, data),) = tasks.items()
        whole = cfg.resolved(source.config, data.head.task_defaults(name), data.head.Settings)
        check_split(whole, world_size)
        return whole, {name: whole}
    whole = cfg.resolved(source.config)
    check_split(whole, world_size)
    return whole, {t: dataclasses.replace(whole, **{k: getattr(cfg.resolved(
        source.config, d.head.task_defaults(t), d.head.Settings), k) for k in (
            "max_length", "family")}) for t, d in tasks.items()}


def run_finetune(source: ModelSource, data: TaskData | dict[str, TaskData], out: str | Path,
                 cfg: FinetuneConfig, seeds: list[int], rt: Runtime | None = None,
                 overwrite: bool = False, resume: bool = False, progress: bool = False,
                 inputs: list[tuple[str, Any]] | None = None) -> dict[str, Any] | None:
    """Fine-tune once per seed on one task, or on several at once (a dict of tasks); write
    each seed's models, results.json and results.md.

    Under torchrun the processes share each batch (DDP) and rank 0 evaluates and writes;
    it returns the results there and None elsewhere. ``inputs``: (flag, path) of every file
    read, which the output may not overwrite (the model's folders are added).
    """
    rt = rt or Runtime()
    tasks = data if isinstance(data, dict) else {data.name: data}
    check_compile(cfg.compile, rt.device, "compile")
    out = Path(out)
    inputs = [*(inputs or []), ("--model", source.init), ("--tokenizer", source.tokenizer)]
    with claim_out(out, "finetune", "finetune", overwrite=overwrite, resume=resume,
                   inputs=inputs, rt=rt) as claim:
        return _finetune(source, tasks, out, cfg, seeds, rt, claim, resume, progress)


def _finetune(source: ModelSource, tasks: dict[str, TaskData], out: Path, cfg: FinetuneConfig,
              seeds: list[int], rt: Runtime, claim: Claim, resume: bool,
              progress: bool) -> dict[str, Any] | None:
    def check() -> tuple[FinetuneConfig, dict[str, FinetuneConfig], dict[str, TaskData], Any]:
        whole, cfgs = resolve(source, tasks, cfg, rt.world_size)
        check_trainable(source.config, tasks, cfgs, whole)
        return (whole, cfgs, {t: d.head.prepare(d, cfgs[t]) for t, d in tasks.items()},
                load_tokenizer(source.tokenizer))

    run = _Run(*rt.agree(check, "checking the fine-tuning inputs"), source.name, source.init)
    opening(run.tasks, run.cfg, source.name, source.line(run.tasks), seeds, rt, progress)
    tmp, done, ckpt = rt.on_main(lambda: begin(out, run.settings(seeds), claim, resume, seeds),
                                 "preparing the output folder")
    with disk_errors(tmp, f"free disk space and rerun the same command with --resume ({tmp} "
                     f"holds what is done)"):
        results = _run_seeds(source, run, seeds, rt, tmp, done, ckpt, progress)
    if results is None:
        rt.barrier()
        return None
    (tmp / "finetune.json").unlink()
    publish(tmp, out)
    rt.barrier()
    return results


@dataclass
class _Run:
    """A fine-tune's resolved settings and tasks, and where its files go: one task's model
    in ``seed-S/`` with its scores at the top of result.json and results.json (the layout
    single-task fine-tunes always had), several tasks' in ``seed-S/TASK/`` under their
    names."""

    cfg: FinetuneConfig
    cfgs: dict[str, FinetuneConfig]
    tasks: dict[str, TaskData]
    tok: Tokenizer
    model: str
    home: Path | None = None  # the model's folder (a hub id's in the cache): its card's lineage

    @property
    def single(self) -> bool:
        return len(self.tasks) == 1

    def settings(self, seeds: list[int]) -> dict[str, Any]:
        """What an interrupted run must match to be resumed (``finetune.json``)."""
        if self.single:
            (d,) = self.tasks.values()
            return {"task": d.name, "model": self.model, "config": self.cfg.to_dict(),
                    "labels": d.labels, "seeds": seeds}
        return {"tasks": list(self.tasks), "model": self.model, "config": self.cfg.to_dict(),
                "labels": {t: d.labels for t, d in self.tasks.items()}, "seeds": seeds}

    def folder(self, seed_folder: Path, task: str) -> Path:
        return seed_folder if self.single else seed_folder / task

    def record(self, seed: int, per_task: dict[str, Any], seconds: float) -> dict[str, Any]:
        """A finished seed's result.json."""
        if self.single:
            (only,) = per_task.values()
            return {"seed": seed, **only, "seconds": round(seconds, 1)}
        return {"seed": seed, "tasks": per_task, "seconds": round(seconds, 1)}

    def per_task(self, record: dict[str, Any]) -> dict[str, Any]:
        """A result.json's scores and report by task."""
        if self.single:
            return {next(iter(self.tasks)): {k: v for k, v in record.items() if k != "seed"}}
        return record["tasks"]

    def summary(self, record: dict[str, Any]) -> Any:
        per_task = {t: r["dev"] for t, r in self.per_task(record).items()}
        return next(iter(per_task.values())) if self.single else per_task

    def warnings(self, per_task: dict[str, Any]) -> list[str]:
        """Each task's warnings ("TASK: ..." when there are several); one every task has
        (the shared loss never fell, skipped steps) is said once."""
        said = [r["warnings"] for r in per_task.values()]
        shared = [w for w in said[0] if all(w in ws for ws in said)]
        return shared + [f"{t}: {w}" for t, r in per_task.items() for w in r["warnings"]
                         if w not in shared]


def _run_seeds(source: ModelSource, run: _Run, seeds: list[int], rt: Runtime, tmp: Path,
               done: dict[int, Any], ckpt: Path | None, progress: bool) -> dict[str, Any] | None:
    """Each seed not yet done: fine-tune, evaluate the kept models, write its folder; then the
    results (rank 0; other ranks return None). ``done``: result.json of finished seeds."""
    for seed in seeds:
        if seed in done:
            if rt.is_main:
                print(f"seed {seed}: {json.dumps(run.summary(done[seed]))} (finished before)")
            continue
        t0 = time.perf_counter()
        folder = tmp / f"seed-{seed}"
        models, selections = finetune_tasks(source, run.tok, run.tasks, run.cfgs, run.cfg,
                                            seed, rt, folder, ckpt, progress)
        ckpt = None  # only the first seed to run can have been interrupted
        if rt.is_main:
            done[seed] = _finish_seed(run, models, selections, folder, seed, t0)
    if not rt.is_main:
        return None
    return _write_results(tmp, run, seeds, done)


def _finish_seed(run: _Run, models: dict[str, nn.Module], selections: Selections,
                 folder: Path, seed: int, t0: float) -> dict[str, Any]:
    """A finished seed's model folders, predictions and warnings; ``result.json`` last (it
    marks the seed done for --resume); its checkpoints and kept best weights are removed."""
    per_task = {}
    for t, model in models.items():
        data, sel, cfg = run.tasks[t], selections.of[t], run.cfgs[t]
        preds = kept_predictions(model, sel, run.tok, data, cfg)
        per_task[t] = {"dev": scores(data, preds), **report(data, preds, sel)}
        card = classifier_card(model, data, cfg, run.model, per_task[t]["dev"], seed,
                               per_task[t]["warnings"], run.home)
        save_classifier(model.cpu(), run.folder(folder, t), data, cfg, run.tok, card)
        data.head.write_test(model, run.tok, data, cfg, run.folder(folder, t) / "predictions")
    shutil.rmtree(folder / "checkpoints", ignore_errors=True)
    for sel in selections.of.values():
        (folder / sel.file).unlink(missing_ok=True)
    seconds = time.perf_counter() - t0
    record = run.record(seed, per_task, seconds)
    write_json(folder / "result.json", record)
    only = next(iter(per_task.values()))
    kept = (f", the {only['select']} evaluation: epoch {only['epoch']:g}"
            if run.single and only["epoch"] is not None else "")
    print(f"seed {seed}: {json.dumps(run.summary(record))} ({seconds:.0f}s{kept})", flush=True)
    for warning in run.warnings(per_task):
        print(f"electra: warning: seed {seed}: {warning}", file=sys.stderr, flush=True)
    return record


def _write_results(tmp: Path, run: _Run, seeds: list[int],
                   done: dict[int, Any]) -> dict[str, Any]:
    """results.json (every seed, the medians, each seed's details) and results.md (the table,
    seeds with warnings marked, the warnings, the kept models, the confusion matrices);
    prints the table."""
    tasks = {s: run.per_task(done[s]) for s in seeds}
    per_seed = {s: {t: tasks[s][t]["dev"] for t in run.tasks} for s in seeds}
    median = {t: {split: {m: statistics.median(per_seed[s][t][split][m] for s in seeds)
                          for m in d.metrics} for split in d.dev} for t, d in run.tasks.items()}
    details = {s: {t: {k: v for k, v in tasks[s][t].items() if k != "dev"} for t in run.tasks}
               for s in seeds}
    if run.single:
        (t,) = run.tasks
        results = {"task": t, "model": run.model, "config": run.cfg.to_dict(),
                   "seeds": {s: per_seed[s][t] for s in seeds}, "median": median[t],
                   "details": {s: details[s][t] for s in seeds}}
    else:
        results = {"tasks": list(run.tasks), "model": run.model, "config": run.cfg.to_dict(),
                   "seeds": per_seed, "median": median, "details": details}
    write_json(tmp / "results.json", results)
    table, parts = _results_md(run, seeds, per_seed, median, details)
    (tmp / "results.md").write_text("\n".join(parts) + "\n")
    print(table)
    return results


def _results_md(run: _Run, seeds: list[int], per_seed: dict[int, Any], median: dict[str, Any],
                details: dict[int, Any]) -> tuple[str, list[str]]:
    """results.md's table (a task column when there are several) and its sections."""
    notes = {s: run.warnings(details[s]) for s in seeds}
    head = " | ".join(f"seed {s}{' (!)' if notes[s] else ''}" for s in seeds)
    task_col = "" if run.single else "task | "
    lines = [f"| {task_col}split | metric | {head} | median |",
             f"|---|---|{'---|' * (len(seeds) + (not run.single))}---|"]
    for t, d in run.tasks.items():
        for split in d.dev:
            for m in d.metrics:
                vals = " | ".join(f"{per_seed[s][t][split][m]:.4f}" for s in seeds)
                task = "" if run.single else f"{t} | "
                lines.append(f"| {task}{split} | {m} | {vals} | {median[t][split][m]:.4f} |")
    table = "\n".join(lines)
    said = [f"- seed {s} (!): {w}" for s in seeds for w in notes[s]]
    name = {t: "" if run.single else f"{t}, " for t in run.tasks}
    kept = [f"- seed {s}: {name[t]}the {r['select']} evaluation, epoch {r['epoch']:g} (step "
            f"{r['step']})" for s in seeds for t, r in details[s].items()
            if r.get("epoch") is not None]
    parts = [table, *(["", "Warnings:", *said] if said else []),
             *(["", "Kept models:", *kept] if kept else [])]
    for s in seeds:
        for t, r in details[s].items():
            for split, c in r.get("confusion", {}).items():
                parts += ["", f"Confusion, seed {s}, {name[t]}{split} (rows: true label, "
                          f"columns: predicted):", "", f"| | {' | '.join(c['labels'])} |",
                          f"|---|{'---|' * len(c['labels'])}"]
                parts += [f"| {label} | {' | '.join(map(str, row))} |"
                          for label, row in zip(c["labels"], c["matrix"], strict=True)]
    return table, parts
