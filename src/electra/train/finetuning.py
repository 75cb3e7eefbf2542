"""One fine-tune of one seed, in litgpt's shape: :func:`setup` (the model from its source,
the encoded training set, the trainer and its resumable state), :func:`fit` (the loop), and
:func:`validate` (the dev evaluation, a metrics line, and the kept model's selection). The
command around it (seeds, resume, results) is ``electra.finetune``; the task's head
(``electra.tasks``) encodes, builds, scores and reports.
"""

from __future__ import annotations

import math
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from electra.config import FinetuneConfig, ModelConfig
from electra.io import folders
from electra.tasks.base import TaskData
from electra.train.optim import layerwise_groups
from electra.train.runtime import Runtime
from electra.train.trainer import RandomStreams, Settings, Trainer


@dataclass(frozen=True)
class ModelSource:
    """What a fine-tune starts from: a discriminator's encoder, or random weights."""

    init: Path | None  # the folder whose encoder weights are loaded; None: random init
    config: ModelConfig
    tokenizer: Path
    name: str  # for results.json: the --model given, or "random-init"
    encoder: dict[str, Any] | None = None  # the encoder's weights (read and checked once)


class EpochBatches:
    """The training examples in a new seeded order every epoch, one global batch per step
    (a process takes its rows); resumable mid-epoch.

    ``lengths`` (each example's tokens) groups batches by length, as transformers'
    ``LengthGroupedSampler`` does: the epoch's random order is cut into groups of
    ``GROUP`` batches, each group sorted by length and its batches shuffled, so a batch holds
    examples of similar length (less padding to compute) and the order stays random."""

    GROUP = 50  # batches per group (transformers' megabatch)

    def __init__(self, n: int, batch_size: int, steps_per_epoch: int, seed: int,
                 lengths: torch.Tensor | None = None) -> None:
        self.n, self.batch_size, self.steps_per_epoch = n, batch_size, steps_per_epoch
        self.lengths = lengths
        self.g = torch.Generator().manual_seed(seed)
        self.epoch, self.position = 0, 0
        self._start_epoch()

    def _start_epoch(self) -> None:
        self.order_state = self.g.get_state()  # to redraw this epoch's order on resume
        self.order = torch.randperm(self.n, generator=self.g)
        if self.lengths is not None:
            self.order = self._grouped(self.order)

    def _grouped(self, order: torch.Tensor) -> torch.Tensor:
        """``order`` with each group of batches sorted by length (longest first, ties in
        random order) and its batches in a random order. The examples that fill no whole
        batch stay last, where every epoch leaves them out, as without grouping."""
        whole = self.n // self.batch_size * self.batch_size
        size, out = self.GROUP * self.batch_size, []
        for first in range(0, whole, size):
            group = order[first : min(first + size, whole)]
            group = group[torch.sort(self.lengths[group], descending=True,  # type: ignore[index]
                                     stable=True).indices]
            batches = group.split(self.batch_size)
            out += [batches[i] for i in torch.randperm(len(batches), generator=self.g)]
        return torch.cat([*out, order[whole:]])

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


def freeze(module: nn.Module) -> None:
    """A probe's encoder: no gradients (so no backward through it, and the optimizer leaves
    it out) and always in eval mode (no dropout), whatever mode its model is put in."""
    module.requires_grad_(False)
    module.eval()
    module.train = types.MethodType(lambda self, mode=True: self, module)  # type: ignore[method-assign]


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
    are kept in ``folder/best.safetensors`` as it is found). Part of the resumable state.

    ``predictions``: the kept evaluation's (predictions, labels) by split, while they still
    describe the model the seed ends with (the best's weights are restored; under
    ``select=last`` a later step outdates them, :meth:`stepped`), so the finished seed is not
    evaluated twice; not part of the state (a resumed seed evaluates its kept model again)."""

    def __init__(self, mode: str, split: str, metric: str, folder: Path | None,
                 name: str = "") -> None:
        self.mode, self.split, self.metric, self.folder = mode, split, metric, folder
        self.file = f"best-{name}.safetensors" if name else "best.safetensors"
        self.history: list[dict[str, Any]] = []  # one per evaluation: step, epoch, loss, dev
        self.kept: dict[str, Any] | None = None
        self.skips = 0  # steps skipped for a non-finite loss (the trainer's count)
        self.predictions: dict[str, tuple[Any, Any]] | None = None

    def score(self, entry: dict[str, Any]) -> float:
        value = entry["dev"][self.split][self.metric]
        return value if math.isfinite(value) else -math.inf

    def offer(self, entry: dict[str, Any], model: nn.Module,
              predictions: dict[str, tuple[Any, Any]] | None = None) -> None:
        """An evaluation of ``model`` (its dev ``predictions``, as :func:`dev_predictions`
        makes them): kept if it is the last, or the best so far."""
        self.history.append(entry)
        if self.mode == "best" and self.kept is not None and (
                self.score(entry) <= self.score(self.kept)):
            return  # the earliest of equal scores stays
        self.kept, self.predictions = entry, predictions
        if self.mode == "best" and self.folder is not None:
            from safetensors.torch import save_file

            part = self.folder / f"{self.file}.tmp"
            save_file({k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()},
                      str(part))
            part.replace(self.folder / self.file)

    def stepped(self) -> None:
        """The model took a step: under ``select=last`` the kept predictions are outdated."""
        if self.mode == "last":
            self.predictions = None

    def restore(self, model: nn.Module) -> None:
        """Load the kept evaluation's weights into ``model`` (select=best)."""
        if self.mode == "best" and self.folder is not None and self.kept is not None:
            folders.fit(model, folders.read_weights(self.folder / self.file), self.folder)

    def state_dict(self) -> dict[str, Any]:
        return {"history": self.history, "kept": self.kept}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.history, self.kept = list(state["history"]), state["kept"]
        self.predictions = None


@dataclass
class Fit:
    """A seed ready to train: its trainer (model, optimizer, schedule, checkpoints), the
    encoded training set, and the resumable batches and selection."""

    trainer: Trainer
    train: dict[str, torch.Tensor]
    batches: EpochBatches
    selection: Selection
    total: int  # optimizer steps
    micro: int  # rows per micro-batch of a process


def setup(source: ModelSource, tok: Any, data: TaskData, cfg: FinetuneConfig, seed: int,
          rt: Runtime, folder: Path | None, resume: Path | None, progress: bool) -> Fit:
    """The task's head on the source's encoder (seeded), the training set encoded, and the
    trainer with the paper's optimizer (AdamW, layer-wise decay) and schedule."""
    torch.manual_seed(seed)
    model = data.head.build(source.config, data.labels, data.regression,
                            rt.model_kernels(cfg.unpad))
    if source.encoder is not None:
        folders.fit(model.encoder, source.encoder, source.init)  # type: ignore[arg-type]
    if cfg.freeze == "encoder":
        freeze(model.encoder)  # type: ignore[arg-type]
    train = data.head.encode(tok, _training_examples(data, cfg), data, cfg)
    n = len(train["input_ids"])  # examples, or QA's windows
    steps_per_epoch = max(1, n // cfg.batch_size)
    total = steps_per_epoch * cfg.epochs  # type: ignore[operator]
    batches = EpochBatches(n, cfg.batch_size, steps_per_epoch, seed,
                           train["attention_mask"].sum(1) if cfg.group_by_length else None)
    selection = Selection(cfg.select, next(iter(data.dev)), data.metrics[0], folder)
    settings = Settings(lr=cfg.lr, max_steps=total,  # type: ignore[arg-type]
                        warmup_steps=int(cfg.warmup_fraction * total),
                        precision=cfg.precision, grad_accum=cfg.grad_accum,
                        grad_clip=cfg.grad_clip, max_nonfinite_skips=cfg.max_nonfinite_skips,
                        keep_checkpoints=cfg.keep_checkpoints, compile=cfg.compile,
                        prefix="")
    trainer = Trainer(
        model, rt, settings,
        lambda m: layerwise_groups(m, cfg.lr, cfg.layer_decay, cfg.weight_decay),  # type: ignore[arg-type]
        out=folder, config={"finetune": cfg.to_dict(), "task": data.name, "seed": seed,
                            "model": source.name},
        streams=RandomStreams(rt, seed),  # dropout: each rank its own stream
        stateful={"batches": batches, "selection": selection}, resume=resume,
        progress=progress)
    micro = cfg.batch_size // rt.world_size // cfg.grad_accum
    return Fit(trainer, train, batches, selection, total, micro)


def validate(fit: Fit, tok: Any, data: TaskData, cfg: FinetuneConfig) -> None:
    """The training loss so far and (rank 0) the dev scores, as one metrics line; the
    evaluation is offered to the selection."""
    trainer, batches, selection = fit.trainer, fit.batches, fit.selection
    record = {**trainer.metrics(), "epoch": round(
        batches.epoch + batches.position / batches.steps_per_epoch, 4)}
    if trainer.rt.is_main:
        preds = dev_predictions(trainer.model, tok, data, cfg)
        dev = scores(data, preds)
        record.update({f"{split}_{m}": v for split, res in dev.items() for m, v in res.items()})
        selection.offer({"step": trainer.step, "epoch": record["epoch"],
                         "loss": record["loss"], "dev": dev}, trainer.model, preds)
    trainer.log(record, show=("loss", f"{selection.split}_{data.metrics[0]}"))


def fit(state: Fit, tok: Any, data: TaskData, cfg: FinetuneConfig) -> None:
    """Train to the last step: each process its rows of every global batch, micro-batches
    cut to their longest row, the loss a mean over the global batch (its examples, or its
    tagged words); dev evaluation at every epoch's end (and every ``eval_every`` steps),
    checkpoints at the end of every epoch (or every ``save_every`` steps)."""
    trainer, train, batches, rt = state.trainer, state.train, state.batches, state.trainer.rt
    per_rank, micro = cfg.batch_size // rt.world_size, state.micro
    with trainer.running(total=state.total):
        if trainer.log_due:  # Ctrl-C came while this step's line was being computed
            validate(state, tok, data, cfg)
        while trainer.step < state.total:
            index = batches.next()
            mine = {k: v[index[rt.rank * per_rank : (rt.rank + 1) * per_rank]]
                    for k, v in train.items()}
            denom = data.head.denominator(train["labels"], index, cfg.batch_size)

            def micro_step(step_model: nn.Module, j: int, b: dict[str, torch.Tensor] = mine,
                           denom: int = denom) -> tuple[torch.Tensor, dict]:
                rows = micro_rows(b, j, micro, rt.device)
                logits = step_model(rows["input_ids"], rows["attention_mask"],
                                    rows["token_type_ids"])
                return data.head.loss(logits, rows["labels"], data) / denom, {}

            if trainer.train_step(micro_step, train["attention_mask"][index].sum()) is None:
                continue  # a non-finite loss: the step was skipped
            state.selection.stepped()
            if batches.epoch_done or trainer.every(cfg.eval_every):
                validate(state, tok, data, cfg)
            trainer.advance()
            end = (trainer.every(cfg.save_every) if cfg.save_every else batches.epoch_done)
            if end and trainer.step < state.total:
                trainer.save()


def micro_rows(batch: dict[str, torch.Tensor], j: int, micro: int,
               device: torch.device) -> dict[str, torch.Tensor]:
    """Micro-batch ``j`` of a process's rows, on the device; token rows (B, T) cut to their
    longest row (the all-pad columns dropped; (B, choices, T) inputs stay whole)."""
    rows = {k: v[j * micro : (j + 1) * micro] for k, v in batch.items()}
    if rows["input_ids"].ndim == 2:
        keep = int(rows["attention_mask"].sum(1).max())
        rows = {k: v[:, :keep] if v.ndim == 2 else v for k, v in rows.items()}
    return {k: v.to(device) for k, v in rows.items()}


def finetune_one(source: ModelSource, tok: Any, data: TaskData, cfg: FinetuneConfig,
                 seed: int, rt: Runtime | None = None, folder: Path | None = None,
                 resume: Path | None = None,
                 progress: bool = False) -> tuple[nn.Module, Selection]:
    """Fine-tune one seed from ``source`` (``cfg`` resolved); returns the kept model and the
    selection.

    Under torchrun each process trains on its rows of every batch (DDP); rank 0 evaluates.
    ``folder``: where the seed's checkpoints and metrics go (None: nowhere); ``resume``: a
    checkpoint of it.
    """
    rt = rt or Runtime()
    state = setup(source, tok, data, cfg, seed, rt, folder, resume, progress)
    fit(state, tok, data, cfg)
    if rt.is_main:
        state.selection.restore(state.trainer.model)
    state.selection.skips = state.trainer.skips
    return state.trainer.model, state.selection


def dev_predictions(model: nn.Module, tok: Any, data: TaskData,
                    cfg: FinetuneConfig) -> dict[str, tuple[Any, Any]]:
    """(predictions, labels) on each dev split, as the head makes them."""
    return {split: data.head.predict(model, tok, examples, data, cfg)
            for split, examples in data.dev.items()}


def kept_predictions(model: nn.Module, selection: Selection, tok: Any, data: TaskData,
                     cfg: FinetuneConfig) -> dict[str, tuple[Any, Any]]:
    """The dev predictions of a finished seed's kept ``model``: those its selection made of
    it, else made now."""
    if selection.predictions is not None:
        return selection.predictions
    return dev_predictions(model, tok, data, cfg)


def scores(data: TaskData, preds: dict[str, tuple[Any, Any]]) -> dict[str, Any]:
    """The task's metrics of (predictions, labels) on each dev split."""
    return {split: data.head.score(data, p, y) for split, (p, y) in preds.items()}


def evaluate_model(model: nn.Module, tok: Any, data: TaskData,
                   cfg: FinetuneConfig) -> dict[str, Any]:
    """The task's metrics on each dev split."""
    return scores(data, dev_predictions(model, tok, data, cfg))
