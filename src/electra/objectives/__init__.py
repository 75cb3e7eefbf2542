"""The pretraining objectives (Clark et al., 2020), readable line by line.

ELECTRA (``kind = "electra"``, section 2):

    1. choose positions M: ~15% of each sequence's candidate tokens (no specials, no padding),
       as single tokens, whole words or spans of words (``unit``); the budget is in tokens
    2. x_masked:   most chosen positions become [MASK] (the rest keep the token, or BERT's
                   random token), the generator predicts the originals there:
                   L_MLM = mean_{i in M} -log p_G(x_i | x_masked)
    3. x_corrupt:  chosen positions take a *sample* from p_G (no gradient through sampling)
    4. labels:     replaced_i = [x_corrupt_i != x_i]  (a sample equal to the original is
                   labelled original)
    5. L_disc:     mean over non-pad tokens of BCE(D(x_corrupt)_i, replaced_i)
    6. L = L_MLM + λ·L_disc, one joint update.

The paper's baselines and ablations (section 3.2), as other kinds:

    mlm             BERT: the discriminator-sized model predicts x_i at M from x_masked
                    (80% [MASK], 10% random, 10% kept); L = L_MLM of that model
    random          no generator: M gets uniform (or unigram) random tokens; L = λ·L_disc
    electra15       ELECTRA with L_disc averaged over M only
    replace_mlm     M gets generator samples (no [MASK]); the model predicts x_i at M from
                    x_corrupt: L = L_MLM(generator) + L_MLM(model)
    all_tokens_mlm  replace_mlm predicting every token with a copy mechanism:
                    p(x_i) = D_i·[x_i = x_corrupt_i] + (1 - D_i)·softmax(z_i)[x_i], D_i a sigmoid
                    (the discriminator's head); L = L_MLM(generator) + mean_i -log p(x_i)

:class:`ElectraPretrainingModel` holds the parts a kind trains (the discriminator always; the
generator; a full-size MLM head on the discriminator's encoder) and how the generator shares
weights (``sharing``: the embeddings, none, all, or DeBERTaV3's gradient-disentangled
sharing). Its forward is :func:`electra_forward`, so that DDP and FSDP wrappers see the whole
objective as one module call.

Nothing here calls ``.item()``: no host-device sync inside a step. Randomness comes from an
explicit ``torch.Generator`` so that masking and sampling are reproducible and resumable.
A training step draws its ``Noise`` for the whole global batch up front and each process (and
each accumulation micro-batch) takes its rows, so masking and sampling do not depend on the
world size or the accumulation; ``Norm`` likewise averages the losses over the global batch.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from electra.config import WITH_GENERATOR, ModelConfig, ObjectiveConfig, sharing_of
from electra.io.tokenizer import SpecialTokens
from electra.model import Discriminator, GDESEmbeddings, Generator

MAIN_MLM = ("mlm", "replace_mlm", "all_tokens_mlm")  # kinds with an MLM head on the big model
RTD = ("electra", "electra15", "random", "all_tokens_mlm")  # kinds whose RTD head trains


class ElectraPretrainingModel(nn.Module):
    """The modules a pretraining objective trains together, built from its configs.

    ``discriminator`` always (its RTD head trains for the kinds in ``RTD``: the copy gate of
    all_tokens_mlm is that head); ``generator`` for the kinds with one, sharing with the
    discriminator what ``sharing`` says; ``main_mlm``, a full-size MLM head on the
    discriminator's encoder (the same encoder module), for mlm, replace_mlm, all_tokens_mlm.
    """

    def __init__(self, cfg: ModelConfig, objective: ObjectiveConfig | None = None,
                 special: SpecialTokens | None = None) -> None:
        super().__init__()
        self.config = cfg
        self.objective = objective = objective or ObjectiveConfig()
        self.special = special
        self.sharing = sharing_of(cfg, objective)
        self.discriminator = Discriminator(cfg)
        self.generator: Generator | None = None
        self.main_mlm: Generator | None = None
        disc = self.discriminator
        if objective.kind in WITH_GENERATOR:
            gen_cfg = cfg.generator_config()
            if self.sharing == "embeddings":
                self.generator = Generator(gen_cfg, disc.encoder.embeddings)
            elif self.sharing == "all":  # the same size: every encoder weight tied
                self.generator = Generator(gen_cfg, encoder=disc.encoder)
            else:
                self.generator = Generator(gen_cfg)
                if self.sharing == "gdes":
                    disc.encoder.embeddings = GDESEmbeddings(
                        cfg, self.generator.encoder.embeddings.word_embeddings)
        if objective.kind in MAIN_MLM:
            self.main_mlm = Generator(cfg.replace(generator_size=1.0), encoder=disc.encoder)
        if objective.kind not in RTD:  # kept for the exported format, not trained
            for p in (*disc.head_dense.parameters(), *disc.head_out.parameters()):
                p.requires_grad_(False)
        self.register_buffer("unigram", torch.zeros(0), persistent=False)

    def set_unigram(self, counts: torch.Tensor) -> None:
        """Token frequencies for kind random with replacement = "unigram"."""
        self.unigram = counts.to(torch.float64)

    def start_stage_2(self) -> None:
        """Two-stage training: the discriminator's encoder takes the generator's weights."""
        assert self.generator is not None
        self.discriminator.encoder.load_state_dict(self.generator.encoder.state_dict())

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                token_type_ids: torch.Tensor | None = None, noise: Noise | None = None,
                norm: Norm | None = None, rng: torch.Generator | None = None,
                word_starts: torch.Tensor | None = None, temperature: float | None = None,
                stage: int | None = None) -> ElectraOutput:
        """The whole objective on a batch (:func:`electra_forward`)."""
        if self.special is None:
            raise ValueError("ElectraPretrainingModel needs the special-token ids to train: "
                             "build it with special=SpecialTokens(...)")
        return electra_forward(self, input_ids, attention_mask, token_type_ids, self.special,
                               self.objective, rng, noise, norm, word_starts, temperature,
                               stage)

    def parts(self) -> dict[str, nn.Module]:
        """The modules a finished run keeps as RUN/discriminator and RUN/generator: the
        discriminator as a plain one (under GDES its token table is E + E_Δ); the generator,
        or for kind mlm the full-size MLM model."""
        out: dict[str, nn.Module] = {"discriminator": self._plain_discriminator()}
        generator = self.main_mlm if self.objective.kind == "mlm" else self.generator
        if generator is not None:
            out["generator"] = generator
        return out

    def _plain_discriminator(self) -> nn.Module:
        disc = self.discriminator
        if not isinstance(disc.encoder.embeddings, GDESEmbeddings):
            return disc
        plain = Discriminator(self.config)
        state = {k: v for k, v in disc.state_dict().items() if not k.endswith("word_delta")}
        state["encoder.embeddings.word_embeddings.weight"] = (
            disc.encoder.embeddings.word_table().detach().clone())
        plain.load_state_dict(state)
        return plain


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

    scores: torch.Tensor  # (B, T) which positions (or units) to choose first
    mask_u: torch.Tensor  # (B, P) [MASK] / keep / random token
    random_ids: torch.Tensor  # (B, P) BERT's random replacement tokens
    sample_u: torch.Tensor  # (B, P, 1) inverse-CDF uniforms
    span_u: torch.Tensor | None = None  # (B, T) unit span: where spans start

    @staticmethod
    def draw(batch: int, seq_len: int, vocab_size: int, cfg: ObjectiveConfig,
             rng: torch.Generator | None = None,
             device: torch.device | str = "cpu") -> Noise:
        P = min(cfg.max_predictions, seq_len)
        return Noise(
            scores=torch.rand(batch, seq_len, generator=rng, device=device),
            mask_u=torch.rand(batch, P, generator=rng, device=device),
            random_ids=torch.randint(vocab_size, (batch, P), generator=rng, device=device),
            sample_u=torch.rand(batch, P, 1, generator=rng, device=device),
            span_u=(torch.rand(batch, seq_len, generator=rng, device=device)
                    if cfg.unit == "span" else None))

    def rows(self, start: int, stop: int) -> Noise:
        return Noise(self.scores[start:stop], self.mask_u[start:stop],
                     self.random_ids[start:stop], self.sample_u[start:stop],
                     None if self.span_u is None else self.span_u[start:stop])


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
    """(B,) the budget of each row, in tokens: ``max(1, min(max_predictions, round(mask_prob
    * n)))``, never more than the row's n candidates (exactly what unit token chooses)."""
    P = min(cfg.max_predictions, candidates.shape[1])
    n = candidates.sum(1)
    # torch.round rounds half to even, like Python's round() in the original data code.
    return torch.round(n.to(torch.float64) * cfg.mask_prob).long().clamp(1, P).minimum(n)


def batch_norm_counts(input_ids: torch.Tensor, attention_mask: torch.Tensor,
                      special: SpecialTokens, cfg: ObjectiveConfig, noise: Noise | None = None,
                      word_starts: torch.Tensor | None = None) -> torch.Tensor:
    """(2,) float64: chosen slots and non-pad tokens of a batch (the ``Norm`` of that batch).
    Unit token: known before any randomness; words and spans: from the batch's ``noise``."""
    cand = candidate_mask(input_ids, attention_mask, special)
    if cfg.unit == "token":
        chosen = chosen_count(cand, cfg).sum()
    else:
        assert noise is not None, "word and span masking count the chosen tokens from noise"
        chosen = choose_positions(cand, cfg, scores=noise.scores, word_starts=word_starts,
                                  span_u=noise.span_u)[1].sum()
    return torch.stack([chosen, attention_mask.sum()]).double()


def unit_starts(candidates: torch.Tensor, cfg: ObjectiveConfig,
                word_starts: torch.Tensor | None,
                span_u: torch.Tensor | None = None) -> torch.Tensor:
    """(B, T) bool: where a unit that masking chooses whole begins. Word: at every word's
    first token (from the tokenizer, stored by `prepare`). Span: at a word's first token with
    probability 1 / span_mean, so spans of whole words have geometric lengths (mean
    span_mean words). Units never cross a special token or padding."""
    if word_starts is None:
        raise ValueError(f"objective.unit={cfg.unit!r} needs the data's word boundaries")
    after_gap = F.pad(~candidates[:, :-1], (1, 0), value=True)  # first candidate after a gap
    starts = candidates & (word_starts.bool() | after_gap)
    if cfg.unit == "span":
        assert span_u is not None
        starts &= (span_u < 1.0 / cfg.span_mean) | after_gap
    return starts


def choose_positions(candidates: torch.Tensor, cfg: ObjectiveConfig,
                     rng: torch.Generator | None = None,
                     scores: torch.Tensor | None = None,
                     word_starts: torch.Tensor | None = None,
                     span_u: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Choose each row's budget of ``max(1, min(max_predictions, round(mask_prob * n)))``
    tokens among its n candidates: single tokens (unit token) or whole units (words, spans).

    Tokens: uniformly at random without replacement (top-k of random scores). Units: taken in
    random order while they fit, so a unit is never split and the budget is never exceeded
    (a row may stop short of it by less than one unit). A fixed number P of slots per row
    keeps shapes static and needs no sync.

    Returns:
        positions (B, P) long, distinct within a row; weights (B, P) bool, True for the
        chosen slots, which come first. Unused slots point at other positions of the row.
    """
    B, T = candidates.shape
    P = min(cfg.max_predictions, T)
    k = chosen_count(candidates, cfg)  # (B,) the budget, in tokens
    if scores is None:
        scores = torch.rand(B, T, generator=rng, device=candidates.device)
    slot = torch.arange(P, device=candidates.device)[None, :]
    if cfg.unit == "token":
        scores = scores.masked_fill(~candidates, -1.0)  # non-candidates sort last
        positions = scores.topk(P, dim=1).indices  # (B, P), candidates first, in random order
        return positions, slot < k[:, None]
    starts = unit_starts(candidates, cfg, word_starts, span_u)
    pos = torch.arange(T, device=candidates.device).expand(B, T)
    start_pos = torch.where(starts, pos, 0).cummax(1).values  # each token's unit start
    key = torch.where(candidates, scores.gather(1, start_pos), 2.0)  # a unit's random key
    order = key.sort(dim=1, stable=True).indices  # units in random order, tokens in order
    unit = starts.long().cumsum(1) - 1  # (B, T) unit index of each token
    length = torch.zeros(B, T, dtype=torch.long, device=candidates.device).scatter_add_(
        1, unit.clamp(min=0), candidates.long())  # (B, T) tokens per unit
    taken = candidates.gather(1, order).long().cumsum(1)  # tokens up to each sorted slot
    within = order - start_pos.gather(1, order)  # index of the token inside its unit
    unit_end = taken - within + length.gather(1, unit.clamp(min=0).gather(1, order)) - 1
    fits = candidates.gather(1, order) & (unit_end <= k[:, None])  # a prefix of each row
    return order[:, :P], fits[:, :P]


def mask_inputs(input_ids: torch.Tensor, attention_mask: torch.Tensor, special: SpecialTokens,
                vocab_size: int, cfg: ObjectiveConfig,
                rng: torch.Generator | None = None, noise: Noise | None = None,
                word_starts: torch.Tensor | None = None) -> Masked:
    """Steps 1-2: choose positions and build the generator's input x_masked."""
    if noise is None:
        noise = Noise.draw(*input_ids.shape, vocab_size, cfg, rng, input_ids.device)
    positions, weights = choose_positions(
        candidate_mask(input_ids, attention_mask, special), cfg, scores=noise.scores,
        word_starts=word_starts, span_u=noise.span_u)
    targets = torch.gather(input_ids, 1, positions)
    u = noise.mask_u
    m, r = cfg.mask_token_prob, cfg.random_token_prob
    use_mask = weights & (u < m)
    use_random = weights & (u >= m) & (u < m + r)  # type: ignore[operator]
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
    """Losses (with gradient) and detached statistics of one pass of the objective."""

    loss: torch.Tensor
    losses: dict[str, torch.Tensor]  # each part: gen_loss, disc_loss, mlm_loss (0-d)
    counts: dict[str, torch.Tensor]  # each (2,): numerator, denominator of a statistic
    corrupted_ids: torch.Tensor | None = None  # (B, T) what the discriminator read
    labels: torch.Tensor | None = None  # (B, T) bool, True = replaced
    disc_logits: torch.Tensor | None = None  # (B, T) > 0: replaced (kinds in RTD)
    extra: dict[str, torch.Tensor] = field(default_factory=dict)

    @property
    def gen_loss(self) -> torch.Tensor | None:
        return self.losses.get("gen_loss")

    @property
    def disc_loss(self) -> torch.Tensor | None:
        return self.losses.get("disc_loss")

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
    word_starts: torch.Tensor | None = None,
    temperature: float | None = None,
    stage: int | None = None,
) -> ElectraOutput:
    """One pass of the objective ``cfg.kind``: masking, then the kind's parts and losses.

    ``noise``: the batch's random draws (else drawn here from ``rng``, which Gumbel sampling
    always uses). ``norm``: the global batch's loss denominators (else this batch's own).
    ``temperature``: the sampling temperature now (else cfg.temperature). ``stage``: 1 or 2 of
    two-stage training (generator alone; discriminator with the generator frozen).
    """
    if cfg.kind != model.objective.kind:
        raise ValueError(f"this model was built for kind {model.objective.kind!r}, not "
                         f"{cfg.kind!r}")
    vocab = model.config.vocab_size
    if noise is None:
        noise = Noise.draw(*input_ids.shape, vocab, cfg, rng, input_ids.device)
    masked = mask_inputs(input_ids, attention_mask, special, vocab, cfg, noise=noise,
                         word_starts=word_starts)
    chosen = None if norm is None else norm.chosen
    tokens = None if norm is None else norm.tokens
    counts = {"masked_frac": _pair(masked.weights.sum(), attention_mask.sum())}
    losses: dict[str, torch.Tensor] = {}

    if cfg.kind == "mlm":  # BERT: the big model predicts the originals from x_masked
        assert model.main_mlm is not None
        logits = model.main_mlm(masked.input_ids, attention_mask, token_type_ids,
                                masked.positions)  # (B, P, V)
        losses["mlm_loss"], _, zmax, target_logit = _mlm_loss(
            logits, masked.targets, masked.weights, chosen)
        counts["mlm_acc"] = _pair(((target_logit >= zmax).squeeze(-1) & masked.weights).sum(),
                                  masked.weights.sum())
        return ElectraOutput(loss=losses["mlm_loss"], losses=losses, counts=counts)

    if cfg.kind == "random":  # no generator: uniform (or unigram) replacements
        sampled = (noise.random_ids if cfg.replacement == "uniform"
                   else _unigram(model.unigram, noise.sample_u))
    else:  # steps 2-3: the generator's MLM loss and its samples
        assert model.generator is not None
        frozen = stage == 2
        with torch.set_grad_enabled(torch.is_grad_enabled() and not frozen):
            gen_logits = model.generator(masked.input_ids, attention_mask, token_type_ids,
                                         masked.positions)  # (B, P, V)
            gen_loss, probs, zmax, target_logit = _mlm_loss(
                gen_logits, masked.targets, masked.weights, chosen)
        losses["gen_loss"] = gen_loss
        T = cfg.temperature if temperature is None else temperature
        with torch.no_grad():
            if cfg.sampling == "inverse_cdf" and T == 1.0:
                # The loss's exp(z - max z) is the sampler's too: no pass over the logits is new.
                sampled = _locate(probs, noise.sample_u, rng)  # (B, P)
            else:
                z = gen_logits.detach().to(torch.float32, copy=True)  # consumed by sampling
                sampled = _sample_fp32(z, T, cfg.sampling, rng, noise.sample_u)[0]
                del z
            counts["gen_acc"] = _pair(((target_logit >= zmax).squeeze(-1)
                                       & masked.weights).sum(), masked.weights.sum())
            counts["sampled_original_frac"] = _pair(
                ((sampled == masked.targets) & masked.weights).sum(), masked.weights.sum())
        if stage == 1:  # two-stage training, stage 1: the generator alone
            return ElectraOutput(loss=gen_loss, losses=losses, counts=counts)
    corrupted = corrupt(input_ids, masked.positions, masked.weights, sampled)
    labels = corrupted != input_ids  # a sample equal to the original is "original"
    real = attention_mask.bool()

    if cfg.kind == "replace_mlm":  # the big model predicts the originals from x_corrupt
        assert model.main_mlm is not None
        logits = model.main_mlm(corrupted, attention_mask, token_type_ids, masked.positions)
        losses["mlm_loss"], _, zmax, target_logit = _mlm_loss(
            logits, masked.targets, masked.weights, chosen)
        counts["mlm_acc"] = _pair(((target_logit >= zmax).squeeze(-1) & masked.weights).sum(),
                                  masked.weights.sum())
        counts["replaced_frac"] = _pair((labels & real).sum(), real.sum())
        return ElectraOutput(loss=losses["gen_loss"] + losses["mlm_loss"], losses=losses,
                             counts=counts, corrupted_ids=corrupted, labels=labels)

    if cfg.kind == "all_tokens_mlm":  # every token's identity, with a copy probability
        assert model.main_mlm is not None
        h = model.discriminator.encoder(corrupted, attention_mask, token_type_ids)  # (B, T, H)
        disc_logits = model.discriminator.head(h)  # (B, T): "replaced", D_i = sigmoid(-it)
        losses["mlm_loss"], correct = _copy_mlm_loss(
            model.main_mlm.logits(h), disc_logits, input_ids, corrupted, attention_mask,
            tokens)
        counts["mlm_acc"] = _pair((correct & real).sum(), real.sum())
        loss = losses["gen_loss"] + losses["mlm_loss"]
    else:  # steps 4-5: the discriminator finds the replaced tokens
        disc_logits = model.discriminator(corrupted, attention_mask, token_type_ids)  # (B, T)
        if cfg.kind == "electra15":  # scored on the chosen positions only
            on = torch.zeros_like(real).scatter(1, masked.positions, masked.weights)
            losses["disc_loss"] = discriminator_loss(disc_logits, labels, on, chosen)
        else:
            losses["disc_loss"] = discriminator_loss(disc_logits, labels, attention_mask,
                                                     tokens)
        loss = cfg.disc_weight * losses["disc_loss"]
        if "gen_loss" in losses and stage != 2:  # step 6: one joint update
            loss = losses["gen_loss"] + loss
    counts.update(_rtd_counts(disc_logits, labels, real))
    return ElectraOutput(loss=loss, losses=losses, counts=counts, corrupted_ids=corrupted,
                         labels=labels, disc_logits=disc_logits)


def _pair(numerator: torch.Tensor, denominator: torch.Tensor) -> torch.Tensor:
    """A statistic as a (2,) float tensor [numerator, denominator], detached, so that
    batches, accumulation steps and processes can be pooled by summing."""
    return torch.stack([numerator, denominator]).detach().double()


@torch.no_grad()
def _rtd_counts(disc_logits: torch.Tensor, labels: torch.Tensor,
                real: torch.Tensor) -> dict[str, torch.Tensor]:
    """Discriminator accuracy/precision/recall and the replaced fraction, over non-pad."""
    pred = disc_logits.detach() > 0
    tp = (pred & labels & real).sum()
    n_real = real.sum()
    return {"disc_acc": _pair(((pred == labels) & real).sum(), n_real),
            "disc_precision": _pair(tp, (pred & real).sum()),
            "disc_recall": _pair(tp, (labels & real).sum()),
            "replaced_frac": _pair((labels & real).sum(), n_real)}


def statistic_counts(gen_correct: torch.Tensor, masked: Masked, sampled: torch.Tensor,
                     disc_logits: torch.Tensor, labels: torch.Tensor,
                     attention_mask: torch.Tensor) -> dict[str, torch.Tensor]:
    """ELECTRA's statistics as (2,) counts: generator accuracy on the chosen slots,
    discriminator accuracy/precision/recall, and the chosen, replaced and
    sampled-equal-to-original fractions."""
    w = masked.weights
    real = attention_mask.bool()
    return {"gen_acc": _pair((gen_correct & w).sum(), w.sum()),
            **_rtd_counts(disc_logits, labels, real),
            "masked_frac": _pair(w.sum(), real.sum()),
            "sampled_original_frac": _pair(((sampled == masked.targets) & w).sum(), w.sum())}


def _unigram(frequencies: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Tokens drawn by their frequency (inverse CDF), one per uniform in ``u`` (B, P, 1)."""
    if frequencies.numel() == 0:
        raise ValueError("replacement='unigram' needs model.set_unigram(counts) first")
    cdf = frequencies.cumsum(0)
    target = u.squeeze(-1).double() * cdf[-1]
    return torch.searchsorted(cdf, target.contiguous(), right=True).clamp_(
        max=len(cdf) - 1)


def _copy_mlm_loss(logits: torch.Tensor, copy_logits: torch.Tensor, targets: torch.Tensor,
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
