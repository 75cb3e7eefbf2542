"""AdamW with BERT's parameter groups, and the warmup-then-linear-decay schedule."""

from __future__ import annotations

import torch
from torch import nn

from electra.config import TrainConfig


def no_decay(name: str, p: torch.Tensor) -> bool:
    """Biases and LayerNorm weights (every 1-d tensor) take no weight decay."""
    return p.ndim < 2 or name.endswith(".bias")


def param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Two groups: with and without weight decay; each shared tensor appears once."""
    decay, plain = [], []
    for name, p in model.named_parameters():  # named_parameters() skips shared duplicates
        if p.requires_grad:
            (plain if no_decay(name, p) else decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay},
            {"params": plain, "weight_decay": 0.0}]


def build_optimizer(model: nn.Module, cfg: TrainConfig) -> torch.optim.AdamW:
    """torch's AdamW (fused on GPU, foreach on CPU) with the config's betas and epsilon."""
    device = next(model.parameters()).device
    kwargs = {"fused": True} if device.type == "cuda" else {"foreach": True}
    return torch.optim.AdamW(param_groups(model, cfg.weight_decay), lr=cfg.lr,
                             betas=(cfg.adam_beta1, cfg.adam_beta2), eps=cfg.adam_eps,
                             **kwargs)


def warmup_linear(warmup_steps: int, max_steps: int):
    """Multiplier of the peak rate at a step: 0 -> 1 over warmup, then 1 -> 0 at max_steps."""

    def f(step: int) -> float:
        if step < warmup_steps:
            return step / max(1, warmup_steps)
        return max(0.0, (max_steps - step) / max(1, max_steps - warmup_steps))

    return f


def build_scheduler(opt: torch.optim.Optimizer,
                    cfg: TrainConfig) -> torch.optim.lr_scheduler.LambdaLR:
    return torch.optim.lr_scheduler.LambdaLR(
        opt, warmup_linear(cfg.warmup_steps, cfg.max_steps))
