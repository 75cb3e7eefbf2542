"""The model of a multi-task fine-tune (google-research/electra's ``task_names`` list,
MT-DNN's recipe): one encoder, one head per task; each task's model (the encoder + its head)
is an ordinary fine-tuned model's. Trained by the one fine-tuning loop,
``electra.train.finetuning``, which draws each step's task.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


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
        for name, param in model.named_parameters(recurse=False):  # a head's own (a scale)
            self.register_parameter(name, param)
        for name, child in model.named_children():
            self.add_module(name, child)

    def forward(self, *args: Any) -> torch.Tensor:
        return self.model[0](*args)


class WithLosses(nn.Module):
    """What a fine-tune trains when a head has a loss object with weights of its own
    (``Head.criterion``: the embedding family's InfoNCE and its learned temperature): the
    model's submodules and weights under their own names, each loss object's beside them
    (one task's at the top, as ``log_scale``; several tasks' under ``losses.TASK``), so DDP,
    the optimizer and the checkpoints hold both. ``forward`` is the task's loss object's of
    the model's output. What is kept, saved and exported is the model alone (``model``)."""

    def __init__(self, model: nn.Module, losses: dict[str, nn.Module], single: bool) -> None:
        super().__init__()
        self.config = model.config
        self.inner = [model]  # not a submodule: its children are registered below
        self.criteria = dict(losses)  # each task's (registered below)
        for name, param in model.named_parameters(recurse=False):
            self.register_parameter(name, param)
        for name, child in model.named_children():
            self.add_module(name, child)
        if single:
            (loss,) = losses.values()
            for name, param in loss.named_parameters(recurse=False):
                self.register_parameter(name, param)
            for name, child in loss.named_children():
                self.add_module(name, child)
        else:
            self.losses = nn.ModuleDict(losses)
            self._register_load_state_dict_pre_hook(self._moved)

    @property
    def model(self) -> nn.Module:
        return self.inner[0]

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None, task: str = "",
                embed: bool = False) -> torch.Tensor:
        """The loss object's input from the model's output (``embed``: the output itself,
        for a head's own micro-steps, ``electra.tasks.embedding.cache``)."""
        which = {"task": task} if task else {}
        out = self.inner[0](input_ids, attention_mask, token_type_ids, **which)
        loss = self.criteria.get(task) if task else next(iter(self.criteria.values()))
        return out if loss is None or embed else loss(out)

    def view(self, task: str) -> nn.Module:
        return self.inner[0].view(task)  # type: ignore[operator]

    def _moved(self, state: dict[str, Any], prefix: str, *_: Any) -> None:
        """A checkpoint written while a task's loss weights sat in its head
        (``heads.TASK.log_scale``) resumes: they are this module's ``losses.TASK.*``."""
        for task, loss in self.criteria.items():
            for name in loss.state_dict():
                old, new = f"{prefix}heads.{task}.{name}", f"{prefix}losses.{task}.{name}"
                if old in state and new not in state:
                    state[new] = state.pop(old)
