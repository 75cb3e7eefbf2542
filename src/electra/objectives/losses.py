"""The losses and statistics the objectives are made of, all in fp32.

Each statistic is a (2,) [numerator, denominator] pair, detached, so that micro-batches,
accumulation steps and processes pool by summing.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def generator_loss(logits: torch.Tensor, targets: torch.Tensor, weights: torch.Tensor,
                   denominator: torch.Tensor | None = None) -> torch.Tensor:
    """L_MLM: cross-entropy (fp32) averaged over the chosen slots only (of the global batch
    when ``denominator`` is given)."""
    return mlm_loss(logits, targets, weights, denominator)[0]


def mlm_loss(logits: torch.Tensor, targets: torch.Tensor, weights: torch.Tensor,
              denominator: torch.Tensor | None
              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """L_MLM of (B, P, V) ``logits``, and, without gradient, what sampling reuses: the
    unnormalised probabilities exp(z - max z) (B, P, V), the rows' max (B, P, 1) and the
    targets' logits (B, P, 1), all fp32."""
    w = weights.flatten().float()
    coef = w / (w.sum() if denominator is None else denominator).clamp(min=1.0)
    loss, e, zmax, target_logit = _WeightedCrossEntropy.apply(
        logits.flatten(0, 1), targets.flatten(), coef)
    shape = (*logits.shape[:-1], 1)
    return loss, e.view(logits.shape), zmax.view(shape), target_logit.view(shape)


class _WeightedCrossEntropy(torch.autograd.Function):
    """sum_i coef_i * CE(z_i, t_i) over rows of (N, V) logits, in fp32.

    The same value and gradient as ``(F.cross_entropy(z.float(), t, reduction="none") *
    coef).sum()``, in fewer passes over the N x V logits: the forward keeps exp(z - max z),
    which the sampler also reuses, and the backward is (softmax - onehot) * coef from it
    instead of log-softmax's backward, which takes exp again (~10% of a CPU step at a
    30,522 vocabulary; bench/RESULTS.md).
    """

    @staticmethod
    def forward(ctx, logits: torch.Tensor, targets: torch.Tensor, coef: torch.Tensor):
        z = logits.detach().to(torch.float32, copy=True)  # (N, V)
        zmax = z.amax(-1, keepdim=True)
        target_logit = z.gather(-1, targets[:, None])
        e = z.sub_(zmax).exp_()  # in place: the copy becomes the unnormalised probabilities
        total = e.sum(-1, keepdim=True)
        ce = (total.log() + zmax - target_logit).squeeze(-1)  # log-sum-exp minus target
        ctx.save_for_backward(e, total, targets, coef)
        ctx.logits_dtype, ctx.used = logits.dtype, False
        ctx.mark_non_differentiable(e, zmax, target_logit)
        return (ce * coef).sum(), e, zmax, target_logit

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad: torch.Tensor, *_):
        if ctx.used:
            raise RuntimeError("the MLM loss's backward ran twice (retain_graph); it turns "
                               "its saved exponentials into the gradient in place")
        ctx.used = True
        e, total, targets, coef = ctx.saved_tensors
        c = (grad * coef)[:, None]  # (N, 1)
        g = e.mul_(c / total)  # softmax * c, in place: no new N x V buffer
        g.scatter_add_(-1, targets[:, None], -c)  # minus c at each target
        return g.to(ctx.logits_dtype), None, None


def discriminator_loss(logits: torch.Tensor, labels: torch.Tensor,
                       attention_mask: torch.Tensor,
                       denominator: torch.Tensor | None = None) -> torch.Tensor:
    """L_disc: BCE-with-logits (fp32) averaged over non-pad tokens (of the global batch when
    ``denominator`` is given); label 1 = replaced."""
    bce = F.binary_cross_entropy_with_logits(logits.float(), labels.float(), reduction="none")
    m = attention_mask.float()
    return (bce * m).sum() / (m.sum() if denominator is None else denominator).clamp(min=1.0)


def copy_mlm_loss(logits: torch.Tensor, copy_logits: torch.Tensor, targets: torch.Tensor,
                   inputs: torch.Tensor, attention_mask: torch.Tensor,
                   denominator: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """All-Tokens MLM with a copy mechanism: -log p(x_i), p(x_i) = D_i·[x_i = input_i] +
    (1 - D_i)·softmax(z_i)[x_i], D_i = sigmoid(-copy_logit_i), averaged over non-pad tokens
    (of the global batch when ``denominator`` is given); and whether the most probable token
    under p is x_i (B, T)."""
    z = logits.float()  # (B, T, V)
    d = copy_logits.float()
    lse = torch.logsumexp(z, -1)  # (B, T)
    z_x = z.gather(-1, targets[..., None]).squeeze(-1)
    same = targets == inputs
    copy = torch.where(same, F.logsigmoid(-d), torch.full_like(d, -torch.inf))
    nll = -torch.logaddexp(copy, F.logsigmoid(d) + z_x - lse)
    m = attention_mask.float()
    loss = (nll * m).sum() / (m.sum() if denominator is None else denominator).clamp(min=1.0)
    with torch.no_grad():  # the mixture's most probable token: the input, or z's argmax
        D = torch.sigmoid(-d)
        zmax, best = z.max(-1)
        z_in = z.gather(-1, inputs[..., None]).squeeze(-1)
        p_in = D + (1 - D) * torch.exp(z_in - lse)
        pred = torch.where(p_in >= (1 - D) * torch.exp(zmax - lse), inputs, best)
    return loss, pred == targets


def pair(numerator: torch.Tensor, denominator: torch.Tensor) -> torch.Tensor:
    """A statistic as a (2,) float tensor [numerator, denominator], detached, so that
    batches, accumulation steps and processes can be pooled by summing."""
    return torch.stack([numerator, denominator]).detach().double()


@torch.no_grad()
def mlm_accuracy(target_logit: torch.Tensor, zmax: torch.Tensor,
                 weights: torch.Tensor) -> torch.Tensor:
    """How often an MLM's most probable token is the original, over the chosen slots: the
    target's logit is the row's largest (ties count as right). (B, P, 1) logits, (B, P)
    weights."""
    return pair(((target_logit >= zmax).squeeze(-1) & weights).sum(), weights.sum())


@torch.no_grad()
def rtd_counts(disc_logits: torch.Tensor, labels: torch.Tensor,
                real: torch.Tensor) -> dict[str, torch.Tensor]:
    """Discriminator accuracy/precision/recall and the replaced fraction, over non-pad."""
    pred = disc_logits.detach() > 0
    tp = (pred & labels & real).sum()
    n_real = real.sum()
    return {"disc_acc": pair(((pred == labels) & real).sum(), n_real),
            "disc_precision": pair(tp, (pred & real).sum()),
            "disc_recall": pair(tp, (labels & real).sum()),
            "replaced_frac": pair((labels & real).sum(), n_real)}
