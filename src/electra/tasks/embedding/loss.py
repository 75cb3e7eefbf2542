"""InfoNCE, the embedding family's loss object (sentence-transformers'
MultipleNegativesRankingLoss, CLIP's learned temperature): what training an embedding model
adds to it and what its export leaves out.

Each query's similarities to every positive and hard negative of its micro-batch, on every
rank (gathered with their gradients: N processes see the negatives one process sees),
scaled by 1 / temperature, then cross-entropy towards its own positive. The temperature is
fixed (``temperature``) or learned from it (``learn_temperature``: CLIP's log-scale, stopped
at 0.01); it is a weight of the run (kept in its checkpoints, so a resumed run goes on
bitwise) and not of the model it trains (``electra.tasks.embedding.head.EmbeddingModel``).
"""

from __future__ import annotations

import math

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

MAX_SCALE = math.log(100.0)  # a learned temperature stops at 0.01 (CLIP's bound)


class InfoNCE(nn.Module):
    """``forward`` on (B, K, H) embeddings of B rows (a query, then its K - 1 documents)
    returns the (B, W * B * (K - 1)) scaled similarities of every query to every rank's
    documents (this rank's positives first, so a query's target is its row); :meth:`loss`
    the summed cross-entropy of those logits. With Matryoshka ``dims`` (sentence-
    transformers' MatryoshkaLoss, weight 1 each), (1 + len(dims), B, ...) logits: the whole
    embeddings', then those of each one's first d dimensions (renormalised where
    ``normalize``: cosines again)."""

    def __init__(self, temperature: float = 0.05, learn_temperature: bool = False,
                 dims: tuple[int, ...] = (), normalize: bool = True) -> None:
        super().__init__()
        # log(1 / temperature), CLIP's parametrisation: learned, or fixed (no gradient)
        self.log_scale = nn.Parameter(torch.tensor(math.log(1.0 / temperature)),
                                      requires_grad=learn_temperature)
        self.dims, self.normalize = tuple(dims), normalize

    def forward(self, e: torch.Tensor) -> torch.Tensor:
        if not self.dims:
            return self._logits(e)
        cut = [e[..., :d] for d in self.dims]
        return torch.stack([self._logits(e), *(self._logits(
            F.normalize(c, dim=-1) if self.normalize else c) for c in cut)])

    def _logits(self, e: torch.Tensor) -> torch.Tensor:
        B = e.shape[0]
        docs = e[:, 1:].transpose(0, 1).reshape(-1, e.shape[-1])  # positives, negatives
        scale = self.log_scale.clamp(max=MAX_SCALE).exp()
        return scale * (e[:, 0] @ every_ranks(docs, B).T)

    @staticmethod
    def loss(logits: torch.Tensor) -> torch.Tensor:
        """Summed InfoNCE: each query's row of similarities towards its own positive (the
        row's index: positives come first, in the rows' order); Matryoshka's (D, B, N)
        logits: summed over the D dimensions too."""
        rows = logits.reshape(-1, logits.shape[-1])
        target = torch.arange(logits.shape[-2], device=logits.device).repeat(
            len(rows) // logits.shape[-2])
        return F.cross_entropy(rows.float(), target, reduction="sum")

    def temperature(self) -> float:
        return float(1.0 / self.log_scale.detach().clamp(max=MAX_SCALE).exp())


def every_ranks(docs: torch.Tensor, B: int) -> torch.Tensor:
    """Training under several processes: every rank's documents of this micro-batch, this
    rank's positives first (a query's target stays its row), with their gradients flowing
    back to the rank that made them, so N processes see the negatives one process sees; one
    process: ``docs`` itself."""
    if not (torch.is_grad_enabled() and dist.is_available() and dist.is_initialized()
            and dist.get_world_size() > 1):
        return docs
    from torch.distributed.nn.functional import all_gather  # autograd's, where ranks run

    every = all_gather(docs.contiguous())
    me = dist.get_rank()
    own, others = every[me], [d for r, d in enumerate(every) if r != me]
    return torch.cat([own[:B], *(d[:B] for d in others), own[B:], *(d[B:] for d in others)])
