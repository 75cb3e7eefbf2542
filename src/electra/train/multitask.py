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
