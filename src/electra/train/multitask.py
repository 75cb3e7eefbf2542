"""Multi-task fine-tuning (google-research/electra's ``task_names`` list, MT-DNN's recipe):
one encoder, one head per task, each step a batch of one task drawn with probability
proportional to its size^α (``task_sampling_alpha``: 1 proportional, 0 uniform).

An epoch is as many steps as the tasks' own epochs together (Σ examples / batch), so at α=1
each task is seen about once per epoch; every task is evaluated at each epoch's end and keeps
its own model (``select=last``, or its best evaluation with ``select=best``). Resumable
bitwise like a single-task fine-tune: the task draws, each task's batch order and the
selections are part of the checkpoint. Each task's model (the encoder + its head) is then an
ordinary fine-tuned model folder. The command around it is ``electra.finetune``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from electra.config import FinetuneConfig
from electra.io import folders
from electra.tasks.base import TaskData
from electra.train.finetuning import (
    EpochBatches,
    ModelSource,
    Selection,
    _training_examples,
    dev_predictions,
    freeze,
    micro_rows,
    scores,
)
from electra.train.optim import layerwise_groups
from electra.train.runtime import Runtime
from electra.train.trainer import RandomStreams, Settings, Trainer


class MultiTaskModel(nn.Module):
    """One encoder, and each task's model without an encoder of its own: its ``encoder`` is
    the shared one (an attribute, not a submodule, so the weights are held once).
    ``forward(..., task=name)`` is that task's model."""

    def __init__(self, models: dict[str, nn.Module]) -> None:
        super().__init__()
        first = next(iter(models.values()))
        self.config = first.config
        self.encoder = first.encoder
        self.heads = nn.ModuleDict()
        for name, model in models.items():
            del model.encoder  # its own (the first's is the shared one)
            object.__setattr__(model, "encoder", self.encoder)
            self.heads[name] = model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None, task: str = "") -> torch.Tensor:
        return self.heads[task](input_ids, attention_mask, token_type_ids)

    def view(self, task: str) -> TaskView:
        return TaskView(self.encoder, self.heads[task])


class TaskView(nn.Module):
    """One task's model as a single-task fine-tune has it: the shared encoder and that
    task's head modules, with the same weight names (to evaluate, keep and save)."""

    def __init__(self, encoder: nn.Module, model: nn.Module) -> None:
        super().__init__()
        self.config = model.config
        self.model = [model]  # not a submodule: its children are registered below
        self.encoder = encoder
        for name, child in model.named_children():
            self.add_module(name, child)

    def forward(self, *args: Any) -> torch.Tensor:
        return self.model[0](*args)


class TaskSampler:
    """Which task each step trains, and that task's next batch (each task its own seeded,
    resumable :class:`EpochBatches`, cycling through its own epochs)."""

    def __init__(self, sizes: dict[str, int], batch_size: int, alpha: float, seed: int,
                 lengths: dict[str, torch.Tensor] | None = None) -> None:
        self.names = list(sizes)
        largest = float(max(sizes.values()))  # size^alpha relative to the largest: no
        weights = torch.tensor([(n / largest) ** alpha for n in sizes.values()],  # overflow
                               dtype=torch.float64)
        self.probs = weights / weights.sum()
        self.g = torch.Generator().manual_seed(seed)
        self.batches = {
            t: EpochBatches(n, batch_size, max(1, n // batch_size), seed + 1 + i,
                            (lengths or {}).get(t))
            for i, (t, n) in enumerate(sizes.items())}
        self.steps_per_epoch = sum(b.steps_per_epoch for b in self.batches.values())
        self.epoch, self.position = 0, 0

    def next(self) -> tuple[str, torch.Tensor]:
        if self.position == self.steps_per_epoch:
            self.epoch, self.position = self.epoch + 1, 0
        task = self.names[int(torch.multinomial(self.probs, 1, generator=self.g))]
        self.position += 1
        return task, self.batches[task].next()

    @property
    def epoch_done(self) -> bool:
        return self.position == self.steps_per_epoch

    def state_dict(self) -> dict[str, Any]:
        return {"rng": self.g.get_state(), "epoch": self.epoch, "position": self.position,
                "tasks": {t: b.state_dict() for t, b in self.batches.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.g.set_state(state["rng"])
        self.epoch, self.position = int(state["epoch"]), int(state["position"])
        for t, b in self.batches.items():
            b.load_state_dict(state["tasks"][t])


class Selections:
    """Each task's :class:`Selection` (its best weights in ``best-TASK.safetensors``)."""

    def __init__(self, tasks: dict[str, TaskData], mode: str, folder: Path | None) -> None:
        self.of = {t: Selection(mode, next(iter(d.dev)), d.metrics[0], folder, name=t)
                   for t, d in tasks.items()}

    def state_dict(self) -> dict[str, Any]:
        return {t: s.state_dict() for t, s in self.of.items()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for t, s in self.of.items():
            s.load_state_dict(state[t])


@dataclass
class MultiFit:
    trainer: Trainer
    model: MultiTaskModel
    train: dict[str, dict[str, torch.Tensor]]
    sampler: TaskSampler
    selections: Selections
    total: int


def setup(source: ModelSource, tok: Any, tasks: dict[str, TaskData],
          cfgs: dict[str, FinetuneConfig], cfg: FinetuneConfig, seed: int, rt: Runtime,
          folder: Path | None, resume: Path | None, progress: bool) -> MultiFit:
    """Every task's head on one encoder (seeded, in the tasks' order), the training sets
    encoded, the sampler, and the trainer (AdamW, layer-wise decay, one schedule)."""
    torch.manual_seed(seed)
    kernels = rt.model_kernels(cfg.unpad)
    model = MultiTaskModel({t: d.head.build(source.config, d.labels, d.regression, kernels)
                            for t, d in tasks.items()})
    if source.encoder is not None:
        folders.fit(model.encoder, source.encoder, source.init)  # type: ignore[arg-type]
    if cfg.freeze == "encoder":
        freeze(model.encoder)
    train = {t: d.head.encode(tok, _training_examples(d, cfgs[t]), d, cfgs[t])
             for t, d in tasks.items()}
    sampler = TaskSampler({t: len(x["input_ids"]) for t, x in train.items()}, cfg.batch_size,
                          cfg.task_sampling_alpha, seed,
                          {t: x["attention_mask"].flatten(1).sum(1) for t, x in train.items()}
                          if cfg.group_by_length else None)
    total = sampler.steps_per_epoch * cfg.epochs  # type: ignore[operator]
    selections = Selections(tasks, cfg.select, folder)
    settings = Settings(lr=cfg.lr, max_steps=total,  # type: ignore[arg-type]
                        warmup_steps=int(cfg.warmup_fraction * total),
                        precision=cfg.precision, grad_accum=cfg.grad_accum,
                        grad_clip=cfg.grad_clip, max_nonfinite_skips=cfg.max_nonfinite_skips,
                        keep_checkpoints=cfg.keep_checkpoints, compile=cfg.compile,
                        find_unused=rt.world_size > 1,  # the other tasks' heads
                        prefix="")
    trainer = Trainer(
        model, rt, settings,
        lambda m: layerwise_groups(m, cfg.lr, cfg.layer_decay, cfg.weight_decay),  # type: ignore[arg-type]
        out=folder, config={"finetune": cfg.to_dict(), "tasks": list(tasks), "seed": seed,
                            "model": source.name},
        streams=RandomStreams(rt, seed), stateful={"sampler": sampler,
                                                   "selections": selections},
        resume=resume, progress=progress)
    return MultiFit(trainer, model, train, sampler, selections, total)


def validate(fit: MultiFit, tok: Any, tasks: dict[str, TaskData],
             cfgs: dict[str, FinetuneConfig]) -> None:
    """The training loss so far and (rank 0) every task's dev scores, as one metrics line;
    each task's evaluation is offered to its selection."""
    trainer, sampler = fit.trainer, fit.sampler
    record = {**trainer.metrics(), "epoch": round(
        sampler.epoch + sampler.position / sampler.steps_per_epoch, 4)}
    shown = ["loss"]
    if trainer.rt.is_main:
        for t, data in tasks.items():
            view = fit.model.view(t)
            preds = dev_predictions(view, tok, data, cfgs[t])
            dev = scores(data, preds)
            record.update({f"{t}_{split}_{m}": v for split, res in dev.items()
                           for m, v in res.items()})
            sel = fit.selections.of[t]
            shown.append(f"{t}_{sel.split}_{sel.metric}")
            sel.offer({"step": trainer.step, "epoch": record["epoch"], "loss": record["loss"],
                       "dev": dev}, view, preds)
    trainer.log(record, show=tuple(shown))


def fit(state: MultiFit, tok: Any, tasks: dict[str, TaskData],
        cfgs: dict[str, FinetuneConfig], cfg: FinetuneConfig) -> None:
    """Train to the last step: each step one task's global batch (each process its rows,
    micro-batches cut to their longest row, the loss the task's mean over the batch);
    every task evaluated at each epoch's end (and every ``eval_every`` steps), checkpoints at
    the end of every epoch (or every ``save_every`` steps)."""
    trainer, sampler, rt = state.trainer, state.sampler, state.trainer.rt
    per_rank = cfg.batch_size // rt.world_size
    micro = per_rank // cfg.grad_accum
    with trainer.running(total=state.total):
        if trainer.log_due:
            validate(state, tok, tasks, cfgs)
        while trainer.step < state.total:
            task, index = sampler.next()
            train, data = state.train[task], tasks[task]
            mine = {k: v[index[rt.rank * per_rank : (rt.rank + 1) * per_rank]]
                    for k, v in train.items()}
            denom = data.head.denominator(train["labels"], index, cfg.batch_size)

            def micro_step(step_model: nn.Module, j: int, b: dict[str, torch.Tensor] = mine,
                           denom: int = denom, task: str = task,
                           data: TaskData = data) -> tuple[torch.Tensor, dict]:
                rows = micro_rows(b, j, micro, rt.device)
                logits = step_model(rows["input_ids"], rows["attention_mask"],
                                    rows["token_type_ids"], task=task)
                return data.head.loss(logits, rows["labels"], data) / denom, {}

            if trainer.train_step(micro_step, train["attention_mask"][index].sum()) is None:
                continue
            for selection in state.selections.of.values():
                selection.stepped()
            if sampler.epoch_done or trainer.every(cfg.eval_every):
                validate(state, tok, tasks, cfgs)
            trainer.advance()
            end = trainer.every(cfg.save_every) if cfg.save_every else sampler.epoch_done
            if end and trainer.step < state.total:
                trainer.save()


def finetune_multi(source: ModelSource, tok: Any, tasks: dict[str, TaskData],
                   cfgs: dict[str, FinetuneConfig], cfg: FinetuneConfig, seed: int,
                   rt: Runtime, folder: Path | None = None, resume: Path | None = None,
                   progress: bool = False) -> tuple[dict[str, nn.Module], Selections, int]:
    """One seed: train, then each task's kept model as a single-task model (rank 0; other
    ranks get {}); with the selections and the count of skipped steps."""
    state = setup(source, tok, tasks, cfgs, cfg, seed, rt, folder, resume, progress)
    fit(state, tok, tasks, cfgs, cfg)
    models: dict[str, nn.Module] = {}
    if rt.is_main:
        for t, data in tasks.items():
            model = data.head.build(source.config, data.labels, data.regression,
                                    rt.model_kernels(cfg.unpad))
            model.load_state_dict(state.model.view(t).state_dict())
            state.selections.of[t].restore(model)
            models[t] = model.to(rt.device)
    return models, state.selections, state.trainer.skips
