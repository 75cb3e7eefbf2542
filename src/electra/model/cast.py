"""Linear layers' weights cast once a micro-batch under autocast, in one op (issue 40's
launch budget).

Under autocast each linear layer's fp32 weight and bias are cast to the compute dtype
(bf16, fp16) one by one, and its backward casts each gradient back and hands it to autograd's
``AccumulateGrad``; with autograd's addmm backward (its transposes and the bias gradient's
reshape) that is 13 ops a layer a step, 1,300 of ELECTRA-Small's 3,500. Under
:class:`CastOnce`:

- every :class:`Linear` layer's weight and bias are cast in one op
  (``torch._foreach_copy_`` into compute-dtype copies kept between steps), and their
  gradients written into the fp32 ``.grad`` in one op (two when gradients accumulate);
- each layer runs :class:`_Linear`, whose backward is the three products and the bias sum
  that autograd's addmm backward computes (``g @ W``, ``g^T @ x``, ``g.sum(0)``), on the
  same operands in the same layouts, without the bookkeeping around them.

The arithmetic is autograd's: the same casts, the same GEMM calls, the same reduction, so a
step is bitwise the step without it (``tests/model/test_cast.py``). The gradients bypass
``AccumulateGrad``, whose hooks DDP and FSDP reduce on: the trainer uses it in one process,
eager (torch.compile fuses the casts itself). A layer whose weight is also read elsewhere
(DeBERTa's query/key rows for the position terms) sets ``castable = False``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
import torch.nn.functional as F
from torch import nn


class Linear(nn.Linear):
    """``nn.Linear`` that runs on the compute-dtype copies of its weights while a
    :class:`CastOnce` holds them (``cast``), and as ``nn.Linear`` otherwise."""

    cast: tuple[torch.Tensor, torch.Tensor | None] | None = None
    castable = True  # False: the weight is read elsewhere too (kept on autocast's path)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.cast is None:
            return F.linear(x, self.weight, self.bias)
        w, b = self.cast
        if x.dtype != w.dtype:
            x = x.to(w.dtype)  # autocast's cast of the input
        if x.dim() == 2 or (x.dim() > 2 and x.is_contiguous()):
            return _Linear.apply(x, w, b)
        return F.linear(x, w, b)  # aten::linear's other path: matmul, then the bias


class _Linear(torch.autograd.Function):
    """x @ W^T + b, all in the compute dtype, x 2-D or contiguous (which ``aten::linear``
    folds to rows). Backward as autograd's addmm backward computes it (``mm_mat1_backward``,
    ``mm_mat2_backward``: W^T is column-major, so g^T @ x; the bias gradient a sum over
    rows)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, w: torch.Tensor,  # type: ignore[override]
                b: torch.Tensor | None) -> torch.Tensor:
        rows = x if x.dim() == 2 else x.reshape(-1, x.shape[-1])
        ctx.save_for_backward(rows, w)
        ctx.shape, ctx.bias = x.shape, b is not None
        y = F.linear(rows, w, b)  # addmm(b, rows, w^T), or rows @ w^T
        return y if x.dim() == 2 else y.view(*x.shape[:-1], y.shape[-1])

    @staticmethod
    def backward(ctx, g: torch.Tensor):  # type: ignore[override]
        rows, w = ctx.saved_tensors
        if g.dim() != 2:
            g = g.reshape(-1, g.shape[-1])
        need_x, need_w, need_b = ctx.needs_input_grad
        gx = g.mm(w) if need_x else None
        if gx is not None and len(ctx.shape) != 2:
            gx = gx.view(ctx.shape)
        gw = g.t().mm(rows) if need_w else None
        gb = g.sum(0) if ctx.bias and need_b else None
        return gx, gw, gb


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
