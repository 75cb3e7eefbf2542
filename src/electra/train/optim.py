"""The optimizer (AdamW, StableAdamW, LAMB, or Muon with AdamW) with BERT's parameter groups,
layer-wise learning-rate decay, and the schedule.

Layer-wise decay (fine-tuning), applied as the ELECTRA paper describes (the original code's
off-by-one gives the top layer decay²): the task head and the top layer train at the full
rate, each layer below is multiplied by the decay once more, and the embeddings sit one step
below layer 0.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from electra.config import decay_start


def no_decay(name: str, p: torch.Tensor) -> bool:
    """Biases and LayerNorm weights (every 1-d tensor) take no weight decay."""
    return p.ndim < 2 or name.endswith(".bias")


def by_muon(name: str, p: torch.Tensor) -> bool:
    """The matrices Muon steps (``train.optimizer=muon``): every 2-d weight inside the
    encoders' blocks (attention's fused QKV and output, the feed-forward's), as Muon's
    reference implementations split a model (Jordan et al. 2024; Moonshot's "Muon is
    Scalable"); the embeddings, the heads and every 1-d tensor go to AdamW."""
    return p.ndim == 2 and ".layers." in f".{name}"


def param_groups(model: nn.Module, weight_decay: float,
                 muon: bool = False) -> list[dict[str, Any]]:
    """Two groups: with and without weight decay; each shared tensor appears once.
    ``muon``: a third, first, of the matrices Muon steps (:func:`by_muon`, with decay)."""
    decay: list[nn.Parameter] = []
    plain: list[nn.Parameter] = []
    matrices: list[nn.Parameter] = []
    for name, p in model.named_parameters():  # named_parameters() skips shared duplicates
        if p.requires_grad:
            (matrices if muon and by_muon(name, p) else plain if no_decay(name, p)
             else decay).append(p)
    groups = [{"params": decay, "weight_decay": weight_decay, "muon": False},
              {"params": plain, "weight_decay": 0.0, "muon": False}]
    return [{"params": matrices, "weight_decay": weight_decay, "muon": True}, *groups] \
        if muon else [{k: v for k, v in g.items() if k != "muon"} for g in groups]


def layer_depth(name: str, num_layers: int) -> int:
    """0 for embeddings, i+1 for block i, num_layers+1 for the task head."""
    if name.startswith("encoder.embeddings"):  # also encoder.embeddings_project
        return 0
    if name.startswith("encoder.layers."):
        return int(name.split(".")[2]) + 1
    return num_layers + 1


def layerwise_groups(model: nn.Module, lr: float, decay: float,
                     weight_decay: float, muon: bool = False) -> list[dict[str, Any]]:
    """One group per (depth, decay-or-not) of an encoder + head: lr * decay ** max(0, L - depth);
    frozen parameters are left out. ``muon``: each depth's matrices Muon steps
    (:func:`by_muon`) in a group of their own."""
    L = model.config.num_layers  # type: ignore[union-attr]
    groups: dict[tuple[int, bool, bool], dict[str, Any]] = {}
    for name, p in model.named_parameters():
        if not p.requires_grad:  # frozen (a probe's encoder)
            continue
        depth = layer_depth(name, L)
        plain = no_decay(name, p)
        matrix = muon and by_muon(name, p)
        g = groups.setdefault((depth, plain, matrix), {
            "params": [], "lr": lr * decay ** max(0, L - depth),
            "weight_decay": 0.0 if plain else weight_decay, "depth": depth,
            **({"muon": matrix} if muon else {})})
        g["params"].append(p)
    return list(groups.values())


def adamw(groups: list[dict[str, Any]], lr: float, betas: tuple[float, float] = (0.9, 0.999),
          eps: float = 1e-6) -> torch.optim.AdamW:
    """torch's AdamW, fused on every device (on a CPU it steps ELECTRA-Small in 12 ms against
    foreach's 34, AMD EPYC Zen 4); ``lr`` for groups without their own."""
    return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=eps, fused=True)


def make_optimizer(name: str, groups: list[dict[str, Any]], lr: float,
                   betas: tuple[float, float], eps: float) -> torch.optim.Optimizer:
    """``name``'s optimizer over ``groups`` (each group's own weight decay and rate), with
    the run's betas and epsilon; weight decay decoupled from the gradient in all three. Its
    whole state (moments, step counts) is in ``state_dict()``, as AdamW's."""
    if name == "adamw":
        return adamw(groups, lr, betas, eps)
    if name == "muon":
        return MuonAdamW(groups, lr, betas, eps)
    # pytorch-optimizer imports its ~100 optimizers at once (seconds): only when chosen
    from pytorch_optimizer import Lamb, StableAdamW

    if name == "stableadamw":  # fp32 weights: no Kahan summation to do
        return StableAdamW(groups, lr=lr, betas=betas, eps=eps, kahan_sum=False)
    return Lamb(groups, lr=lr, betas=betas, eps=eps)


class MuonAdamW(torch.optim.Optimizer):
    """torch's Muon on the groups marked ``"muon": True`` (:func:`by_muon`'s matrices), torch's
    AdamW on the others, as one optimizer: one schedule (LambdaLR sets every group's rate),
    one ``state_dict`` in torch's format (so checkpoints, resume and FSDP's sharded state
    work as for AdamW).

    Rate scaling: Muon's update is orthogonalized and scaled by Moonshot's
    ``match_rms_adamw`` (``0.2 * sqrt(max(A, B))`` for an A x B matrix) so that its RMS
    matches AdamW's and the run's ``lr`` and ``weight_decay`` serve both parts, as
    "Muon is Scalable for LLM Training" (arXiv 2502.16982) recommends; momentum 0.95,
    Nesterov, 5 Newton-Schulz steps (torch's defaults). Under FSDP2 a matrix is a sharded
    DTensor and the Newton-Schulz products run on the whole matrix (DTensor's rules), so
    every rank steps as one process would."""

    def __init__(self, groups: list[dict[str, Any]], lr: float, betas: tuple[float, float],
                 eps: float) -> None:
        muon = [g for g in groups if g.get("muon")]
        plain = [g for g in groups if not g.get("muon")]
        # the parts keep their own group keys; this optimizer holds the same group dicts
        self._muon = torch.optim.Muon(muon, lr=lr, adjust_lr_fn="match_rms_adamw") \
            if muon else None
        self._adamw = torch.optim.AdamW(plain, lr=lr, betas=betas, eps=eps, fused=True) \
            if plain else None
        super().__init__([*(self._muon.param_groups if self._muon else []),
                          *(self._adamw.param_groups if self._adamw else [])], {"lr": lr})
        self._share()

    def _share(self) -> None:
        """The parts read this optimizer's groups and state (one dict each, disjoint
        parameters): what load_state_dict rebuilds, they see."""
        parts = [p for p in (self._muon, self._adamw) if p is not None]
        for part in parts:
            part.state = self.state
        if self._muon is not None:
            self._muon.param_groups = [g for g in self.param_groups if g.get("muon")]
        if self._adamw is not None:
            self._adamw.param_groups = [g for g in self.param_groups if not g.get("muon")]

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        # the groups come built from the parts (their defaults filled): keep them as they are
        self.param_groups.append(param_group)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        super().load_state_dict(state_dict)
        self._share()

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for part in (self._muon, self._adamw):
            if part is not None:
                part.step()
        return loss


def clip_grad_norm(params: list[torch.Tensor], max_norm: float) -> torch.Tensor:
    """torch's ``clip_grad_norm_`` (L2, bitwise the same norm and scaling) in a fixed number of
    ops: one multi-tensor norm, one multi-tensor scale. torch's own moves each tensor's norm to
    the first one's device, one op per parameter (402 of ELECTRA-Small's 4,485 ops a step:
    bench/op_count.py). A trainer's gradients share one device and dtype (fp32 masters);
sharded (DTensor, FSDP's: all or none) ones go to torch's."""
    grads = [p.grad for p in params if p.grad is not None]
    if not grads or hasattr(grads[0], "full_tensor"):
        return torch.nn.utils.clip_grad_norm_(params, max_norm)
    with torch.no_grad():
        total = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads, 2.0)), 2.0)
        torch._foreach_mul_(grads, torch.clamp(max_norm / (total + 1e-6), max=1.0))
    return total


SCHEDULES = ("linear", "cosine", "wsd")


def schedule(name: str, warmup_steps: int, max_steps: int, decay_fraction: float = 0.1,
             decay_steps: int = 0, decay_shape: str = "linear") -> Callable[[int], float]:
    """Multiplier of the peak rate at a step, after a linear warmup from 0 over
    ``warmup_steps``: ``linear`` decays to 0 at ``max_steps`` (ELECTRA's); ``cosine`` along
    half a cosine to 0; ``wsd`` (warmup-stable-decay, ModernBERT's trapezoid) holds the peak,
    then decays to 0 over the last ``decay_fraction`` of the steps (the stable phase's rate
    does not depend on where the run ends, so any of its checkpoints can be decayed from), or
    over the last ``decay_steps`` where that is set: linearly, or as ``1 - sqrt(done)``
    (``decay_shape="1-sqrt"``, ModernBERT's), ``done`` the decay's fraction behind."""
    if name == "linear":
        return warmup_linear(warmup_steps, max_steps)
    decay_from = (decay_start(max_steps, decay_steps, decay_fraction) if name == "wsd"
                  else warmup_steps)

    def f(step: int) -> float:
        if step < warmup_steps:
            return step / max(1, warmup_steps)
        if step < decay_from:
            return 1.0
        done = min(1.0, (step - decay_from) / max(1, max_steps - decay_from))
        if name == "cosine":
            return 0.5 * (1.0 + math.cos(math.pi * done))
        return 1.0 - (math.sqrt(done) if decay_shape == "1-sqrt" else done)

    return f


def warmup_linear(warmup_steps: int, max_steps: int) -> Callable[[int], float]:
    """Multiplier of the peak rate at a step: 0 -> 1 over warmup, then 1 -> 0 at max_steps."""

    def f(step: int) -> float:
        if step < warmup_steps:
            return step / max(1, warmup_steps)
        return max(0.0, (max_steps - step) / max(1, max_steps - warmup_steps))

    return f


class BatchSizes:
    """The global batch of each step: the warmup's sizes (``warm``), then ``batch_size``."""

    def __init__(self, warm: list[int], batch_size: int) -> None:
        self.warm, self.batch_size = warm, batch_size

    def __call__(self, step: int) -> int:
        return self.warm[step] if step < len(self.warm) else self.batch_size


def batch_sizes(start: int, tokens: int, batch_size: int, unit: int,
                seq_len: int) -> BatchSizes:
    """The global batch of each step (0-based) under batch-size warmup (ModernBERT's): it
    grows linearly, in the token positions trained so far, from ``start`` to ``batch_size``
    over ``tokens``, rounded down to whole micro-batches of ``unit`` examples (every step is
    ``k`` micro-batches, k from start/unit to batch_size/unit: a smaller step is a shorter
    accumulation). No warmup (``start`` 0): ``batch_size`` at every step."""
    warm: list[int] = []
    seen = 0
    while start and seen < tokens:
        grown = start + (batch_size - start) * seen / tokens
        b = max(start, min(batch_size, int(grown) // unit * unit))
        warm.append(b)
        seen += b * seq_len
    return BatchSizes(warm, batch_size)


def steps_for_tokens(sizes: BatchSizes, max_tokens: int, seq_len: int) -> int:
    """The steps ``max_tokens`` token positions take with the batches ``sizes`` gives
    (the last one counted whole): the warmup's steps, then full batches."""
    steps = seen = 0
    for b in sizes.warm:
        if seen >= max_tokens:
            return steps
        seen, steps = seen + b * seq_len, steps + 1
    return steps + max(0, -(-(max_tokens - seen) // (sizes.batch_size * seq_len)))


def phase_starts(fractions: list[float], max_steps: int) -> list[int]:
    """The first step (0-based) of each phase that takes ``fractions`` of ``max_steps`` in
    turn (train.phases)."""
    starts, done = [], 0.0
    for f in fractions:
        starts.append(round(done * max_steps))
        done += f
    return starts
