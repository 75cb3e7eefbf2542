"""The cached contrastive loss (GradCache: Gao et al. 2021, arXiv 2101.06983; sentence-
transformers' CachedMultipleNegativesRankingLoss): InfoNCE over a whole batch, every
micro-batch's documents (and every rank's) the negatives of every query, at the memory of one
micro-batch.

One optimizer step of ``grad_accum`` micro-batches runs in two passes. First every
micro-batch is embedded without a graph (each one's random state kept, so dropout draws the
same masks again), the loss is taken over all of them at once, and its gradient with respect
to each embedding (and to a learned temperature) is kept. Then each micro-batch is embedded
again, with its graph, and back-propagates ``sum(embedding * its kept gradient)``: the
parameters' gradients are the whole batch's loss's, as if it had fit in memory (equal to the
uncached loss over one micro-batch of the whole batch within 1e-5, fp32: tested), for one
more forward pass. Under several processes the first pass gathers every rank's embeddings
(the gradient flowing back to the rank that made them) as the uncached loss does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from electra.tasks.embedding.loss import InfoNCE

Rows = Callable[[int], dict[str, torch.Tensor]]


def _rng(rt: Any) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The random state dropout draws from: torch's generator and the accelerator's."""
    return torch.get_rng_state(), rt.device_rng_state()


def _set_rng(state: tuple[torch.Tensor, dict[str, torch.Tensor]], rt: Any) -> None:
    torch.set_rng_state(state[0])
    rt.set_device_rng_state(state[1])


class CachedStep:
    """The micro-steps (``electra.train.trainer.MicroStep``) of one optimizer step over
    ``n`` micro-batches ``rows(j)``, with the loss of the whole batch: micro-step 0 runs the
    first pass; each returns its surrogate (whose gradient is the whole loss's share of that
    micro-batch) valued at an n-th of the whole loss, so the step's logged loss is the
    loss's. ``criterion``: the task's InfoNCE object; ``denom``: what the loss is averaged
    over; ``rt``: the runtime (its device's random state); ``which``: the model's task
    argument (a multi-task model)."""

    def __init__(self, rows: Rows, n: int, denom: int, criterion: nn.Module,
                 rt: Any, which: dict[str, str]) -> None:
        self.rows, self.n, self.denom, self.criterion = rows, n, denom, criterion
        self.rt, self.which = rt, which
        self.states: list[tuple[torch.Tensor, dict[str, torch.Tensor]]] = []
        self.grads: list[torch.Tensor] = []
        self.param_grads: list[tuple[nn.Parameter, torch.Tensor]] = []
        self.loss = torch.zeros(())

    def _embed(self, model: nn.Module, j: int) -> torch.Tensor:
        b = self.rows(j)
        return model(b["input_ids"], b["attention_mask"], b["token_type_ids"], embed=True,
                     **self.which)

    def _first_pass(self, model: nn.Module) -> None:
        chunks = []
        with torch.no_grad():
            for j in range(self.n):
                self.states.append(_rng(self.rt))
                chunks.append(self._embed(model, j))
        after = _rng(self.rt)
        e = torch.cat(chunks).detach().requires_grad_()
        params = [p for p in self.criterion.parameters() if p.requires_grad]
        loss = InfoNCE.loss(self.criterion(e)) / self.denom
        grads = torch.autograd.grad(loss, [e, *params])
        self.grads = list(grads[0].split([len(c) for c in chunks]))
        self.param_grads = list(zip(params, grads[1:], strict=True))
        self.loss = loss.detach()
        _set_rng(after, self.rt)

    def __call__(self, model: nn.Module, j: int) -> tuple[torch.Tensor, dict[str, Any]]:
        if j == 0:
            self._first_pass(model)
        after = _rng(self.rt)
        _set_rng(self.states[j], self.rt)  # the first pass's dropout masks again
        e = self._embed(model, j)
        _set_rng(after, self.rt)
        surrogate = (e.float() * self.grads[j].float()).sum()
        if j == self.n - 1:  # a learned temperature's gradient, once (DDP syncs this one)
            for p, g in self.param_grads:
                surrogate = surrogate + (p * g).sum()
        return surrogate - surrogate.detach() + self.loss / self.n, {}
