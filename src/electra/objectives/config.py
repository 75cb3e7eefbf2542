"""The objective's settings (``[objective]``), beside the objectives because they are
checked against an objective's traits (``objective.kind`` names a registered objective, whose
defaults fill what is unset). The run that joins them with the model and the loop
(``RunConfig``) is ``electra.run_config``; the sections that know no objective
(``ModelConfig``, ``TrainConfig``, ``FinetuneConfig``) and the machinery are
``electra.config``. No torch.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, ClassVar

from electra.config import (
    ModelConfig,
    _check,
    _check_ranges,
    _check_types,
)

SHARINGS = ("embeddings", "none", "all", "gdes")
UNITS = ("token", "word", "span")
MASK_SHAPES = ("linear", "cosine")
MASK_WINDOWS = ("run", "decay")


@dataclass(frozen=True)
class ObjectiveConfig:
    """The pretraining objective: ELECTRA's replaced-token detection (paper, section 2) and
    the paper's baselines and ablations (section 3.2), chosen with ``kind``."""

    SECTION: ClassVar[str] = "objective"
    RANGES: ClassVar[dict[str, str | tuple[str, ...]]] = {
        "mask_prob": "(0, 1)", "max_predictions": ">= 1", "mask_token_prob": "[0, 1]",
        "random_token_prob": "[0, 1]", "replacement": ("uniform", "unigram"),
        "disc_weight": ">= 0", "temperature": "> 0", "temperature_end": "> 0",
        "temperature_steps": ">= 0", "sampling": ("inverse_cdf", "gumbel"),
        "sharing": SHARINGS, "unit": UNITS, "span_mean": ">= 1", "two_stage_steps": ">= 0",
        "mask_prob_end": "(0, 1)", "mask_shape": MASK_SHAPES, "mask_over": MASK_WINDOWS,
        "generator_precision": ("fp32", "bf16")}
    kind: str = "electra"
    """electra: generator + discriminator (the paper's method). mlm: BERT's masked LM on a
    discriminator-sized model (the BERT baseline). random: no generator, chosen positions get
    random tokens and the discriminator finds them. electra15: ELECTRA with the discriminator
    loss on the chosen positions only. replace_mlm: chosen positions get generator samples
    instead of [MASK] and the model predicts the originals there. all_tokens_mlm: replace_mlm
    predicting every token, with a copy probability (the paper's All-Tokens MLM).
    fast_electra: the discriminator learns from the samples of an existing masked LM
    (objective.generator), frozen (Fast-ELECTRA)."""
    mask_prob: float = 0.15
    """Fraction of candidate tokens chosen per sequence (the budget, counted in tokens)."""
    mask_prob_end: float | None = None
    """A schedule of the rate: it goes from mask_prob to this one (e.g. 0.3 -> 0.15, Ettin's
    and mmBERT's direction) along mask_shape, over mask_over; unset: mask_prob throughout."""
    mask_shape: str = "linear"
    """The schedule's shape: "linear" or "cosine" (half a cosine from start to end)."""
    mask_over: str = "run"
    """Where the schedule runs: the whole "run" (step 0 to train.max_steps), or the learning
    rate's "decay" (train.schedule=wsd's last steps: mask_prob before, then to mask_prob_end;
    a --decay-from branch's own decay)."""
    max_predictions: int | None = None
    """Most positions chosen per sequence; unset: int((mask_prob + 0.005) * seq_len), the
    original's rule (19 at 128 tokens, 79 at 512), at the schedule's highest rate."""
    mask_token_prob: float | None = None
    """Of the chosen positions, the fraction replaced by [MASK] in the (generator's) input;
    unset: 0.85 (ELECTRA), 0.8 for kind mlm (BERT)."""
    random_token_prob: float | None = None
    """Of the chosen positions, the fraction replaced by a random token; unset: 0, 0.1 for
    kind mlm (BERT)."""
    replacement: str = "uniform"
    """kind random: replacement tokens drawn uniformly from the vocabulary, or "unigram" (by
    their frequency in the training data)."""
    disc_weight: float = 50.0
    """λ in L = L_MLM + λ·L_disc."""
    temperature: float = 1.0
    """Sampling temperature: replacements are drawn from softmax(logits / temperature)."""
    temperature_end: float | None = None
    """With temperature_steps: the temperature goes linearly from ``temperature`` to this over
    the first temperature_steps steps (e.g. 3 -> 1); validation samples at this one."""
    temperature_steps: int = 0
    """Steps of the temperature schedule (0: a constant temperature)."""
    sampling: str = "inverse_cdf"
    """How replacements are drawn: "inverse_cdf" or "gumbel" (Gumbel-max); same distribution,
    inverse_cdf is ~4x cheaper (see objective.sample)."""
    sharing: str = "embeddings"
    """What the generator shares with the discriminator: "embeddings" (the paper's default),
    "none", "all" (every weight tied; the generator must be the same size), or "gdes"
    (DeBERTaV3: the discriminator reads stop-gradient(E) + E_Δ, E_Δ its own)."""
    unit: str = "token"
    """What is chosen: single tokens, whole "word"s (every piece of a word), or "span"s of
    whole words (SpanBERT, geometric lengths); the budget is always counted in tokens."""
    span_mean: float = 3.0
    """unit span: mean span length in words."""
    generator: str | None = None
    """kind fast_electra: the frozen masked LM that samples the replacements, of the data's
    vocabulary: a transformers *ForMaskedLM folder or hub id (org/name[@revision]), a run
    (its generator), a run's generator/ folder or checkpoint (`pretrain --generator`)."""
    generator_precision: str = "fp32"
    """kind fast_electra: the frozen generator's weights in "fp32" or "bf16" (half the memory;
    on a CPU without bf16 arithmetic, slower)."""
    two_stage_steps: int = 0
    """> 0: the paper's two-stage training: the generator alone for this many steps, then the
    discriminator, initialised from it, with the generator frozen (same size, no sharing)."""

    def __post_init__(self) -> None:
        # The objectives' registry (here, not at the top: reading a config, as the CLI's
        # --help does, needs no torch; same package).
        from electra.objectives.registry import OBJECTIVES

        _check_types(self)
        _check(self.kind in OBJECTIVES,
               f"objective.kind must be one of {', '.join(OBJECTIVES)}, got {self.kind!r}")
        method = OBJECTIVES[self.kind]
        for name in ("mask_token_prob", "random_token_prob"):  # unset: the objective's own
            if getattr(self, name) is None:
                object.__setattr__(self, name, getattr(method, name))
        _check(self.max_predictions is None or (isinstance(self.max_predictions, int)
                                                 and self.max_predictions >= 1),
               f"objective.max_predictions must be a positive integer, got "
               f"{self.max_predictions!r} (or leave it unset: int((mask_prob + 0.005) * seq_len))")
        m, r = self.mask_token_prob, self.random_token_prob
        _check(0.0 <= m <= 1.0 and 0.0 <= r <= 1.0 and m + r <= 1.0 + 1e-9,  # type: ignore[operator]
               f"objective.mask_token_prob={m} and objective.random_token_prob={r} must be in "
               f"[0, 1] and sum to at most 1 (the rest keep the original token); BERT uses "
               f"0.8 and 0.1")
        _check(self.replacement in ("uniform", "unigram"),
               f"objective.replacement must be uniform or unigram, got {self.replacement!r}")
        _check(self.disc_weight >= 0.0,
               f"objective.disc_weight (λ) must be >= 0, got {self.disc_weight!r}; "
               f"the paper uses 50")
        _check(self.span_mean >= 1.0,
               f"objective.span_mean must be >= 1 (words), got {self.span_mean!r}")
        _check_ranges(self)
        _check((self.temperature_steps > 0) == (self.temperature_end is not None),
               "objective.temperature_end and objective.temperature_steps go together: "
               "e.g. temperature = 3, temperature_end = 1, temperature_steps = 2000")
        _check(method.generator or self.sharing == "embeddings",
               f"objective.sharing={self.sharing!r} is about the generator, and kind "
               f"{self.kind!r} has none; leave objective.sharing unset")
        _check(method.frozen_generator == (self.generator is not None),
               "objective.kind=fast_electra samples from a frozen masked LM: give it with "
               "--generator PATH (or objective.generator)" if method.frozen_generator else
               f"objective.generator={self.generator!r} is the frozen generator of kind "
               f"fast_electra, not of {self.kind!r}; set objective.kind=fast_electra or "
               f"remove objective.generator")
        _check(self.generator_precision == "fp32" or method.frozen_generator,
               f"objective.generator_precision is the frozen generator's (kind "
               f"fast_electra), not {self.kind!r}'s; leave it unset")
        _check(self.two_stage_steps == 0 or method.two_stage,
               f"objective.two_stage_steps is the two-stage variant of kind 'electra', not of "
               f"{self.kind!r}")

    @property
    def top_mask_prob(self) -> float:
        """The highest rate the run masks at (what the prediction slots are sized for)."""
        return max(self.mask_prob, self.mask_prob_end or 0.0)

    @property
    def final_mask_prob(self) -> float:
        """The rate the run ends at (validation's: every validation scores the same task)."""
        return self.mask_prob if self.mask_prob_end is None else self.mask_prob_end

    def mask_prob_at(self, step: int, start: int, stop: int) -> float:
        """The masking rate at ``step`` of a schedule over steps [start, stop): mask_prob
        before ``start``, mask_prob_end from ``stop`` on, and between them ``p0 + t (p1 -
        p0)`` (linear) or ``p1 + (p0 - p1) (1 + cos(pi t)) / 2`` (cosine), t = (step -
        start) / (stop - start)."""
        p0, p1 = self.mask_prob, self.mask_prob_end
        if p1 is None:
            return p0
        t = min(1.0, max(0.0, (step - start) / max(1, stop - start)))
        if self.mask_shape == "cosine":
            return p1 + (p0 - p1) * 0.5 * (1.0 + math.cos(math.pi * t))
        return p0 + t * (p1 - p0)

    def temperature_at(self, step: int) -> float:
        """The sampling temperature at ``step`` (the schedule's end after it)."""
        if not self.temperature_steps:
            return self.temperature
        t = min(1.0, step / self.temperature_steps)
        return self.temperature + t * (self.temperature_end - self.temperature)  # type: ignore[operator]

    @property
    def final_temperature(self) -> float:
        return self.temperature_end if self.temperature_steps else self.temperature  # type: ignore[return-value]

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def sharing_of(model: ModelConfig, objective: ObjectiveConfig) -> str:
    """What the generator shares: objective.sharing, or "none" when
    model.share_embeddings=false (the older switch for it)."""
    if not model.share_embeddings and objective.sharing == "embeddings":
        return "none"
    return objective.sharing


