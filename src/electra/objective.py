"""The ELECTRA objective (Clark et al., 2020, section 2), readable line by line.

    1. choose positions M: ~15% of each sequence's candidate tokens (no specials, no padding)
    2. x_masked:   most chosen positions become [MASK] (the rest keep the token, or BERT's
                   random token), the generator predicts the originals there:
                   L_MLM = mean_{i in M} -log p_G(x_i | x_masked)
    3. x_corrupt:  chosen positions take a *sample* from p_G (no gradient through sampling)
    4. labels:     replaced_i = [x_corrupt_i != x_i]  (a sample equal to the original is
                   labelled original)
    5. L_disc:     mean over non-pad tokens of BCE(D(x_corrupt)_i, replaced_i)
    6. L = L_MLM + λ·L_disc, one joint update.

:class:`ElectraPretrainingModel` is the pair trained together (the generator, the
discriminator, their shared embeddings); its forward is :func:`electra_forward`, so that DDP and
FSDP wrappers see the whole objective as one module call.

Nothing here calls ``.item()``: no host-device sync inside a step. Randomness comes from an
explicit ``torch.Generator`` so that masking and sampling are reproducible and resumable.
A training step draws its ``Noise`` for the whole global batch up front and each process (and
each accumulation micro-batch) takes its rows, so masking and sampling do not depend on the
world size or the accumulation; ``Norm`` likewise averages the losses over the global batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from electra.config import ModelConfig, ObjectiveConfig
from electra.model import Discriminator, Generator
from electra.tokenizer import SpecialTokens


class ElectraPretrainingModel(nn.Module):
    """Generator and discriminator trained together; embeddings shared unless turned off.

    Built from the model config (the generator is derived by ``generator_size``); the
    objective and the special-token ids are the ones :meth:`forward` trains with.
    """

    def __init__(self, cfg: ModelConfig, objective: ObjectiveConfig | None = None,
                 special: SpecialTokens | None = None) -> None:
        super().__init__()
        self.config = cfg
        self.objective = objective or ObjectiveConfig()
        self.special = special
        self.discriminator = Discriminator(cfg)
        shared = self.discriminator.encoder.embeddings if cfg.share_embeddings else None
        self.generator = Generator(cfg.generator_config(), shared)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                token_type_ids: torch.Tensor | None = None, noise: Noise | None = None,
                norm: Norm | None = None, rng: torch.Generator | None = None) -> ElectraOutput:
        """The whole objective on a batch (:func:`electra_forward`)."""
        if self.special is None:
            raise ValueError("ElectraPretrainingModel needs the special-token ids to train: "
                             "build it with special=SpecialTokens(...)")
        return electra_forward(self, input_ids, attention_mask, token_type_ids, self.special,
                               self.objective, rng, noise, norm)


@dataclass
class Masked:
    """The generator's task: which positions to predict, and its input."""

    input_ids: torch.Tensor  # (B, T) x_masked
    positions: torch.Tensor  # (B, P) long, distinct per row
    weights: torch.Tensor  # (B, P) bool, True where the slot is a chosen position
    targets: torch.Tensor  # (B, P) long, the original tokens at ``positions``


@dataclass
class Noise:
    """The uniform draws that masking and sampling consume, for rows of a batch."""

    scores: torch.Tensor  # (B, T) which positions to choose (top-k)
    mask_u: torch.Tensor  # (B, P) [MASK] / keep / random token
    random_ids: torch.Tensor  # (B, P) BERT's random replacement tokens
    sample_u: torch.Tensor  # (B, P, 1) inverse-CDF uniforms

    @staticmethod
    def draw(batch: int, seq_len: int, vocab_size: int, cfg: ObjectiveConfig,
             rng: torch.Generator | None = None,
             device: torch.device | str = "cpu") -> Noise:
        P = min(cfg.max_predictions, seq_len)
        return Noise(
            scores=torch.rand(batch, seq_len, generator=rng, device=device),
            mask_u=torch.rand(batch, P, generator=rng, device=device),
            random_ids=torch.randint(vocab_size, (batch, P), generator=rng, device=device),
            sample_u=torch.rand(batch, P, 1, generator=rng, device=device))

    def rows(self, start: int, stop: int) -> Noise:
        return Noise(self.scores[start:stop], self.mask_u[start:stop],
                     self.random_ids[start:stop], self.sample_u[start:stop])


@dataclass
class Norm:
    """Loss denominators over the whole global batch: chosen slots and non-pad tokens."""

    chosen: torch.Tensor  # 0-d
    tokens: torch.Tensor  # 0-d


def candidate_mask(input_ids: torch.Tensor, attention_mask: torch.Tensor,
                   special: SpecialTokens) -> torch.Tensor:
    """(B, T) bool: tokens that may be chosen (not padding, not a special token)."""
    ok = attention_mask.bool()
    for token_id in special.ids():
        ok &= input_ids != token_id
    return ok


def chosen_count(candidates: torch.Tensor, cfg: ObjectiveConfig) -> torch.Tensor:
    """(B,) positions chosen per row: ``max(1, min(max_predictions, round(mask_prob * n)))``,
    never more than the row's n candidates."""
    P = min(cfg.max_predictions, candidates.shape[1])
    n = candidates.sum(1)
    # torch.round rounds half to even, like Python's round() in the original data code.
    return torch.round(n.to(torch.float64) * cfg.mask_prob).long().clamp(1, P).minimum(n)


def batch_norm_counts(input_ids: torch.Tensor, attention_mask: torch.Tensor,
                      special: SpecialTokens, cfg: ObjectiveConfig) -> torch.Tensor:
    """(2,) float64: chosen slots and non-pad tokens of a batch (the ``Norm`` of that batch);
    known before any randomness is drawn, so processes can sum theirs first."""
    chosen = chosen_count(candidate_mask(input_ids, attention_mask, special), cfg).sum()
    return torch.stack([chosen, attention_mask.sum()]).double()


def choose_positions(candidates: torch.Tensor, cfg: ObjectiveConfig,
                     rng: torch.Generator | None = None,
                     scores: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Choose ``max(1, min(max_predictions, round(mask_prob * n)))`` of each row's n candidates.

    Uniformly at random without replacement (top-k of random scores), with a fixed number P
    of slots per row so that shapes are static and no sync is needed.

    Returns:
        positions (B, P) long, distinct within a row; weights (B, P) bool, True for the
        chosen slots. Unused slots point at other (unchosen) positions of the row.
    """
    B, T = candidates.shape
    P = min(cfg.max_predictions, T)
    k = chosen_count(candidates, cfg)  # (B,)
    if scores is None:
        scores = torch.rand(B, T, generator=rng, device=candidates.device)
    scores = scores.masked_fill(~candidates, -1.0)  # non-candidates sort last
    positions = scores.topk(P, dim=1).indices  # (B, P), candidates first, in random order
    weights = torch.arange(P, device=candidates.device)[None, :] < k[:, None]
    return positions, weights


def mask_inputs(input_ids: torch.Tensor, attention_mask: torch.Tensor, special: SpecialTokens,
                vocab_size: int, cfg: ObjectiveConfig,
                rng: torch.Generator | None = None, noise: Noise | None = None) -> Masked:
    """Steps 1-2: choose positions and build the generator's input x_masked."""
    if noise is None:
        noise = Noise.draw(*input_ids.shape, vocab_size, cfg, rng, input_ids.device)
    positions, weights = choose_positions(
        candidate_mask(input_ids, attention_mask, special), cfg, scores=noise.scores)
    targets = torch.gather(input_ids, 1, positions)
    u = noise.mask_u
    use_mask = weights & (u < cfg.mask_token_prob)
    use_random = weights & (u >= cfg.mask_token_prob) & (
        u < cfg.mask_token_prob + cfg.random_token_prob)
    new = torch.where(use_mask, special.mask, torch.where(use_random, noise.random_ids, targets))
    return Masked(input_ids=input_ids.scatter(1, positions, new), positions=positions,
                  weights=weights, targets=targets)


@torch.no_grad()
def sample(logits: torch.Tensor, temperature: float = 1.0, method: str = "inverse_cdf",
           rng: torch.Generator | None = None) -> torch.Tensor:
    """Step 3: draw one token per row of ``logits`` (..., V) from softmax(logits / temperature).

    Always in fp32 and without gradient. Both methods draw from exactly that distribution:

    - ``inverse_cdf`` (default): one uniform per row, located in the cumulative sum of
      exp(z - max z) (by blocks, see ``_locate``). No normalisation pass is needed, since
      the uniform is scaled by the row's total. Several times cheaper than Gumbel-max on
      this CPU (bench/RESULTS.md).
    - ``gumbel``: Gumbel-max, argmax of z + Gumbel noise (the original code's method); it
      draws V uniforms and takes two logs per element.
    """
    z = logits.detach().to(torch.float32, copy=True)  # never overwrite the caller's logits
    return _sample_fp32(z, temperature, method, rng)[0]


def _sample_fp32(z: torch.Tensor, temperature: float, method: str,
                 rng: torch.Generator | None,
                 u: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample from fp32 logits ``z``, which this overwrites; also returns the rows' max of z.
    ``u`` (..., 1): inverse-CDF uniforms drawn beforehand (else drawn from ``rng``)."""
    zmax = z.amax(-1, keepdim=True)  # (..., 1), before any scaling
    if method == "inverse_cdf":
        w = z.sub_(zmax)
        if temperature != 1.0:
            w.div_(temperature)
        return _locate(w.exp_(), u, rng), zmax  # in place: no new 4*V*rows bytes
    if method == "gumbel":
        if temperature != 1.0:
            z = z / temperature
        u = torch.rand(z.shape, generator=rng, device=z.device)
        # -log(-log u) with u clamped away from 0 and 1 so the noise stays finite.
        g = u.clamp_(1e-20, 1.0 - 1e-7).log_().neg_().log_().neg_()
        return (z + g).argmax(-1), zmax
    raise ValueError(f"unknown sampling method {method!r}; use 'inverse_cdf' or 'gumbel'")


def _locate(weights: torch.Tensor, u: torch.Tensor | None, rng: torch.Generator | None,
            block: int = 256) -> torch.Tensor:
    """Inverse-CDF draw from unnormalised probabilities ``weights`` (..., V): the token where
    ``u`` (..., 1) times the row's total falls in its cumulative sum.

    In two levels, so that no (..., V) cumulative sum is written: the rows' sums over blocks
    of ``block`` tokens locate the block, then the cumulative sum inside that one block
    locates the token. The same distribution as one ``searchsorted`` over ``cumsum``.
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
    last = (V - 1 - b * block).clamp(max=block - 1)  # the block's last real token
    return (b * block + torch.minimum(j, last)).view(lead)


def corrupt(input_ids: torch.Tensor, positions: torch.Tensor, weights: torch.Tensor,
            sampled: torch.Tensor) -> torch.Tensor:
    """x_corrupt: the original with only the chosen positions replaced by the samples."""
    original = torch.gather(input_ids, 1, positions)
    return input_ids.scatter(1, positions, torch.where(weights, sampled, original))


def generator_loss(logits: torch.Tensor, targets: torch.Tensor, weights: torch.Tensor,
                   denominator: torch.Tensor | None = None) -> torch.Tensor:
    """L_MLM: cross-entropy (fp32) averaged over the chosen slots only (of the global batch
    when ``denominator`` is given)."""
    return _mlm_loss(logits, targets, weights, denominator)[0]


def _mlm_loss(logits: torch.Tensor, targets: torch.Tensor, weights: torch.Tensor,
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


@dataclass
class ElectraOutput:
    """Losses (with gradient) and detached statistics of one ELECTRA forward pass."""

    loss: torch.Tensor
    gen_loss: torch.Tensor
    disc_loss: torch.Tensor
    counts: dict[str, torch.Tensor]  # each (2,): numerator, denominator of a statistic
    corrupted_ids: torch.Tensor  # (B, T)
    labels: torch.Tensor  # (B, T) bool, True = replaced
    disc_logits: torch.Tensor  # (B, T)

    @property
    def stats(self) -> dict[str, torch.Tensor]:
        """The statistics as 0-d ratios (gen_acc, disc_acc, ...)."""
        return {k: (c[0] / c[1].clamp(min=1)).float() for k, c in self.counts.items()}


def electra_forward(
    model: ElectraPretrainingModel,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    token_type_ids: torch.Tensor | None,
    special: SpecialTokens,
    cfg: ObjectiveConfig,
    rng: torch.Generator | None = None,
    noise: Noise | None = None,
    norm: Norm | None = None,
) -> ElectraOutput:
    """One pass of the whole objective: masking, generator, sampling, discriminator, losses.

    ``noise``: the batch's random draws (else drawn here from ``rng``, which Gumbel sampling
    always uses). ``norm``: the global batch's loss denominators (else this batch's own).
    """
    gen = model.generator
    if noise is None:
        noise = Noise.draw(*input_ids.shape, gen.config.vocab_size, cfg, rng, input_ids.device)
    masked = mask_inputs(input_ids, attention_mask, special, gen.config.vocab_size, cfg,
                         noise=noise)
    gen_logits = gen(masked.input_ids, attention_mask, token_type_ids,
                     masked.positions)  # (B, P, V)
    gen_loss, probs, zmax, target_logit = _mlm_loss(
        gen_logits, masked.targets, masked.weights, None if norm is None else norm.chosen)

    with torch.no_grad():
        if cfg.sampling == "inverse_cdf" and cfg.temperature == 1.0:
            # The loss's exp(z - max z) is the sampler's too: no pass over the logits is new.
            sampled = _locate(probs, noise.sample_u, rng)  # (B, P)
        else:
            z = gen_logits.detach().to(torch.float32, copy=True)  # consumed by sampling
            sampled = _sample_fp32(z, cfg.temperature, cfg.sampling, rng, noise.sample_u)[0]
            del z
        gen_correct = (target_logit >= zmax).squeeze(-1)  # the target has the top logit
    corrupted = corrupt(input_ids, masked.positions, masked.weights, sampled)
    labels = corrupted != input_ids  # a sample equal to the original is "original"

    disc_logits = model.discriminator(corrupted, attention_mask, token_type_ids)  # (B, T)
    disc_loss = discriminator_loss(disc_logits, labels, attention_mask,
                                   None if norm is None else norm.tokens)
    loss = gen_loss + cfg.disc_weight * disc_loss

    counts = statistic_counts(gen_correct, masked, sampled, disc_logits, labels,
                              attention_mask)
    return ElectraOutput(loss=loss, gen_loss=gen_loss, disc_loss=disc_loss, counts=counts,
                         corrupted_ids=corrupted, labels=labels, disc_logits=disc_logits)


@torch.no_grad()
def statistic_counts(gen_correct: torch.Tensor, masked: Masked, sampled: torch.Tensor,
                     disc_logits: torch.Tensor, labels: torch.Tensor,
                     attention_mask: torch.Tensor) -> dict[str, torch.Tensor]:
    """Each statistic as a (2,) float tensor [numerator, denominator], detached and without a
    sync, so that batches, accumulation steps and processes can be pooled by summing:
    generator accuracy on the chosen slots, discriminator accuracy/precision/recall, and the
    chosen, replaced and sampled-equal-to-original fractions."""
    w = masked.weights
    real = attention_mask.bool()
    pred = disc_logits.detach() > 0
    tp = (pred & labels & real).sum()
    n_chosen, n_real = w.sum(), real.sum()
    pairs = {
        "gen_acc": ((gen_correct & w).sum(), n_chosen),
        "disc_acc": (((pred == labels) & real).sum(), n_real),
        "disc_precision": (tp, (pred & real).sum()),
        "disc_recall": (tp, (labels & real).sum()),
        "masked_frac": (n_chosen, n_real),
        "replaced_frac": ((labels & real).sum(), n_real),
        "sampled_original_frac": (((sampled == masked.targets) & w).sum(), n_chosen),
    }
    return {k: torch.stack([a, b]).double() for k, (a, b) in pairs.items()}
