"""What a fine-tune leaves: its staging folder (``OUT.partial``, resumable), a seed's
report, and the fine-tuned model folders `evaluate`, `predict` and `export` read; read by
`electra finetune` (``electra.commands.finetune``) and `evaluate`."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from torch import nn

from electra import __version__
from electra.config import FinetuneConfig, config_diffs
from electra.errors import UserError
from electra.io.checkpoint import latest_checkpoint
from electra.io.files import read_json, staging_dir, write_json
from electra.io.outputs import Claim
from electra.model import count_parameters
from electra.runtime import Runtime, resolve_precision, use_threads
from electra.saved import cards, folders
from electra.tasks.base import TaskData, examples_used

if TYPE_CHECKING:
    from tokenizers import Tokenizer  # (the types only: the readers stay light)


def report(data: TaskData, preds: dict[str, tuple[np.ndarray, np.ndarray]],
           selection: Any) -> dict[str, Any]:
    """What a seed's run looked like (``selection``: its
    ``electra.train.finetuning.Selection``): the kept evaluation, every evaluation, a confusion
    matrix per dev split (classes, tags), and warnings for a degenerate run: every
    prediction in one class, near-constant regression outputs, a training loss that never
    fell below its first epoch's, skipped non-finite steps."""
    warnings, confusion = [], {}
    for split, (p, y) in preds.items():
        said, matrix = data.head.report(split, p, y, data)
        warnings += said
        if matrix is not None:
            confusion[split] = matrix
    epochs = [e["loss"] for e in selection.history if float(e["epoch"]).is_integer()]
    if len(epochs) >= 2 and min(epochs[1:]) >= epochs[0]:
        warnings.append(f"the training loss never fell below its first epoch's "
                        f"({epochs[0]:.4g}; later {', '.join(f'{x:.4g}' for x in epochs[1:])})")
    if selection.skips:
        warnings.append(f"{selection.skips} step(s) had a non-finite loss and were skipped")
    kept = selection.kept or {}
    return {"select": selection.mode, "epoch": kept.get("epoch"), "step": kept.get("step"),
            "evaluations": selection.history, "confusion": confusion, "warnings": warnings}


def staging(out: Path, settings: dict[str, Any], claim: Claim, resume: bool) -> Path:
    """``OUT.partial``: a fresh one, or (``resume``) the interrupted one if its settings are
    these. Rank 0 only; ``claim`` checked ``out`` and holds its lock."""
    tmp = out.with_name(out.name + ".partial")
    settings = {**settings, "model_real": _real(settings["model"])}
    if resume and (tmp / "finetune.json").is_file():
        saved = read_json(tmp / "finetune.json", "an interrupted fine-tune's settings")
        free = {"seeds", "config.threads", "config.license", "model_real"}
        if saved.get("model_real") == settings["model_real"]:
            free.add("model")  # the same folder, named another way (run0, ./run0, /abs/run0)
        diffs = config_diffs(saved, settings, free)
        kinds = [("one task" if "task" in d else "several tasks" if "tasks" in d else "?")
                 for d in (saved, settings)]
        if kinds[0] != kinds[1]:  # a single-task fine-tune and a multi-task one
            diffs.insert(0, f"it fine-tunes {kinds[0]}, this command {kinds[1]}")
        if diffs:
            raise UserError(f"--resume: {tmp} was started with other settings "
                            f"({'; '.join(diffs[:3])}); resume with the same settings or "
                            f"start again with --overwrite")
        write_json(tmp / "finetune.json", settings)
        return tmp
    if resume and (out / "results.json").is_file():
        raise UserError(f"--resume: {out} is already complete (results.json) and nothing was "
                        f"interrupted; pass --overwrite to fine-tune again")
    tmp = staging_dir(out)
    claim.mark(tmp)
    write_json(tmp / "finetune.json", settings)
    return tmp


def _real(model: str) -> str:
    """The model's folder as a resolved real path (how --resume compares it); the name
    itself where it is no path (random-init)."""
    import os

    return os.path.realpath(model) if Path(model).exists() else model


def save_classifier(model: nn.Module, folder: Path, data: TaskData, cfg: FinetuneConfig,
                    tok: Tokenizer, card: dict[str, Any] | None = None) -> None:
    """A fine-tuned model's folder: what `evaluate`, `export` and `--model` read; ``card``:
    its model card's facts (:func:`classifier_card`)."""
    folders.write_classifier(folder, model, tok, task=data.name,
                  labels=data.labels, regression=data.regression, metrics=list(data.metrics),
                  finetune=cfg.to_dict(), text_columns=list(data.columns),
                  **data.head.meta(data), **({"card": card} if card else {}))


def classifier_card(model: nn.Module, data: TaskData, cfg: FinetuneConfig, source: str,
                    dev: dict[str, dict[str, float]], seed: int,
                    warnings: Sequence[str] = (), home: Path | None = None) -> dict[str, Any]:
    """A fine-tuned model's card (electra.saved.cards): the model it started from, the
    recipe (the examples it drew), its seed's dev scores as results.json has them, and the
    warnings the run printed for it (one class predicted, a loss that never fell).
    ``home``: the model's folder where ``source`` names it otherwise (a hub id): its
    lineage (base model, license) is read there."""
    head, hub = data.head, data.head.hub_datasets.get(data.name)
    named = Path(source).name if Path(source).exists() else source  # no local paths
    rows = [("from", named),
            ("model", cards.size_line(model.config, count_parameters(model))),  # type: ignore[arg-type]
            ("task", f"{data.name}: {examples_used(data, cfg)}"),
            ("recipe", f"{cfg.epochs} epoch(s) of {cfg.batch_size} examples, {cfg.optimizer}, "
                       f"peak rate {cfg.lr:g}, layer-wise decay {cfg.layer_decay:g}, "
                       f"{cfg.max_length} tokens, seed {seed}"),
            ("software", f"electra {__version__}")]
    results = [cards.result(data.name, f"{hub[0]} {hub[1]}" if hub else data.name, metric,
                            value, task_type=head.pipeline_tag or head.name, split=split,
                            hub=hub, seed=seed)
               for split, scores in dev.items() for metric, value in scores.items()]
    card = {"title": f"{data.name} classifier fine-tuned with electra",
            "what": f"An encoder fine-tuned on {data.name} by `electra finetune` (the "
                    f"{head.name} head), from {named}.",
            "trained": rows, "command": cards.command_line(), "results": results,
            "warnings": list(warnings),
            "tags": [model.config.body, data.name]}  # type: ignore[union-attr]
    return cards.with_lineage(card, cards.source_lineage(home or source), cfg.license)


def load_classifier(folder: str | Path) -> tuple[nn.Module, dict[str, Any]]:
    """A fine-tuned model and its config.json (task, labels, settings)."""
    return folders.load_classifier(folder)


def check_split(cfg: FinetuneConfig, world_size: int) -> None:
    """The batch splits into equal micro-batches over the processes and accumulation."""
    split = world_size * cfg.grad_accum
    if cfg.batch_size % split:
        raise UserError(f"--set batch_size={cfg.batch_size} does not split into {world_size} "
                        f"processes x grad_accum={cfg.grad_accum} equal micro-batches; "
                        f"choose a multiple of {split}")


def begin(out: Path, settings: dict[str, Any], claim: Claim, resume: bool,
          seeds: list[int]) -> tuple[Path, dict[int, Any], Path | None]:
    """The staging folder (fresh, or the interrupted one), the finished seeds' result.json,
    and the last checkpoint of the first seed still to run (rank 0)."""
    tmp = staging(out, settings, claim, resume)
    done = {s: read_json(tmp / f"seed-{s}/result.json") for s in seeds
            if (tmp / f"seed-{s}/result.json").is_file()}
    todo = [s for s in seeds if s not in done]
    return tmp, done, latest_checkpoint(tmp / f"seed-{todo[0]}/checkpoints") if todo else None


def opening(tasks: dict[str, TaskData], cfg: FinetuneConfig, source: str, loaded: str,
            seeds: list[int], rt: Runtime, progress: bool) -> None:
    """A fine-tune's first lines (rank 0, unless --quiet): each task's training and dev
    examples, the model it starts from, the recipe, precision and device; what it loaded and
    what it builds fresh (``loaded``: ``ModelSource.line``); and the note of
    :func:`electra.runtime.use_threads` (every rank applies ``cfg.threads``)."""
    busy = use_threads(cfg.threads, "threads", rt.device)
    if busy and rt.is_main:  # a note, even under --quiet: why the run is slower
        print(busy, file=sys.stderr, flush=True)
    if not (progress and rt.is_main):
        return
    what = "; ".join(f"{name}: {examples_used(d, cfg)}, "
                     f"{sum(len(v) for v in d.dev.values()):,} dev" for name, d in tasks.items())
    mixed = (f", tasks drawn by size^{cfg.task_sampling_alpha:g}" if len(tasks) > 1 else "")
    probe = ", encoder frozen (a probe)" if cfg.freeze == "encoder" else ""
    epochs = f"{cfg.epochs} epoch{'s' if cfg.epochs != 1 else ''}"
    print(f"electra: fine-tuning {what}; from {source}; {epochs}, batch "
          f"{cfg.batch_size}, lr {cfg.lr:g}{mixed}{probe}, "
          f"{resolve_precision(rt.device, cfg.precision)}, {rt.device.type}, seeds "
          f"{','.join(map(str, seeds))}", flush=True)
    print(f"electra: {loaded}", flush=True)
