"""The hardware paths of the model: dropout and attention, chosen once for a device.

Two entries. ``FAST_CPU`` is what CPU training runs: dropout masks cut from 64-bit random
words, four 16-bit lanes each (each element dropped with probability round(p * 65536) /
65536, 0.1 -> 0.100006, kept ones scaled by 1 / (1 - that)); one RNG draw serves four
elements, which makes masks ~7x cheaper than torch's Bernoulli ones, and those cost ~1/10 of
a CPU training step. Attention with dropout is written out, softmax(q k^T / sqrt(hs) + mask)
v with lane dropout on the probabilities: SDPA falls back to its math kernel there anyway,
and that kernel's Bernoulli masks cost ~8% of a CPU step (bench/RESULTS.md). ``REFERENCE`` is
torch's own: ``F.dropout`` and SDPA with its dropout (fused kernels on a GPU).

:func:`kernels_for` picks the entry for a device (the runtime asks once; the model is built
with it); this module is the only one that looks at a device's type. Without dropout, and in
evaluation, both entries run SDPA and agree.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F


def lane_dropout(x: torch.Tensor, p: float) -> torch.Tensor:
    """Training-mode dropout of ``x`` with masks cut from 16-bit lanes (CPU tensors)."""
    threshold = round(p * 65536) - 32768  # keep where the int16 lane >= this
    scale = 1.0 / (1.0 - round(p * 65536) / 65536)
    n = x.numel()
    words = torch.empty((n + 3) // 4, dtype=torch.int64).random_(-(2**63), 2**63 - 1)
    keep = words.view(torch.int16)[:n].view(x.shape) >= threshold
    return x.mul(keep).mul_(scale)


def torch_dropout(x: torch.Tensor, p: float) -> torch.Tensor:
    """Training-mode dropout, torch's Bernoulli masks."""
    return F.dropout(x, p, True)


def written_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                      attn_mask: torch.Tensor | None, dropout: torch.nn.Module
                      ) -> torch.Tensor:
    """softmax(q k^T / sqrt(hs) + mask) v with ``dropout`` on the probabilities:
    (B, nh, T, hs). The products run in the input dtype (bf16 under autocast), the softmax in
    fp32. ``attn_mask`` (B, 1, 1, T) bool, True on keys to attend."""
    scores = (q * q.shape[-1] ** -0.5) @ k.transpose(-2, -1)  # (B, nh, T, T)
    if attn_mask is not None:
        scores = scores.masked_fill(~attn_mask, float("-inf"))
    probs = dropout(torch.softmax(scores, -1, dtype=torch.float32))
    return probs.to(v.dtype) @ v


@dataclass(frozen=True)
class Kernels:
    """How the model drops out and attends. ``written_attention``: attention with dropout in
    training runs :func:`written_attention` with the block's own dropout (else SDPA)."""

    name: str
    dropout: Callable[[torch.Tensor, float], torch.Tensor]  # training-mode dropout of x at p
    written_attention: bool

    def attention(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                  attn_mask: torch.Tensor | None, p: float,
                  dropout: torch.nn.Module) -> torch.Tensor:
        """Attention (B, nh, T, hs) with dropout ``p`` on the probabilities (0: none)."""
        if p > 0 and self.written_attention:
            return written_attention(q, k, v, attn_mask, dropout)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=p)


FAST_CPU = Kernels("fast-cpu", lane_dropout, written_attention=True)
REFERENCE = Kernels("reference", torch_dropout, written_attention=False)
KERNELS = {k.name: k for k in (FAST_CPU, REFERENCE)}


def kernels_for(device: torch.device | str) -> Kernels:
    """The entry for ``device``: the fast CPU path on a CPU, torch's own elsewhere."""
    return FAST_CPU if torch.device(device).type == "cpu" else REFERENCE


def use(module: torch.nn.Module, kernels: Kernels) -> None:
    """Switch a built model to other kernels (an ablation timing both on one model; a model
    is otherwise built with its kernels)."""
    for m in module.modules():
        if isinstance(getattr(m, "kernels", None), Kernels):
            m.kernels = kernels
