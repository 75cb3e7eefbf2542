"""Step 3: replacements drawn from the generator (or at random), and x_corrupt.

Always in fp32 and without gradient. Inverse-CDF sampling reuses the MLM loss's exp(z - max
z) at temperature 1, so sampling adds no pass over the (rows x V) logits.
"""

from __future__ import annotations

import torch


@torch.no_grad()
def sample(logits: torch.Tensor, temperature: float = 1.0, method: str = "inverse_cdf",
           rng: torch.Generator | None = None) -> torch.Tensor:
    """Step 3: draw one token per row of ``logits`` (..., V) from softmax(logits / temperature).

    Always in fp32 and without gradient. Both methods draw from exactly that distribution:

    - ``inverse_cdf`` (default): one uniform per row, located in the cumulative sum of
      exp(z - max z) (by blocks, see ``locate``). No normalisation pass is needed, since
      the uniform is scaled by the row's total. Several times cheaper than Gumbel-max on
      this CPU (bench/RESULTS.md).
    - ``gumbel``: Gumbel-max, argmax of z + Gumbel noise (the original code's method); it
      draws V uniforms and takes two logs per element.
    """
    z = logits.detach().to(torch.float32, copy=True)  # never overwrite the caller's logits
    return sample_fp32(z, temperature, method, rng)[0]


def sample_fp32(z: torch.Tensor, temperature: float, method: str,
                 rng: torch.Generator | None, u: torch.Tensor | None = None,
                 size: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample from fp32 logits ``z``, which this overwrites; also returns the rows' max of z.
    ``u`` (..., 1): inverse-CDF uniforms drawn beforehand (else drawn from ``rng``); ``size``:
    the real vocabulary of logits padded past it with -inf (:func:`locate`)."""
    zmax = z.amax(-1, keepdim=True)  # (..., 1), before any scaling
    if method == "inverse_cdf":
        w = z.sub_(zmax)
        if temperature != 1.0:
            w.div_(temperature)
        return locate(w.exp_(), u, rng, size=size), zmax  # in place: no new 4*V*rows bytes
    if method == "gumbel":
        z = z if size is None else z[..., :size]  # the real tokens' noise alone
        if temperature != 1.0:
            z = z / temperature
        u = torch.rand(z.shape, generator=rng, device=z.device)
        # -log(-log u) with u clamped away from 0 and 1 so the noise stays finite.
        g = u.clamp_(1e-20, 1.0 - 1e-7).log_().neg_().log_().neg_()
        return (z + g).argmax(-1), zmax
    raise ValueError(f"unknown sampling method {method!r}; use 'inverse_cdf' or 'gumbel'")


def locate(weights: torch.Tensor, u: torch.Tensor | None, rng: torch.Generator | None,
            block: int = 256, size: int | None = None) -> torch.Tensor:
    """Inverse-CDF draw from unnormalised probabilities ``weights`` (..., V): the token where
    ``u`` (..., 1) times the row's total falls in its cumulative sum.

    In two levels, so that no (..., V) cumulative sum is written: the rows' sums over blocks
    of ``block`` tokens locate the block, then the cumulative sum inside that one block
    locates the token. The same distribution as one ``searchsorted`` over ``cumsum``.
    ``size``: the real tokens, the weights past them zeros (a padded vocabulary), so that
    rounding at a row's end lands on the last real token.
    """
    *lead, V = weights.shape
    w = weights.reshape(-1, V)
    N = w.shape[0]
    if u is None:
        u = torch.rand((*lead, 1), generator=rng, device=w.device)
    full = V // block * block
    sums = [w[:, :full].view(N, -1, block).sum(-1)] if full else []
    if full < V:
        sums.append(w[:, full:].sum(-1, keepdim=True))
    cdf = torch.cat(sums, 1).double().cumsum_(1)  # (N, blocks), small
    target = u.reshape(N, 1).double() * cdf[:, -1:]
    b = torch.searchsorted(cdf, target, right=True).clamp_(max=cdf.shape[1] - 1)  # (N, 1)
    before = torch.where(b > 0, cdf.gather(1, (b - 1).clamp(min=0)), 0.0)
    idx = b * block + torch.arange(block, device=w.device)  # (N, block): the block's tokens
    inside = torch.where(idx < V, w.gather(1, idx.clamp(max=V - 1)), 0).double().cumsum_(1)
    j = torch.searchsorted(inside, target - before, right=True)
    last = ((V if size is None else size) - 1 - b * block).clamp(max=block - 1)  # its last
    return (b * block + torch.minimum(j, last)).view(lead)


def unigram_sample(frequencies: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Tokens drawn by their frequency (inverse CDF), one per uniform in ``u`` (B, P, 1)."""
    if frequencies.numel() == 0:
        raise ValueError("replacement='unigram' needs model.set_unigram(counts) first")
    cdf = frequencies.cumsum(0)
    target = u.squeeze(-1).double() * cdf[-1]
    return torch.searchsorted(cdf, target.contiguous(), right=True).clamp_(
        max=len(cdf) - 1)


def corrupt(input_ids: torch.Tensor, positions: torch.Tensor, weights: torch.Tensor,
            sampled: torch.Tensor) -> torch.Tensor:
    """x_corrupt: the original with only the chosen positions replaced by the samples."""
    original = torch.gather(input_ids, 1, positions)
    return input_ids.scatter(1, positions, torch.where(weights, sampled, original))
