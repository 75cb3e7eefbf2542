"""Linear layers' weights cast once a micro-batch under autocast, in one op (issue 40's
launch budget; ``train.cast_once``).

Under autocast each linear layer's fp32 weight and bias are cast to the compute dtype
(bf16, fp16) one by one, and its backward casts each gradient back and hands it to autograd's
``AccumulateGrad``; with autograd's addmm backward (its transposes and the bias gradient's
reshape) that is 13 ops a layer a step, 1,300 of ELECTRA-Small's 3,500. Under
:class:`CastOnce`:

- every :class:`~electra.model.layers.Linear` layer's weight and bias are cast in one op
  (``torch._foreach_copy_`` into compute-dtype copies kept between steps), and their
  gradients written into the fp32 ``.grad`` in one op (two when gradients accumulate);
- each layer runs the model's ``_Linear``, whose backward is the three products and the bias
  sum that autograd's addmm backward computes (``g @ W``, ``g^T @ x``, ``g.sum(0)``), on the
  same operands in the same layouts, without the bookkeeping around them.

The arithmetic is autograd's: the same casts, the same GEMM calls, the same reduction, so a
step is bitwise the step without it (``tests/train/test_cast.py``). The gradients bypass
``AccumulateGrad``, whose hooks DDP and FSDP reduce on (a gradient written here is one no
rank's reducer hears of: the ranks' gradients would never be averaged), so the trainer uses
it in one process, eager (torch.compile fuses the casts itself), and only while
``train.cast_once`` is true (its default; off: autocast's own casts). A layer whose weight
is also read elsewhere (DeBERTa's query/key rows for the position terms) sets
``castable = False``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn

from electra.model.layers import Linear


class _Cast(torch.autograd.Function):
    """The plan's fp32 parameters -> its kept compute-dtype copies, in one op; backward
    writes their gradients into the parameters' ``.grad`` (and returns none to autograd)."""

    @staticmethod
    def forward(ctx, plan: CastOnce, *params: torch.Tensor):  # type: ignore[override]
        torch._foreach_copy_(plan.low, list(params))
        ctx.plan = plan
        ctx.set_materialize_grads(False)  # a layer left unused keeps no gradient (None)
        return tuple(plan.low)

    @staticmethod
    def backward(ctx, *grads: torch.Tensor | None):  # type: ignore[override]
        ctx.plan.accumulate(grads)
        return (None,) * (len(grads) + 1)


class CastOnce:
    """The :class:`Linear` layers of ``model`` with trainable weights, cast to ``dtype`` once
    a micro-batch (``with plan():`` around its forward and backward)."""

    def __init__(self, model: nn.Module, dtype: torch.dtype) -> None:
        self.layers = [m for m in model.modules() if isinstance(m, Linear) and m.castable
                       and m.weight.requires_grad
                       and (m.bias is None or m.bias.requires_grad)]
        self.params = [p for m in self.layers for p in (m.weight, m.bias) if p is not None]
        assert len({id(p) for p in self.params}) == len(self.params), "a shared weight"
        with torch.no_grad():
            self.low = [torch.empty_like(p, dtype=dtype) for p in self.params]
            self.high = [torch.empty_like(p) for p in self.params]  # the .grad tensors

    @contextlib.contextmanager
    def __call__(self) -> Iterator[None]:
        low = iter(_Cast.apply(self, *self.params))
        try:
            for m in self.layers:
                m.cast = (next(low), next(low) if m.bias is not None else None)
            yield
        finally:
            for m in self.layers:
                m.cast = None

    def accumulate(self, grads: tuple[torch.Tensor | None, ...]) -> None:
        """``p.grad += g`` for every gradient (``p.grad = g`` where there is none yet, into
        the kept fp32 tensors) as ``AccumulateGrad`` would, in one op per kind."""
        fresh: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []
        adds: list[tuple[torch.Tensor, torch.Tensor]] = []
        for p, g, high in zip(self.params, grads, self.high, strict=True):
            if g is None:
                continue
            if p.grad is None:
                fresh.append((p, g, high))
            else:
                adds.append((p.grad, g))
        if fresh:
            torch._foreach_copy_([h for _, _, h in fresh], [g for _, g, _ in fresh])
            for p, _, high in fresh:
                p.grad = high
        if adds:
            torch._foreach_add_([a for a, _ in adds], [g for _, g in adds])


def cast_once(model: nn.Module, rt: Any, settings: Any,
              precision: str) -> Callable[[], contextlib.AbstractContextManager[Any]]:
    """What each micro-batch runs under besides autocast: the linear layers' weights cast
    once, their gradients written in one op, while the loop's ``cast_once``, in one process
    (``rt.enabled``: DDP or FSDP), eager (not ``settings.compiled``), under a 16-bit
    autocast; nothing otherwise."""
    if (settings.loop.cast_once and precision in ("bf16", "fp16") and not rt.enabled
            and not settings.compiled):
        plan = CastOnce(model, torch.bfloat16 if precision == "bf16" else torch.float16)
        if plan.params:
            return plan
    return contextlib.nullcontext
