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
import math
import shutil
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from electra.config import (
    DEFAULT_TIMEOUT_S,
    MAX_SEED,
    FinetuneConfig,
    ModelConfig,
    config_diffs,
    config_from_dict,
    load_finetune_config,
    model_preset,
)
from electra.errors import UserError
from electra.io import folders
from electra.io.files import disk_errors, publish, read_json, staging_dir, write_json
from electra.io.outputs import Claim, claim_out
from electra.model import Encoder
from electra.tasks.base import TaskData, head_of
from electra.tasks.registry import load_task
from electra.train.checkpoint import latest_checkpoint
from electra.train.optim import layerwise_groups
from electra.train.runtime import Runtime, start
from electra.train.trainer import RandomStreams, Settings, Trainer


@dataclass(frozen=True)
class ModelSource:
    """What a fine-tune starts from: a discriminator's encoder, or random weights."""

    init: Path | None  # the folder whose encoder weights are loaded; None: random init
    config: ModelConfig
    tokenizer: Path
    name: str  # for results.json: the --model given, or "random-init"
    encoder: dict[str, Any] | None = None  # the encoder's weights (read and checked once)


def model_source(model: str | None = None, random_init: str | None = None,
                 tokenizer: str | None = None) -> ModelSource:
    """``--model RUN`` (a pretraining run, its discriminator/, or a fine-tuned model), or
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
    folder = folders.resolve(model, "discriminator")
    kind = read_json(folder / "config.json", "a model folder's config").get("kind")
    cfg, _ = folders.read_config(folder, "classifier" if kind == "classifier"
                                 else "discriminator")
    weights = folders.read_weights(folder / "model.safetensors")
    encoder = {k[len("encoder."):]: v for k, v in weights.items() if k.startswith("encoder.")}
    folders.fit(Encoder(cfg), encoder, folder)  # refused now, not after the output exists
    return ModelSource(folder, cfg, folder, str(model), encoder)


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
    task_data = load_task(task, data, train, dev, text_columns, label_column, regression,
                          predict, tag_column=tag_column)
    source = model_source(model, random_init, tokenizer)
    inputs = [("--model", model), ("--random-init", random_init), ("--tokenizer", tokenizer),
              ("--data", data), ("--train", train), ("--dev", dev)]
    with start(device, dist_timeout) as rt:
        return run_finetune(source, task_data, out, cfg, seed_list, rt, overwrite=overwrite,
                            resume=resume, progress=progress, inputs=inputs)


def evaluate(model: str, task: str, data: str | None = None, dev: str | None = None,
             text_columns: str = "text", label_column: str = "label", regression: bool = False,
             split: str = "dev", tag_column: str | None = None) -> dict[str, Any]:
    """`electra evaluate`: reload a fine-tuned model and score a task's dev split(s)."""
    from electra.io.tokenizer import load_tokenizer

    classifier, meta = load_classifier(model)
    if task != meta["task"]:
        raise UserError(f"--model {model} was fine-tuned on {meta['task']}, not {task}")
    task_data = load_task(task, data, None, dev, text_columns, label_column, regression,
                          split=split, tag_column=tag_column)
    cfg = config_from_dict(FinetuneConfig, meta["finetune"], f"{model}/config.json")
    task_data = head_of(meta).for_model(task_data, meta, cfg, model)
    res = evaluate_model(classifier, load_tokenizer(model), task_data, cfg)
    print(json.dumps(res))
    return res


# -- one fine-tune ----------------------------------------------------------------------


class EpochBatches:
    """The training examples in a new seeded order every epoch, one global batch per step
    (a process takes its rows); resumable mid-epoch."""

    def __init__(self, n: int, batch_size: int, steps_per_epoch: int, seed: int) -> None:
        self.n, self.batch_size, self.steps_per_epoch = n, batch_size, steps_per_epoch
        self.g = torch.Generator().manual_seed(seed)
        self.epoch, self.position = 0, 0
        self._start_epoch()

    def _start_epoch(self) -> None:
        self.order_state = self.g.get_state()  # to redraw this epoch's order on resume
        self.order = torch.randperm(self.n, generator=self.g)

    def next(self) -> torch.Tensor:
        """The next global batch's example indices."""
        if self.position == self.steps_per_epoch:
            self.epoch, self.position = self.epoch + 1, 0
            self._start_epoch()
        first = self.position * self.batch_size
        self.position += 1
        return self.order[first : first + self.batch_size]

    @property
    def epoch_done(self) -> bool:
        return self.position == self.steps_per_epoch

    def state_dict(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "position": self.position, "order_rng": self.order_state}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.g.set_state(state["order_rng"])
        self._start_epoch()
        self.epoch, self.position = int(state["epoch"]), int(state["position"])


def _training_examples(data: TaskData, cfg: FinetuneConfig) -> list[Any]:
    """The training set, or its fixed random subset, plus what the head adds (pairs
    swapped)."""
    examples = list(data.train)
    if 0 < cfg.max_train_examples < len(examples):
        pick = torch.randperm(len(examples), generator=torch.Generator().manual_seed(0))
        examples = [examples[i] for i in sorted(pick[: cfg.max_train_examples].tolist())]
    return data.head.augment(examples, cfg)


class Selection:
    """The dev evaluations of a seed, and which one it keeps: the last (``select=last``, the
    paper's protocol) or the best on the task's first metric (``select=best``; its weights
    are kept in ``folder/best.safetensors`` as it is found). Part of the resumable state."""

    def __init__(self, mode: str, split: str, metric: str, folder: Path | None) -> None:
        self.mode, self.split, self.metric, self.folder = mode, split, metric, folder
        self.history: list[dict[str, Any]] = []  # one per evaluation: step, epoch, loss, dev
        self.kept: dict[str, Any] | None = None
        self.skips = 0  # steps skipped for a non-finite loss (the trainer's count)

    def score(self, entry: dict[str, Any]) -> float:
        value = entry["dev"][self.split][self.metric]
        return value if math.isfinite(value) else -math.inf

    def offer(self, entry: dict[str, Any], model: nn.Module) -> None:
        """An evaluation of ``model``: kept if it is the last, or the best so far."""
        self.history.append(entry)
        if self.mode == "best" and self.kept is not None and (
                self.score(entry) <= self.score(self.kept)):
            return  # the earliest of equal scores stays
        self.kept = entry
        if self.mode == "best" and self.folder is not None:
            from safetensors.torch import save_file

            part = self.folder / "best.safetensors.tmp"
            save_file({k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()},
                      str(part))
            part.replace(self.folder / "best.safetensors")

    def restore(self, model: nn.Module) -> None:
        """Load the kept evaluation's weights into ``model`` (select=best)."""
        if self.mode == "best" and self.folder is not None and self.kept is not None:
            folders.fit(model, folders.read_weights(self.folder / "best.safetensors"),
                        self.folder)

    def state_dict(self) -> dict[str, Any]:
        return {"history": self.history, "kept": self.kept}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.history, self.kept = list(state["history"]), state["kept"]


def finetune_one(source: ModelSource, tok: Any, data: TaskData, cfg: FinetuneConfig,
                 seed: int, rt: Runtime | None = None, folder: Path | None = None,
                 resume: Path | None = None,
                 progress: bool = False) -> tuple[nn.Module, Selection]:
    """Fine-tune one seed from ``source`` (``cfg`` resolved), evaluating on dev at every
    epoch's end (and every ``eval_every`` steps); returns the kept model and the selection.

    Under torchrun each process trains on its rows of every batch (DDP); rank 0 evaluates.
    ``folder``: where the seed's checkpoints and metrics go (None: nowhere); ``resume``: a
    checkpoint of it.
    """
    rt = rt or Runtime()
    cfg = cfg.resolved(source.config, data.name)  # (a no-op on a resolved config)
    torch.manual_seed(seed)
    model = data.head.build(source.config, data.labels, data.regression, rt.kernels)
    if source.encoder is not None:
        folders.fit(model.encoder, source.encoder, source.init)  # type: ignore[arg-type]
    examples = _training_examples(data, cfg)
    train = data.head.encode(tok, examples, data, cfg)
    n = len(train["input_ids"])  # examples, or QA's windows
    steps_per_epoch = max(1, n // cfg.batch_size)
    total = steps_per_epoch * cfg.epochs  # type: ignore[operator]
    batches = EpochBatches(n, cfg.batch_size, steps_per_epoch, seed)
    first = next(iter(data.dev))
    selection = Selection(cfg.select, first, data.metrics[0], folder)
    settings = Settings(lr=cfg.lr, max_steps=total,  # type: ignore[arg-type]
                        warmup_steps=int(cfg.warmup_fraction * total),
                        precision=cfg.precision, grad_accum=cfg.grad_accum,
                        grad_clip=cfg.grad_clip, max_nonfinite_skips=cfg.max_nonfinite_skips,
                        keep_checkpoints=cfg.keep_checkpoints, prefix="")
    trainer = Trainer(
        model, rt, settings,
        lambda m: layerwise_groups(m, cfg.lr, cfg.layer_decay, cfg.weight_decay),  # type: ignore[arg-type]
        out=folder, config={"finetune": cfg.to_dict(), "task": data.name, "seed": seed,
                            "model": source.name},
        streams=RandomStreams(rt, seed),  # dropout: each rank its own stream
        stateful={"batches": batches, "selection": selection}, resume=resume,
        progress=progress)
    per_rank = cfg.batch_size // rt.world_size
    micro = per_rank // cfg.grad_accum

    def log() -> None:  # the training loss so far and the dev scores, one metrics line
        record = {**trainer.metrics(), "epoch": round(
            batches.epoch + batches.position / steps_per_epoch, 4)}
        if rt.is_main:
            dev = evaluate_model(trainer.model, tok, data, cfg)
            record.update({f"{split}_{m}": v for split, res in dev.items()
                           for m, v in res.items()})
            selection.offer({"step": trainer.step, "epoch": record["epoch"],
                             "loss": record["loss"], "dev": dev}, trainer.model)
        trainer.log(record, show=("loss", f"{first}_{data.metrics[0]}"))

    with trainer.running(total=total):
        if trainer.log_due:  # Ctrl-C came while this step's line was being computed
            log()
        while trainer.step < total:
            index = batches.next()
            mine = {k: v[index[rt.rank * per_rank : (rt.rank + 1) * per_rank]]
                    for k, v in train.items()}
            # the loss is a mean over the global batch: its examples, or its tagged words
            denom = data.head.denominator(train["labels"][index], cfg.batch_size)

            def micro_step(step_model: nn.Module, j: int, b: dict[str, torch.Tensor] = mine,
                           denom: int = denom) -> tuple[torch.Tensor, dict]:
                rows = {k: v[j * micro : (j + 1) * micro] for k, v in b.items()}
                keep = int(rows["attention_mask"].sum(1).max())  # drop all-pad columns
                rows = {k: (v[:, :keep] if v.ndim == 2 else v).to(rt.device)
                        for k, v in rows.items()}
                logits = step_model(rows["input_ids"], rows["attention_mask"],
                                    rows["token_type_ids"])
                return data.head.loss(logits, rows["labels"], data) / denom, {}

            tokens = train["attention_mask"][index].sum()
            if trainer.train_step(micro_step, tokens) is None:
                continue  # a non-finite loss: the step was skipped
            if batches.epoch_done or trainer.every(cfg.eval_every):
                log()
            trainer.advance()
            end = (trainer.every(cfg.save_every) if cfg.save_every else batches.epoch_done)
            if end and trainer.step < total:
                trainer.save()
    if rt.is_main:
        selection.restore(trainer.model)
    selection.skips = trainer.skips
    return trainer.model, selection  # type: ignore[return-value]


# -- evaluation and predictions ---------------------------------------------------------


def dev_predictions(model: nn.Module, tok: Any, data: TaskData,
                    cfg: FinetuneConfig) -> dict[str, tuple[Any, Any]]:
    """(predictions, labels) on each dev split, as the head makes them."""
    return {split: data.head.predict(model, tok, examples, data, cfg)
            for split, examples in data.dev.items()}


def evaluate_model(model: nn.Module, tok: Any, data: TaskData,
                   cfg: FinetuneConfig) -> dict[str, Any]:
    """The task's metrics on each dev split."""
    return {split: data.head.score(data, p, y)
            for split, (p, y) in dev_predictions(model, tok, data, cfg).items()}


def report(data: TaskData, preds: dict[str, tuple[np.ndarray, np.ndarray]],
           selection: Selection) -> dict[str, Any]:
    """What a seed's run looked like: the kept evaluation, every evaluation, a confusion
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


# -- the whole command: seeds, resume, results ------------------------------------------


def _staging(out: Path, settings: dict[str, Any], claim: Claim, resume: bool) -> Path:
    """``OUT.partial``: a fresh one, or (``resume``) the interrupted one if its settings are
    these. Rank 0 only; ``claim`` checked ``out`` and holds its lock."""
    tmp = out.with_name(out.name + ".partial")
    if resume and (tmp / "finetune.json").is_file():
        saved = read_json(tmp / "finetune.json", "an interrupted fine-tune's settings")
        diffs = config_diffs(saved, settings, {"seeds"})
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
        split = rt.world_size * resolved.grad_accum
        if resolved.batch_size % split:
            raise UserError(f"--set batch_size={resolved.batch_size} does not split into "
                            f"{rt.world_size} processes x grad_accum={resolved.grad_accum} "
                            f"equal micro-batches; choose a multiple of {split}")
        return resolved, data.head.prepare(data, resolved), load_tokenizer(source.tokenizer)

    cfg, data, tok = rt.agree(check, "checking the fine-tuning inputs")
    settings = {"task": data.name, "model": source.name, "config": cfg.to_dict(),
                "labels": data.labels, "seeds": seeds}

    def begin() -> tuple[Path, dict[int, Any], Path | None]:
        tmp = _staging(out, settings, claim, resume)
        done = {s: read_json(tmp / f"seed-{s}/result.json") for s in seeds
                if (tmp / f"seed-{s}/result.json").is_file()}
        todo = [s for s in seeds if s not in done]
        ckpt = latest_checkpoint(tmp / f"seed-{todo[0]}/checkpoints") if todo else None
        return tmp, done, ckpt

    tmp, done, ckpt = rt.on_main(begin, "preparing the output folder")
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
            preds = dev_predictions(model, tok, data, cfg)
            done[seed] = {"seed": seed, "dev": {split: data.head.score(data, p, y)
                                                for split, (p, y) in preds.items()},
                          **report(data, preds, selection)}
            _finish_seed(model.cpu(), folder, data, cfg, tok, done[seed],
                         time.perf_counter() - t0)
    if not rt.is_main:
        return None
    return _write_results(tmp, data, cfg, seeds, done, source.name)


def save_classifier(model: nn.Module, folder: Path, data: TaskData,
                    cfg: FinetuneConfig, tok: Any) -> None:
    """A fine-tuned model's folder: what `evaluate`, `export` and `--model` read."""
    folders.write(folder, model, "classifier", tok, task=data.name,
                  labels=data.labels, regression=data.regression, metrics=list(data.metrics),
                  finetune=cfg.to_dict(), text_columns=list(data.columns),
                  **data.head.meta(data))


def load_classifier(folder: str | Path) -> tuple[nn.Module, dict[str, Any]]:
    """A fine-tuned model and its config.json (task, labels, settings)."""
    return folders.load(folder, "classifier")


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
