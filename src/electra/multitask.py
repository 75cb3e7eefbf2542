"""`electra finetune --task a,b,c`: several tasks on one encoder (``electra.train.multitask``),
once per seed, with the single-task command's output contract.

    OUT/seed-S/TASK/    each task's model (the encoder + its head): a fine-tuned model
                        folder that `evaluate`, `predict`, `export` and `--model` take
    OUT/seed-S/         metrics.jsonl and tb/ (the loss and every task's dev scores per epoch),
                        result.json
    OUT/results.json, OUT/results.md   per task and seed, and the medians

Written into ``OUT.partial/`` and renamed at the end; ``--resume`` continues the seed in
progress from its last checkpoint, bitwise. Continuing a task alone from the shared encoder
(MT-DNN's recipe) is ``electra finetune --model OUT/seed-S/TASK --task TASK``.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from electra.config import FinetuneConfig
from electra.finetuned import begin, check_split, opening, report, save_classifier
from electra.io.files import disk_errors, publish, write_json
from electra.io.outputs import claim_out
from electra.tasks.base import TaskData
from electra.train.finetuning import ModelSource, kept_predictions, scores
from electra.train.multitask import finetune_multi
from electra.train.runtime import Runtime, check_compile


def resolve(source: ModelSource, tasks: dict[str, TaskData], cfg: FinetuneConfig,
            world_size: int) -> tuple[FinetuneConfig, dict[str, FinetuneConfig]]:
    """The run's settings (the paper's defaults for the model; 3 epochs unless set) and each
    task's: the same, with the task's own length (SQuAD's 512) and its checks."""
    whole = cfg.resolved(source.config, "multitask")
    check_split(whole, world_size)
    return whole, {t: dataclasses.replace(whole, max_length=cfg.resolved(
        source.config, t).max_length) for t in tasks}


def run_multitask(source: ModelSource, tasks: dict[str, TaskData], out: str | Path,
                  cfg: FinetuneConfig, seeds: list[int], rt: Runtime, overwrite: bool = False,
                  resume: bool = False, progress: bool = False,
                  inputs: list[tuple[str, Any]] | None = None) -> dict[str, Any] | None:
    """Fine-tune the tasks together once per seed; rank 0 writes and returns the results."""
    from electra.io.tokenizer import load_tokenizer

    check_compile(cfg.compile, rt.device, "compile")
    out = Path(out)
    inputs = [*(inputs or []), ("--model", source.init), ("--tokenizer", source.tokenizer)]
    with claim_out(out, "finetune", "finetune", overwrite=overwrite, resume=resume,
                   inputs=inputs, rt=rt) as claim:
        def check() -> tuple[FinetuneConfig, dict[str, FinetuneConfig], dict[str, TaskData],
                             Any]:
            whole, cfgs = resolve(source, tasks, cfg, rt.world_size)
            return (whole, cfgs, {t: d.head.prepare(d, cfgs[t]) for t, d in tasks.items()},
                    load_tokenizer(source.tokenizer))

        whole, cfgs, data, tok = rt.agree(check, "checking the fine-tuning inputs")
        settings = {"tasks": list(data), "model": source.name, "config": whole.to_dict(),
                    "labels": {t: d.labels for t, d in data.items()}, "seeds": seeds}

        tmp, done, ckpt = rt.on_main(lambda: begin(out, settings, claim, resume, seeds),
                                     "preparing the output folder")
        opening(data, whole, source.name, seeds, rt, progress)
        with disk_errors(tmp, f"free disk space and rerun the same command with --resume "
                         f"({tmp} holds what is done)"):
            for seed in seeds:
                if seed in done:
                    if rt.is_main:
                        print(f"seed {seed}: finished before")
                    continue
                t0 = time.perf_counter()
                folder = tmp / f"seed-{seed}"
                models, selections, skips = finetune_multi(source, tok, data, cfgs, whole, seed,
                                                           rt, folder, ckpt, progress)
                ckpt = None
                if rt.is_main:
                    done[seed] = _finish_seed(models, selections, skips, folder, data, cfgs,
                                              tok, seed, time.perf_counter() - t0)
        if not rt.is_main:
            rt.barrier()
            return None
        results = _write_results(tmp, data, whole, seeds, done, source.name)
        (tmp / "finetune.json").unlink()
        publish(tmp, out)
        rt.barrier()
        return results


def _finish_seed(models: dict[str, Any], selections: Any, skips: int, folder: Path,
                 data: dict[str, TaskData], cfgs: dict[str, FinetuneConfig], tok: Any,
                 seed: int, seconds: float) -> dict[str, Any]:
    """Each task's model folder (and submission files), then ``result.json`` (the seed is
    done); the checkpoints and kept best weights are removed."""
    result: dict[str, Any] = {"seed": seed, "tasks": {}}
    for t, model in models.items():
        d, sel = data[t], selections.of[t]
        sel.skips = skips
        preds = kept_predictions(model, sel, tok, d, cfgs[t])
        result["tasks"][t] = {"dev": scores(d, preds),
                              **report(d, preds, sel)}
        save_classifier(model.cpu(), folder / t, d, cfgs[t], tok)
        d.head.write_test(model, tok, d, cfgs[t], folder / t / "predictions")
    shutil.rmtree(folder / "checkpoints", ignore_errors=True)
    for t in models:
        (folder / selections.of[t].file).unlink(missing_ok=True)
    result["seconds"] = round(seconds, 1)
    write_json(folder / "result.json", result)
    print(f"seed {seed}: " + json.dumps({t: r["dev"] for t, r in result["tasks"].items()})
          + f" ({seconds:.0f}s)", flush=True)
    for warning in _warnings(result["tasks"]):
        print(f"electra: warning: seed {seed}, {warning}", file=sys.stderr, flush=True)
    return result


def _warnings(tasks: dict[str, Any]) -> list[str]:
    """Each task's warnings as "TASK: ..."; one every task has (the shared loss never fell,
    skipped steps) is said once."""
    said = [r["warnings"] for r in tasks.values()]
    shared = [w for w in said[0] if all(w in ws for ws in said)]
    return shared + [f"{t}: {w}" for t, r in tasks.items() for w in r["warnings"]
                     if w not in shared]


def _write_results(tmp: Path, data: dict[str, TaskData], cfg: FinetuneConfig,
                   seeds: list[int], done: dict[int, Any], model_name: str) -> dict[str, Any]:
    """results.json (per seed and task, the medians, each seed's details) and results.md."""
    per_seed = {s: {t: done[s]["tasks"][t]["dev"] for t in data} for s in seeds}
    median = {t: {split: {m: statistics.median(per_seed[s][t][split][m] for s in seeds)
                          for m in d.metrics} for split in d.dev} for t, d in data.items()}
    details = {s: {t: {k: v for k, v in done[s]["tasks"][t].items() if k != "dev"}
                   for t in data} for s in seeds}
    results = {"tasks": list(data), "model": model_name, "config": cfg.to_dict(),
               "seeds": per_seed, "median": median, "details": details}
    write_json(tmp / "results.json", results)
    lines = [f"| task | split | metric | {' | '.join(f'seed {s}' for s in seeds)} | median |",
             f"|---|---|---|{'---|' * len(seeds)}---|"]
    for t, d in data.items():
        for split in d.dev:
            for m in d.metrics:
                vals = " | ".join(f"{per_seed[s][t][split][m]:.4f}" for s in seeds)
                lines.append(f"| {t} | {split} | {m} | {vals} | {median[t][split][m]:.4f} |")
    notes = [f"- seed {s}, {w}" for s in seeds for w in _warnings(details[s])]
    table = "\n".join(lines)
    (tmp / "results.md").write_text(
        "\n".join([table, *(["", "Warnings:", *notes] if notes else [])]) + "\n")
    print(table)
    return results
