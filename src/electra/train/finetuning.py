"""One fine-tune of one seed, of one task or several at once, in litgpt's shape:
:func:`setup` (the model from its source, the encoded training sets, the trainer and its
resumable state), :func:`fit` (the loop), and :func:`validate` (the dev evaluations, a
metrics line, and each task's kept model). The command around it (seeds, resume, results) is
``electra.commands.finetune``; each task's head (``electra.tasks``) encodes, builds, scores and
reports.

Single-task is multi-task with one task (google-research/electra's ``task_names``). Several
tasks (MT-DNN's recipe) share one encoder (:class:`~electra.train.multitask.MultiTaskModel`),
each step a batch of one task drawn with probability proportional to its size^α
(``task_sampling_alpha``); an epoch is as many steps as the tasks' own epochs together, so at
α=1 each task is seen about once an epoch; every task is evaluated at each epoch's end and
keeps its own model. One task draws nothing, and its checkpoints, metrics names and files
are a single-task fine-tune's as they always were. Resumable bitwise: the draws, each task's
batch order and the selections are part of the checkpoint.
"""

from __future__ import annotations

import dataclasses
import math
import sys
import types
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from electra.config import FinetuneConfig, ModelConfig
from electra.errors import UserError
from electra.io.progress import reporting
from electra.io.trackers import Tracking, parse_log_to
from electra.model.macs import encoder_macs_per_token
from electra.runtime import Runtime, peak_flops, resolve_precision
from electra.saved import folders
from electra.tasks.base import TaskData
from electra.train.multitask import MultiTaskModel, WithLosses
from electra.train.optim import layerwise_groups
from electra.train.trainer import RandomStreams, Settings, Trainer

if TYPE_CHECKING:
    from tokenizers import Tokenizer  # (the types only: the readers stay light)


@dataclass(frozen=True)
class ModelSource:
    """What a fine-tune starts from: a discriminator's encoder, or random weights."""

    init: Path | None  # the folder whose encoder weights are loaded; None: random init
    config: ModelConfig
    tokenizer: Path
    name: str  # for results.json: the --model given, or "random-init"
    encoder: dict[str, Any] | None = None  # the encoder's weights (read and checked once)
    loaded: str = ""  # what the encoder was taken from, for the first lines (model_line)

    def line(self, tasks: dict[str, TaskData]) -> str:
        """What the fine-tune loaded and what it builds fresh, in one line: ``--model RUN:
        loaded the encoder of its discriminator (bert body, 12 x 256; ...); built fresh: a
        sequence head for sst2 (2 labels)``."""
        c = self.config
        shape = f"{c.body} body, {c.num_layers} x {c.hidden_size}"
        heads = ", ".join(f"{'an' if d.head.name[0] in 'aeiou' else 'a'} {d.head.name} head "
                          f"for {name}"
                          + (f" ({len(d.labels)} labels)" if d.labels else "")
                          for name, d in tasks.items())
        if self.init is None:
            return (f"--random-init: every weight built fresh ({shape}; {heads}); the "
                    f"tokenizer from {self.tokenizer}")
        return f"--model {self.name}: loaded {self.loaded} ({shape}); built fresh: {heads}"


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


class TaskSampler:
    """Which task each step trains, and that task's next batch: a draw with probability
    proportional to the task's size^``alpha`` (1 proportional, 0 uniform), each task its own
    seeded, resumable :class:`EpochBatches` cycling through its own epochs. An epoch is as
    many steps as the tasks' own epochs together. One task draws nothing: its batches are
    seeded with ``seed`` itself and its state is theirs (a single-task fine-tune's)."""

    def __init__(self, sizes: dict[str, int], batch_size: int, alpha: float, seed: int,
                 lengths: dict[str, torch.Tensor] | None = None) -> None:
        self.names = list(sizes)
        largest = float(max(sizes.values()))  # size^alpha relative to the largest: no
        weights = torch.tensor([(n / largest) ** alpha for n in sizes.values()],  # overflow
                               dtype=torch.float64)
        self.probs = weights / weights.sum()
        self.g = torch.Generator().manual_seed(seed)
        self.single = len(sizes) == 1
        self.batches = {
            t: EpochBatches(n, batch_size, max(1, n // batch_size),
                            seed if self.single else seed + 1 + i, (lengths or {}).get(t))
            for i, (t, n) in enumerate(sizes.items())}
        self.steps_per_epoch = sum(b.steps_per_epoch for b in self.batches.values())
        self.epoch, self.position = 0, 0

    def next(self) -> tuple[str, torch.Tensor]:
        if self.position == self.steps_per_epoch:
            self.epoch, self.position = self.epoch + 1, 0
        task = self.names[0] if self.single else self.names[
            int(torch.multinomial(self.probs, 1, generator=self.g))]
        self.position += 1
        return task, self.batches[task].next()

    @property
    def epoch_done(self) -> bool:
        return self.position == self.steps_per_epoch

    def state_dict(self) -> dict[str, Any]:
        if self.single:
            return self.batches[self.names[0]].state_dict()
        return {"rng": self.g.get_state(), "epoch": self.epoch, "position": self.position,
                "tasks": {t: b.state_dict() for t, b in self.batches.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self.single:
            only = self.batches[self.names[0]]
            only.load_state_dict(state)
            self.epoch, self.position = only.epoch, only.position
            return
        self.g.set_state(state["rng"])
        self.epoch, self.position = int(state["epoch"]), int(state["position"])
        for t, b in self.batches.items():
            b.load_state_dict(state["tasks"][t])


class Selections:
    """Each task's :class:`Selection` (its best weights in ``best-TASK.safetensors``; one
    task: ``best.safetensors``, and its state is that selection's)."""

    def __init__(self, tasks: dict[str, TaskData], mode: str, folder: Path | None) -> None:
        self.single = len(tasks) == 1
        self.of = {t: Selection(mode, next(iter(d.dev)), d.metrics[0], folder,
                                name="" if self.single else t) for t, d in tasks.items()}

    def state_dict(self) -> dict[str, Any]:
        if self.single:
            return next(iter(self.of.values())).state_dict()
        return {t: s.state_dict() for t, s in self.of.items()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self.single:
            next(iter(self.of.values())).load_state_dict(state)
            return
        for t, s in self.of.items():
            s.load_state_dict(state[t])


@dataclass
class Fit:
    """A seed ready to train: its trainer (model, optimizer, schedule, checkpoints), each
    task's encoded training set, and the resumable sampler and selections. One task trains
    its head's model itself; several share one encoder (:class:`MultiTaskModel`)."""

    trainer: Trainer
    model: nn.Module
    train: dict[str, dict[str, torch.Tensor]]
    sampler: TaskSampler
    selections: Selections
    total: int  # optimizer steps
    micro: int  # rows per micro-batch of a process
    flops_per_token: float = 0.0  # training FLOPs of a token (see :func:`mfu_terms`)
    peak: float = 0.0  # the FLOP/s of every process's device together

    @property
    def single(self) -> bool:
        return self.sampler.single

    def view(self, task: str) -> nn.Module:
        """``task``'s model (named as a single-task one)."""
        return self.model if self.single else self.model.view(task)  # type: ignore[operator]

    def name(self, task: str, key: str) -> str:
        """A metrics key of ``task``'s (``TASK_key`` when there are several)."""
        return key if self.single else f"{task}_{key}"


def setup(source: ModelSource, tok: Tokenizer, tasks: dict[str, TaskData],
          cfgs: dict[str, FinetuneConfig], cfg: FinetuneConfig, seed: int, rt: Runtime,
          folder: Path | None, resume: Path | None, progress: bool) -> Fit:
    """Every task's head on the source's encoder (seeded, in the tasks' order), the training
    sets encoded, the sampler, and the trainer with the paper's optimizer (AdamW, layer-wise
    decay) and schedule. ``cfgs``: each task's settings, ``cfg`` the run's."""
    torch.manual_seed(seed)
    kernels = rt.model_kernels(cfg.unpad)
    models = {t: d.head.build(source.config, d.labels, d.regression, kernels,
                              cfgs[t].to_dict()) for t, d in tasks.items()}
    model = next(iter(models.values())) if len(models) == 1 else MultiTaskModel(models)
    if source.encoder is not None:
        folders.fit(model.encoder, source.encoder, source.init)  # type: ignore[arg-type]
    if cfg.freeze == "encoder":
        freeze(model.encoder)  # type: ignore[arg-type]
    losses = {t: c for t, d in tasks.items()
              if (c := d.head.criterion(cfgs[t].to_dict())) is not None}
    trained = WithLosses(model, losses, len(tasks) == 1) if losses else model
    train = {t: d.head.encode(tok, _training_examples(d, cfgs[t]), d, cfgs[t])
             for t, d in tasks.items()}
    sampler = TaskSampler({t: len(x["input_ids"]) for t, x in train.items()}, cfg.batch_size,
                          cfg.task_sampling_alpha, seed,
                          {t: x["attention_mask"].flatten(1).sum(1) for t, x in train.items()}
                          if cfg.group_by_length else None)
    total = sampler.steps_per_epoch * cfg.epochs  # type: ignore[operator]
    selections = Selections(tasks, cfg.select, folder)
    single = sampler.single
    warmup = int(cfg.warmup_fraction * total)
    if cfg.decay_steps > total - warmup:  # known only now: the steps follow the data
        if rt.is_main:
            after = total - warmup
            print(f"electra: note: decay_steps={cfg.decay_steps} is more than the {after} "
                  f"steps after the warmup ({cfg.epochs} epoch(s) of "
                  f"{sampler.steps_per_epoch} steps): the rate decays over those",
                  file=sys.stderr, flush=True)
        cfg = dataclasses.replace(cfg, decay_steps=total - warmup)
    settings = Settings.of(cfg, cfg.lr, total, warmup,  # type: ignore[arg-type]
                           keep_checkpoints=cfg.keep_checkpoints,
                           find_unused=not single and rt.world_size > 1,  # the other heads
                           tracking=seed_tracking(cfg.log_to, folder))
    named = {"task": next(iter(tasks))} if single else {"tasks": list(tasks)}
    trainer = Trainer(
        trained, rt, settings,
        lambda m: layerwise_groups(m, cfg.lr, cfg.layer_decay, cfg.weight_decay,  # type: ignore[arg-type]
                                   cfg.optimizer == "muon"),
        out=folder, config={"finetune": cfg.to_dict(), **named, "seed": seed,
                            "model": source.name},
        streams=RandomStreams(rt, seed),  # dropout: each rank its own stream
        stateful={"batches": sampler, "selection": selections} if single else
        {"sampler": sampler, "selections": selections}, resume=resume, progress=progress)
    micro = cfg.batch_size // rt.world_size // cfg.grad_accum
    return Fit(trainer, model, train, sampler, selections, total, micro,
               *mfu_terms(source.config, cfg, rt, max(c.max_length or 0 for c in cfgs.values())))


def check_trainable(config: ModelConfig, tasks: dict[str, TaskData],
                    cfgs: dict[str, FinetuneConfig], cfg: FinetuneConfig) -> None:
    """What a head's settings refuse for this model (Matryoshka dimensions as wide as it:
    ``Head.check_model``), before --out is touched; ``freeze=encoder`` trains the heads alone:
    each must have a weight of its own (built on the meta device: no memory, no time)."""
    for t, d in tasks.items():
        d.head.check_model(config, cfgs[t].to_dict())
    if cfg.freeze != "encoder":
        return
    with torch.device("meta"), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # init's notes on meta tensors (they hold nothing)
        bare = [t for t, d in tasks.items() if not any(
            p.requires_grad for n, p in d.head.build(config, d.labels, d.regression,
                                                     settings=cfgs[t].to_dict())
            .named_parameters() if not n.startswith("encoder.")) and not any(
            p.requires_grad for p in (d.head.criterion(cfgs[t].to_dict()) or nn.Module())
            .parameters())]
    if bare:
        raise UserError(f"freeze=encoder leaves no weight to train for {', '.join(bare)}: "
                        f"its head has none of its own to learn (an embedding model's "
                        f"temperature only with learn_temperature=true); set freeze=none")


def mfu_terms(model: ModelConfig, cfg: FinetuneConfig, rt: Runtime,
              length: int) -> tuple[float, float]:
    """(training FLOPs of a real token, the devices' peak FLOP/s) for each metrics line's
    ``mfu``: the encoder's matrix multiplies at ``length``, the tasks' longest max_length
    (exact for the dense layers;
    attention's, a few % at 128 tokens, counted at the longest row: an upper bound), 6 a
    multiply-accumulate (forward and backward), 2 with the encoder frozen; the task head's
    few multiplies are left out."""
    per_token = encoder_macs_per_token(model, length)
    peak, _ = peak_flops(rt.device, resolve_precision(rt.device, cfg.precision))
    return (2 if cfg.freeze == "encoder" else 6) * per_token, peak * rt.world_size


def seed_tracking(log_to: str, folder: Path | None) -> Tracking:
    """A seed's trackers: a run of its own (``OUT/seed-N``), grouped by ``OUT``'s name, MLflow's
    local store in ``OUT``."""
    names = parse_log_to(log_to, "log_to")
    if folder is None:
        return Tracking(names)
    root = folder.parent
    group = root.name.removesuffix(".partial")  # OUT's staging folder until it finishes
    return Tracking(names, root=root, name=f"{group}/{folder.name}", group=group)


def validate(fit: Fit, tok: Tokenizer, tasks: dict[str, TaskData],
             cfgs: dict[str, FinetuneConfig]) -> None:
    """The training loss so far and (rank 0) every task's dev scores, as one metrics line;
    each task's evaluation is offered to its selection."""
    trainer, sampler = fit.trainer, fit.sampler
    record = {**trainer.metrics(), "epoch": round(
        sampler.epoch + sampler.position / sampler.steps_per_epoch, 4)}
    if fit.peak:
        record["mfu"] = record["tokens_per_s"] * fit.flops_per_token / fit.peak
    shown = ["loss"]
    if trainer.rt.is_main:
        for t, data in tasks.items():
            view = fit.view(t)
            with reporting(None, f"evaluating {t} on its dev data", "input",
                           trainer.progress):
                preds = dev_predictions(view, tok, data, cfgs[t])
            dev = scores(data, preds)
            record.update({fit.name(t, f"{split}_{m}"): v for split, res in dev.items()
                           for m, v in res.items()})
            sel = fit.selections.of[t]
            shown.append(fit.name(t, f"{sel.split}_{sel.metric}"))
            sel.offer({"step": trainer.step, "epoch": record["epoch"], "loss": record["loss"],
                       "dev": dev}, view, preds)
    trainer.log(record, show=tuple(shown))


def fit(state: Fit, tok: Tokenizer, tasks: dict[str, TaskData],
        cfgs: dict[str, FinetuneConfig], cfg: FinetuneConfig) -> None:
    """Train to the last step: each step one task's global batch (each process its rows,
    micro-batches cut to their longest row, the loss the task's mean over the batch: its
    examples, or its tagged words); every task evaluated at each epoch's end (and every
    ``eval_every`` steps), checkpoints at the end of every epoch (or every ``save_every``
    steps)."""
    trainer, sampler, rt = state.trainer, state.sampler, state.trainer.rt
    per_rank, micro = cfg.batch_size // rt.world_size, state.micro
    criteria = getattr(trainer.model, "criteria", {})  # the tasks' loss objects
    with trainer.running(total=state.total):
        if trainer.log_due:  # Ctrl-C came while this step's line was being computed
            validate(state, tok, tasks, cfgs)
        while trainer.step < state.total:
            task, index = sampler.next()
            train, data = state.train[task], tasks[task]
            mine = {k: v[index[rt.rank * per_rank : (rt.rank + 1) * per_rank]]
                    for k, v in train.items()}
            denom = data.head.denominator(train["labels"], index, cfg.batch_size)
            which = {} if state.single else {"task": task}

            def micro_step(step_model: nn.Module, j: int, b: dict[str, torch.Tensor] = mine,
                           denom: int = denom, data: TaskData = data,
                           which: dict[str, str] = which) -> tuple[torch.Tensor, dict]:
                rows = micro_rows(b, j, micro, rt.device)
                logits = step_model(rows["input_ids"], rows["attention_mask"],
                                    rows["token_type_ids"], **which)
                return data.head.loss(logits, rows["labels"], data) / denom, {}

            own = data.head.micro_steps(
                cfgs[task], lambda j, b=mine: micro_rows(b, j, micro, rt.device),
                cfg.grad_accum, denom, criteria.get(task), rt, which)
            if trainer.train_step(own or micro_step,
                                  train["attention_mask"][index].sum()) is None:
                continue  # a non-finite loss: the step was skipped
            for selection in state.selections.of.values():
                selection.stepped()
            if sampler.epoch_done or trainer.every(cfg.eval_every):
                validate(state, tok, tasks, cfgs)
            trainer.advance()
            end = trainer.every(cfg.save_every) if cfg.save_every else sampler.epoch_done
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


def finetune_tasks(source: ModelSource, tok: Tokenizer, tasks: dict[str, TaskData],
                   cfgs: dict[str, FinetuneConfig], cfg: FinetuneConfig, seed: int,
                   rt: Runtime | None = None, folder: Path | None = None,
                   resume: Path | None = None, progress: bool = False
                   ) -> tuple[dict[str, nn.Module], Selections]:
    """Fine-tune one seed from ``source`` (settings resolved: ``cfgs`` each task's, ``cfg``
    the run's); returns each task's kept model as a single-task model (rank 0; other ranks:
    the one task's model, or {} for several) and the selections (with the skipped steps).

    Under torchrun each process trains on its rows of every batch (DDP); rank 0 evaluates.
    ``folder``: where the seed's checkpoints and metrics go (None: nowhere); ``resume``: a
    checkpoint of it.
    """
    rt = rt or Runtime()
    state = setup(source, tok, tasks, cfgs, cfg, seed, rt, folder, resume, progress)
    fit(state, tok, tasks, cfgs, cfg)
    for selection in state.selections.of.values():
        selection.skips = state.trainer.skips
    if state.single:
        (task, selection), = state.selections.of.items()
        if rt.is_main:
            selection.restore(state.model)
        return {task: state.model}, state.selections
    models: dict[str, nn.Module] = {}
    if rt.is_main:
        for t, data in tasks.items():
            model = data.head.build(source.config, data.labels, data.regression,
                                    rt.model_kernels(cfg.unpad), cfgs[t].to_dict())
            model.load_state_dict(state.model.view(t).state_dict())  # type: ignore[operator]
            state.selections.of[t].restore(model)
            models[t] = model.to(rt.device)
    return models, state.selections


def finetune_one(source: ModelSource, tok: Tokenizer, data: TaskData, cfg: FinetuneConfig,
                 seed: int, rt: Runtime | None = None, folder: Path | None = None,
                 resume: Path | None = None,
                 progress: bool = False) -> tuple[nn.Module, Selection]:
    """One task's :func:`finetune_tasks`: the kept model and its selection."""
    models, selections = finetune_tasks(source, tok, {data.name: data}, {data.name: cfg},
                                        cfg, seed, rt, folder, resume, progress)
    return models[data.name], selections.of[data.name]


def dev_predictions(model: nn.Module, tok: Tokenizer, data: TaskData,
                    cfg: FinetuneConfig) -> dict[str, tuple[Any, Any]]:
    """(predictions, labels) on each dev split, as the head makes them."""
    return {split: data.head.predict(model, tok, examples, data, cfg)
            for split, examples in data.dev.items()}


def kept_predictions(model: nn.Module, selection: Selection, tok: Tokenizer, data: TaskData,
                     cfg: FinetuneConfig) -> dict[str, tuple[Any, Any]]:
    """The dev predictions of a finished seed's kept ``model``: those its selection made of
    it, else made now."""
    if selection.predictions is not None:
        return selection.predictions
    return dev_predictions(model, tok, data, cfg)


def scores(data: TaskData, preds: dict[str, tuple[Any, Any]]) -> dict[str, Any]:
    """The task's metrics of (predictions, labels) on each dev split."""
    return {split: data.head.score(data, p, y) for split, (p, y) in preds.items()}


def evaluate_model(model: nn.Module, tok: Tokenizer, data: TaskData,
                   cfg: FinetuneConfig) -> dict[str, Any]:
    """The task's metrics on each dev split."""
    return scores(data, dev_predictions(model, tok, data, cfg))
