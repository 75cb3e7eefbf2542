"""What every objective is: its parts, its forward over a masked batch, its traits.

An objective is a class with the traits the model builder, the config and the FLOP count
(``electra.objectives.flops``) read (:class:`Objective`), and a ``forward`` made of the
shared steps below: the generator's MLM loss and its samples (:func:`generate`), x_corrupt
and its labels (:func:`corrupt_with`), and the discriminator's loss on them
(:func:`detect`). ``electra.objectives.registry`` names each.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch

from electra.objectives.losses import discriminator_loss, mlm_accuracy, mlm_loss, pair, rtd_counts
from electra.objectives.masking import Batch, Masked, Noise, Norm, ObjectiveSettings
from electra.objectives.sampling import corrupt, locate, sample_fp32


@dataclass(frozen=True)
class Step:
    """What one pass of an objective reads: the batch, its masking, the step's draws, and the
    masking's own statistics. Read-only: the shared steps below return their losses."""

    batch: Batch
    masked: Masked  # the chosen positions and x_masked
    noise: Noise  # the rows' uniform draws
    cfg: ObjectiveSettings
    norm: Norm | None = None  # the global batch's denominators (else this batch's own)
    rng: torch.Generator | None = None  # Gumbel noise
    temperature: float = 1.0
    stage: int | None = None  # two-stage training: 1 (generator alone), 2 (generator frozen)
    counts: dict[str, torch.Tensor] = field(default_factory=dict)
    layout: Any = None  # the encoders' Layout of the batch, made once (else each its own)

    @property
    def input_ids(self) -> torch.Tensor:
        return self.batch.input_ids  # (B, T) the original x

    @property
    def attention_mask(self) -> torch.Tensor:
        return self.batch.attention_mask  # (B, T)

    @property
    def token_type_ids(self) -> torch.Tensor | None:
        return self.batch.token_type_ids

    @property
    def sequence_ids(self) -> torch.Tensor | None:
        return self.batch.sequence_ids  # (B, T) packed rows' sequences; None: one a row

    @property
    def attends(self) -> torch.Tensor | None:
        """The mask the encoders attend with: none where no row has padding (attention
        without a mask: FlashAttention on a GPU), else the batch's."""
        return None if self.batch.pad_free else self.attention_mask

    @property
    def chosen(self) -> torch.Tensor | None:
        return None if self.norm is None else self.norm.chosen

    @property
    def tokens(self) -> torch.Tensor | None:
        return None if self.norm is None else self.norm.tokens

    def output(self, loss: torch.Tensor, terms: dict[str, Term],
                 *more: dict[str, torch.Tensor], **kw: Any) -> ElectraOutput:
        """The pass's output: ``loss``, each named term's loss, and the statistics (the
        masking's, each term's in order, then ``more``)."""
        counts = dict(self.counts)
        for part in (*(term.counts for term in terms.values()), *more):
            counts.update(part)
        return ElectraOutput(loss=loss, losses={k: term.loss for k, term in terms.items()},
                             counts=counts, **kw)


@dataclass(frozen=True)
class Term:
    """One loss of an objective (0-d, with gradient) and the statistics computed beside it,
    each (2,): numerator, denominator."""

    loss: torch.Tensor
    counts: dict[str, torch.Tensor] = field(default_factory=dict)


@dataclass
class ElectraOutput:
    """Losses (with gradient) and detached statistics of one pass of the objective."""

    loss: torch.Tensor
    losses: dict[str, torch.Tensor]  # each part: gen_loss, disc_loss, mlm_loss (0-d)
    counts: dict[str, torch.Tensor]  # each (2,): numerator, denominator of a statistic
    corrupted_ids: torch.Tensor | None = None  # (B, T) what the discriminator read
    labels: torch.Tensor | None = None  # (B, T) bool, True = replaced
    disc_logits: torch.Tensor | None = None  # (B, T) > 0: replaced (objectives that detect)

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


class Objective:
    """A pretraining objective. Subclasses set the traits and write ``forward``.

    Traits: ``generator`` (a small MLM trains beside the model and its samples replace the
    chosen tokens), ``main_mlm`` (a full-size MLM head on the discriminator's encoder),
    ``detects`` (the discriminator's RTD head trains; otherwise it is kept, frozen, for the
    exported format), ``mask_token_prob``/``random_token_prob`` (what unset config values
    mean), ``two_stage`` (may train in the paper's two stages), ``frozen_generator`` (an
    existing masked LM, ``objective.generator``, samples the replacements, frozen).
    """

    name: ClassVar[str]
    summary: ClassVar[str]
    generator: ClassVar[bool] = True
    main_mlm: ClassVar[bool] = False
    detects: ClassVar[bool] = True
    mask_token_prob: ClassVar[float] = 0.85
    random_token_prob: ClassVar[float] = 0.0
    two_stage: ClassVar[bool] = False
    frozen_generator: ClassVar[bool] = False

    def forward(self, model: Any, step: Step) -> ElectraOutput:
        raise NotImplementedError

    def mlm_rows(self, seq_len: int, predictions: int) -> int:
        """Rows the full-size MLM head runs on: the prediction slots (what
        ``electra.objectives.flops`` counts, with the traits)."""
        return predictions

    def needs_unigram(self, cfg: ObjectiveSettings) -> bool:
        """Whether replacements are drawn by the training data's token frequencies."""
        return False

    def exported_generator(self, model: Any) -> torch.nn.Module | None:
        """What a finished run keeps as RUN/generator."""
        return model.generator


def generate(model: Any, step: Step) -> tuple[Term, torch.Tensor]:
    """Steps 2-3: the generator's MLM loss on x_masked with its statistics (``gen_acc``,
    ``sampled_original_frac``) and, without gradient, one sample per chosen slot (B, P).
    Frozen in stage 2, and where the generator is an existing one (``frozen_generator``)."""
    masked = step.masked
    generator = model.sampler
    frozen = step.stage == 2 or model.method.frozen_generator
    with torch.set_grad_enabled(torch.is_grad_enabled() and not frozen):
        gen_logits = generator(masked.input_ids, step.attends, step.token_type_ids,
                                     masked.positions, padded=True,
                                     sequence_ids=step.sequence_ids,
                                     layout=step.layout)  # (B, P, V padded)
        loss, probs, zmax, target_logit = mlm_loss(gen_logits, masked.targets, masked.weights,
                                                   step.chosen)
    cfg, T, V = step.cfg, step.temperature, generator.config.vocab_size
    with torch.no_grad():
        if cfg.sampling == "inverse_cdf" and T == 1.0:
            # The loss's exp(z - max z) is the sampler's too: no pass over the logits is new.
            sampled = locate(probs, step.noise.sample_u, step.rng, size=V)  # (B, P)
        else:
            z = gen_logits.detach().to(torch.float32, copy=True)  # consumed by sampling
            sampled = sample_fp32(z, T, cfg.sampling, step.rng, step.noise.sample_u, V)[0]
            del z
        counts = {"gen_acc": mlm_accuracy(target_logit, zmax, masked.weights),
                  "sampled_original_frac": pair(
                      ((sampled == masked.targets) & masked.weights).sum(),
                      masked.weights.sum())}
    return Term(loss, counts), sampled


def corrupt_with(step: Step, sampled: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Step 4: x_corrupt (the chosen slots take ``sampled``) and its labels, True where a
    token was replaced; a sample equal to the original is labelled original."""
    masked = step.masked
    corrupted = corrupt(step.input_ids, masked.positions, masked.weights, sampled)
    return corrupted, corrupted != step.input_ids


def full_mlm(model: Any, step: Step, inputs: torch.Tensor) -> Term:
    """The full-size MLM head's loss predicting the originals at the chosen slots from
    ``inputs``, with its accuracy (``mlm_acc``)."""
    masked = step.masked
    logits = model.main_mlm(inputs, step.attends, step.token_type_ids, masked.positions,
                            padded=True, sequence_ids=step.sequence_ids, layout=step.layout)
    loss, _, zmax, target_logit = mlm_loss(logits, masked.targets, masked.weights, step.chosen)
    return Term(loss, {"mlm_acc": mlm_accuracy(target_logit, zmax, masked.weights)})


def detect(model: Any, step: Step, corrupted: torch.Tensor, labels: torch.Tensor,
           over: torch.Tensor | None = None, denominator: torch.Tensor | None = None
           ) -> tuple[Term, torch.Tensor]:
    """Step 5: the discriminator's loss on x_corrupt, averaged over ``over`` (default: the
    non-pad tokens) with ``denominator`` (default: the step's token count), and its logits
    (B, T)."""
    disc_logits = model.discriminator(corrupted, step.attends, step.token_type_ids,
                                      step.sequence_ids, layout=step.layout)
    loss = discriminator_loss(disc_logits, labels, step.attention_mask if over is None else over,
                              step.tokens if over is None else denominator)
    return Term(loss), disc_logits


def finish(step: Step, loss: torch.Tensor, terms: dict[str, Term], corrupted: torch.Tensor,
           labels: torch.Tensor, disc_logits: torch.Tensor) -> ElectraOutput:
    """The output of an objective that detects: its terms, and its RTD statistics over the
    non-pad tokens."""
    rtd = rtd_counts(disc_logits, labels, step.attention_mask.bool())
    return step.output(loss, terms, rtd, corrupted_ids=corrupted, labels=labels,
                       disc_logits=disc_logits)
