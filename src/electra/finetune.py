"""Fine-tuning and evaluating the discriminator on a sentence (pair) task, on the scaffold.

The paper's recipe as defaults (``electra.config.FinetuneConfig``): AdamW, lr 3e-4 for
small-size and 1e-4 for base-size models, layer-wise learning-rate decay 0.8 (0.9 for
24-layer models; ``electra.train.optim.layerwise_groups``), 10% warmup then linear decay, 3 epochs
(10 for RTE and STS-B), batch 32, max length 128. The scaffold (``electra.train.trainer``) adds
gradient accumulation, fp16 with loss scaling, non-finite handling and checkpoints.

    OUT/seed-S/               model.safetensors, config.json (labels, task), tokenizer files,
                              metrics.jsonl and tb/ (training loss per epoch), result.json
    OUT/seed-S/predictions/   GLUE submission files (with --predict test)
    OUT/results.json, OUT/results.md   per-seed metrics and their medians

Everything is written into ``OUT.partial/`` and renamed to ``OUT`` at the end. An interrupted
run continues with ``--resume``: finished seeds (with their ``result.json``) are kept, the
seed in progress restarts from its last checkpoint (``OUT.partial/seed-S/checkpoints``, at
the end of every epoch or every ``save_every`` steps), bitwise as if never stopped.
"""

from __future__ import annotations

import json
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from torch import nn

from electra.config import (
    DEFAULT_TIMEOUT_S,
    MAX_SEED,
    FinetuneConfig,
    config_from_dict,
    load_finetune_config,
    model_preset,
)
from electra.errors import UserError
from electra.finetuned import (
    begin,
    check_split,
    load_classifier,
    opening,
    report,
    save_classifier,
)
from electra.io import folders
from electra.io.files import disk_errors, publish, read_json, write_json
from electra.io.models import open_model
from electra.io.outputs import Claim, claim_out
from electra.tasks.base import TaskData, head_of
from electra.tasks.registry import head_for_task, load_task
from electra.train.finetuning import (
    ModelSource,
    dev_predictions,
    finetune_one,
    kept_predictions,
    scores,
)
from electra.train.runtime import Runtime, check_compile, start


def model_source(model: str | None = None, random_init: str | None = None,
                 tokenizer: str | None = None) -> ModelSource:
    """``--model RUN`` (a pretraining run, its discriminator/ or a checkpoint, a fine-tuned
    model, or a transformers ElectraForPreTraining folder), or
    ``--random-init PRESET --tokenizer PATH`` / ``--random-init RUN`` (that run's shape)."""
    from electra.io.tokenizer import load_tokenizer

    if random_init:
        if Path(random_init).is_dir():  # a model folder's shape (and tokenizer), fresh weights
            folder = folders.resolve(random_init, "discriminator", "--random-init")
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
    meta = read_json(Path(model) / "config.json", "a model folder's config") if (
        Path(model) / "config.json").is_file() else {}
    part = "classifier" if isinstance(meta, dict) and meta.get("kind") == "classifier" \
        else "discriminator"  # a fine-tuned model, or a run's (a checkpoint's) discriminator
    opened = open_model(model, part)
    module = opened[part]
    return ModelSource(opened.tokenizer, module.config, opened.tokenizer, str(model),  # type: ignore[arg-type]
                       module.encoder.state_dict())  # type: ignore[union-attr]


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
         dev: str | None = None, text_columns: str = "text", label_column: str = "label",
         regression: bool = False, seeds: str = "1", sets: list[str] | None = None,
         overwrite: bool = False, resume: bool = False, predict: str | None = None,
         tag_column: str | None = None, device: str = "auto", progress: bool = True,
         dist_timeout: float = DEFAULT_TIMEOUT_S) -> dict[str, Any] | None:
    """`electra finetune`: the task, the model to start from, the settings, then one
    fine-tune per seed in this command's runtime."""
    seed_list = parse_seeds(seeds)
    cfg = load_finetune_config(sets or [])
    names = [t.strip() for t in task.split(",")]
    if len(names) > 1:
        tasks = load_tasks(names, data, train, dev, text_columns, label_column, regression,
                           predict, tag_column)
    else:
        task_data = load_task(task, data, train, dev, text_columns, label_column, regression,
                              predict, tag_column=tag_column)
    source = model_source(model, random_init, tokenizer)
    inputs = [("--model", model), ("--random-init", random_init), ("--tokenizer", tokenizer),
              *[(flag, p) for flag, value in (("--data", data), ("--train", train),
                                              ("--dev", dev)) if value
                for p in (value.split(",") if len(names) > 1 else [value]) if p]]
    with start(device, dist_timeout) as rt:
        if len(names) > 1:
            from electra.multitask import run_multitask

            return run_multitask(source, tasks, out, cfg, seed_list, rt, overwrite=overwrite,
                                 resume=resume, progress=progress, inputs=inputs)
        return run_finetune(source, task_data, out, cfg, seed_list, rt, overwrite=overwrite,
                            resume=resume, progress=progress, inputs=inputs)


def load_tasks(names: list[str], data: str | None, train: str | None, dev: str | None,
               text_columns: str, label_column: str, regression: bool, predict: str | None,
               tag_column: str | None) -> dict[str, TaskData]:
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
    loaded = [load_task(n, datas[i], trains[i], devs[i], text_columns, label_column,
                        regression, predict, tag_column=tag_column) for i, n in enumerate(names)]
    same = sorted({d.name for d in loaded if [e.name for e in loaded].count(d.name) > 1})
    if same:
        raise UserError(f"--task {','.join(names)}: {', '.join(same)} is given twice (under "
                        f"two names); name each task once")
    return {d.name: d for d in loaded}


def evaluate(model: str, task: str, data: str | None = None, dev: str | None = None,
             text_columns: str | None = None, label_column: str = "label",
             regression: bool = False, split: str = "dev",
             tag_column: str | None = None) -> dict[str, Any]:
    """`electra evaluate`: reload a fine-tuned model and score a task's dev split(s); a
    collapsed model (nearly one class) is flagged as fine-tuning flags it. The text columns
    are the model's own (saved when it was fine-tuned) unless --text-columns names others."""
    from electra.io.tokenizer import load_tokenizer

    classifier, meta = load_classifier(model)
    if meta["task"] not in head_for_task(task).trained_on(task):
        raise UserError(f"--model {model} was fine-tuned on {meta['task']}, not {task}")
    columns = text_columns or ",".join(meta.get("text_columns") or ["text"])
    task_data = load_task(task, data, None, dev, columns, label_column, regression,
                          split=split, tag_column=tag_column)
    cfg = config_from_dict(FinetuneConfig, meta["finetune"], f"{model}/config.json")
    task_data = head_of(meta).for_model(task_data, meta, cfg, model)
    preds = dev_predictions(classifier, load_tokenizer(model), task_data, cfg)
    res = scores(task_data, preds)
    for split_name, (p, y) in preds.items():
        for warning in task_data.head.report(split_name, p, y, task_data)[0]:
            print(f"electra: warning: {warning}", file=sys.stderr)
    print(json.dumps(res))
    return res


# -- the whole command: seeds, resume, results ----------------------------------------


def run_finetune(source: ModelSource, data: TaskData, out: str | Path, cfg: FinetuneConfig,
                 seeds: list[int], rt: Runtime | None = None, overwrite: bool = False,
                 resume: bool = False, progress: bool = False,
                 inputs: list[tuple[str, Any]] | None = None) -> dict[str, Any] | None:
    """Fine-tune once per seed; write per-seed models, results.json and results.md.

    Under torchrun the processes share each batch (DDP) and rank 0 evaluates and writes;
    it returns the results there and None elsewhere. ``inputs``: (flag, path) of every file
    read, which the output may not overwrite (the model's folders are added).
    """
    rt = rt or Runtime()
    check_compile(cfg.compile, rt.device, "compile")
    out = Path(out)
    inputs = [*(inputs or []), ("--model", source.init), ("--tokenizer", source.tokenizer)]
    with claim_out(out, "finetune", "finetune", overwrite=overwrite, resume=resume,
                   inputs=inputs, rt=rt) as claim:
        return _finetune(source, data, out, cfg, seeds, rt, claim, resume, progress)


def _finetune(source: ModelSource, data: TaskData, out: Path, cfg: FinetuneConfig,
              seeds: list[int], rt: Runtime, claim: Claim, resume: bool,
              progress: bool) -> dict[str, Any] | None:
    from electra.io.tokenizer import load_tokenizer

    def check() -> tuple[FinetuneConfig, TaskData, Any]:
        resolved = cfg.resolved(source.config, data.name)
        check_split(resolved, rt.world_size)
        return resolved, data.head.prepare(data, resolved), load_tokenizer(source.tokenizer)

    cfg, data, tok = rt.agree(check, "checking the fine-tuning inputs")
    opening({data.name: data}, cfg, source.name, seeds, rt, progress)
    settings = {"task": data.name, "model": source.name, "config": cfg.to_dict(),
                "labels": data.labels, "seeds": seeds}
    tmp, done, ckpt = rt.on_main(lambda: begin(out, settings, claim, resume, seeds),
                                 "preparing the output folder")
    with disk_errors(tmp, f"free disk space and rerun the same command with --resume ({tmp} "
                     f"holds what is done)"):
        results = _run_seeds(source, data, cfg, seeds, rt, tok, tmp, done, ckpt, progress)
    if results is None:
        rt.barrier()
        return None
    (tmp / "finetune.json").unlink()
    publish(tmp, out)
    rt.barrier()
    return results


def _run_seeds(source: ModelSource, data: TaskData, cfg: FinetuneConfig, seeds: list[int],
               rt: Runtime, tok: Any, tmp: Path, done: dict[int, Any], ckpt: Path | None,
               progress: bool) -> dict[str, Any] | None:
    """Each seed not yet done: fine-tune, evaluate the kept model, write its folder; then the
    results (rank 0; other ranks return None). ``done``: result.json of finished seeds."""
    for seed in seeds:
        if seed in done:
            if rt.is_main:
                print(f"seed {seed}: {json.dumps(done[seed]['dev'])} (finished before)")
            continue
        t0 = time.perf_counter()
        folder = tmp / f"seed-{seed}"
        model, selection = finetune_one(source, tok, data, cfg, seed, rt, folder, ckpt,
                                        progress)
        ckpt = None  # only the first seed to run can have been interrupted
        if rt.is_main:
            preds = kept_predictions(model, selection, tok, data, cfg)
            done[seed] = {"seed": seed, "dev": scores(data, preds),
                          **report(data, preds, selection)}
            _finish_seed(model.cpu(), folder, data, cfg, tok, done[seed],
                         time.perf_counter() - t0)
    if not rt.is_main:
        return None
    return _write_results(tmp, data, cfg, seeds, done, source.name)


def _finish_seed(model: nn.Module, folder: Path, data: TaskData, cfg: FinetuneConfig,
                 tok: Any, result: dict[str, Any], seconds: float) -> None:
    """A finished seed's model folder, predictions and warnings; ``result.json`` last (it
    marks the seed done for --resume); its checkpoints and kept best weights are removed."""
    save_classifier(model, folder, data, cfg, tok)
    data.head.write_test(model, tok, data, cfg, folder / "predictions")
    shutil.rmtree(folder / "checkpoints", ignore_errors=True)
    (folder / "best.safetensors").unlink(missing_ok=True)
    result["seconds"] = round(seconds, 1)
    write_json(folder / "result.json", result)
    kept = (f", the {result['select']} evaluation: epoch {result['epoch']:g}"
            if result["epoch"] is not None else "")
    print(f"seed {result['seed']}: {json.dumps(result['dev'])} ({seconds:.0f}s{kept})",
          flush=True)
    for warning in result["warnings"]:
        print(f"electra: warning: seed {result['seed']}: {warning}", file=sys.stderr,
              flush=True)


def _write_results(tmp: Path, data: TaskData, cfg: FinetuneConfig, seeds: list[int],
                   done: dict[int, Any], model_name: str) -> dict[str, Any]:
    """results.json (every seed, the medians, each seed's details) and results.md (the table,
    seeds with warnings marked, the warnings, the confusion matrices); prints the table."""
    per_seed = {s: done[s]["dev"] for s in seeds}
    details = {s: {k: v for k, v in done[s].items() if k not in ("seed", "dev")}
               for s in seeds}
    median = {split: {m: statistics.median(per_seed[s][split][m] for s in seeds)
                      for m in data.metrics} for split in data.dev}
    results = {"task": data.name, "model": model_name, "config": cfg.to_dict(),
               "seeds": per_seed, "median": median, "details": details}
    write_json(tmp / "results.json", results)
    flagged = [s for s in seeds if details[s].get("warnings")]
    head = " | ".join(f"seed {s}{' (!)' if s in flagged else ''}" for s in seeds)
    lines = [f"| split | metric | {head} | median |", f"|---|---|{'---|' * len(seeds)}---|"]
    for split in data.dev:
        for m in data.metrics:
            vals = " | ".join(f"{per_seed[s][split][m]:.4f}" for s in seeds)
            lines.append(f"| {split} | {m} | {vals} | {median[split][m]:.4f} |")
    table = "\n".join(lines)
    notes = [f"- seed {s} (!): {w}" for s in flagged for w in details[s]["warnings"]]
    kept = [f"- seed {s}: the {details[s]['select']} evaluation, epoch "
            f"{details[s]['epoch']:g} (step {details[s]['step']})" for s in seeds
            if details[s].get("epoch") is not None]
    parts = [table, *(["", "Warnings:", *notes] if notes else []),
             *(["", "Kept models:", *kept] if kept else [])]
    for s in seeds:
        for split, c in details[s].get("confusion", {}).items():
            parts += ["", f"Confusion, seed {s}, {split} (rows: true label, columns: "
                      f"predicted):", "", f"| | {' | '.join(c['labels'])} |",
                      f"|---|{'---|' * len(c['labels'])}"]
            parts += [f"| {label} | {' | '.join(map(str, row))} |"
                      for label, row in zip(c["labels"], c["matrix"], strict=True)]
    (tmp / "results.md").write_text("\n".join(parts) + "\n")
    print(table)
    return results
