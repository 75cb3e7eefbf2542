"""An objective's inputs (a :class:`Batch` of rows and a step's :class:`Draws`) and steps 1-2
of every objective: choose positions, then build the model's input x_masked.

Randomness comes in as a :class:`Noise` drawn for the whole global batch up front, so that
which positions are chosen, and how they are masked, depend neither on the number of
processes nor on gradient accumulation. A step chooses positions once (:func:`choose`); the
loss denominators (:class:`Norm`) count that choice and masking reads it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import torch
import torch.nn.functional as F

from electra.data.tokenizer import SpecialTokens


class ObjectiveSettings(Protocol):
    """What the objectives read of ``electra.objectives.config.ObjectiveConfig``. They do not
    import it: the config validates ``objective.kind`` against their registry, so the import
    would point back. Read-only: the config is frozen."""

    @property
    def kind(self) -> str: ...

    @property
    def mask_prob(self) -> float: ...

    @property
    def mask_prob_end(self) -> float | None: ...

    @property
    def max_predictions(self) -> int | None: ...

    @property
    def mask_token_prob(self) -> float | None: ...

    @property
    def random_token_prob(self) -> float | None: ...

    @property
    def replacement(self) -> str: ...

    @property
    def disc_weight(self) -> float: ...

    @property
    def sampling(self) -> str: ...

    @property
    def unit(self) -> str: ...

    @property
    def span_mean(self) -> float: ...



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
    chosen: tuple[torch.Tensor, torch.Tensor] | None = None  # (positions, weights), once chosen

    @staticmethod
    def draw(batch: int, seq_len: int, vocab_size: int, cfg: ObjectiveSettings,
             rng: torch.Generator | None = None,
             device: torch.device | str = "cpu") -> Noise:
        P = slots(cfg, seq_len)
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
                     None if self.span_u is None else self.span_u[start:stop],
                     None if self.chosen is None else
                     (self.chosen[0][start:stop], self.chosen[1][start:stop]))


@dataclass
class Norm:
    """Loss denominators over the whole global batch: chosen slots and non-pad tokens."""

    chosen: torch.Tensor  # 0-d
    tokens: torch.Tensor  # 0-d


@dataclass(frozen=True)
class Batch:
    """Token rows an objective trains on: the (B, T) ids and attention mask, the segment ids,
    the word starts (unit ``word``), which rows have no padding as read on the host (``full``,
    before the rows went to a device; None where unknown), and in packed rows each token's
    sequence (``sequence_ids``: 1, 2, ... side by side, 0 at padding; None: one a row), and
    the rows' layout computed on the host (``host``: ``electra.model.kernels.HostLayout``, on
    the rows' device; None: the encoders compute it, reading the device where they unpad).
    :meth:`rows` drops ``host`` (a micro-batch's is its own)."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    token_type_ids: torch.Tensor | None = None
    word_starts: torch.Tensor | None = None
    full: np.ndarray | None = None
    sequence_ids: torch.Tensor | None = None
    host: Any = None
    pad_free: bool | None = None
    """No row has padding, known on the host, nor holds several sequences: the encoders may
    attend without a mask. A plain bool, worked out from ``full`` when the batch is made
    (None: work it out): a compiled forward reads it as a constant (reading ``full`` there
    would be a data-dependent branch, a graph break). A field that ``dataclasses.replace``
    carries over, as FSDP's input casting replaces every field."""

    def __post_init__(self) -> None:
        if self.pad_free is None:
            object.__setattr__(self, "pad_free", self.full is not None and bool(
                self.full.all()) and self.sequence_ids is None)

    @staticmethod
    def of(tensors: dict[str, torch.Tensor], full: np.ndarray | None = None) -> Batch:
        """A loader's batch (its dict of tensors) as a Batch."""
        return Batch(tensors["input_ids"], tensors["attention_mask"],
                     tensors.get("token_type_ids"), tensors.get("word_starts"), full,
                     tensors.get("sequence_ids"))

    def rows(self, rows: slice) -> Batch:
        """Rows ``rows`` of the batch (a micro-batch)."""
        def cut(t: torch.Tensor | None) -> torch.Tensor | None:
            return None if t is None else t[rows]

        return Batch(self.input_ids[rows], self.attention_mask[rows], cut(self.token_type_ids),
                     cut(self.word_starts), None if self.full is None else self.full[rows],
                     cut(self.sequence_ids))


@dataclass(frozen=True)
class Draws:
    """A step's randomness and schedule: the rows' uniform draws (else drawn from ``rng``),
    the global batch's loss denominators (else the batch's own), the generator Gumbel
    sampling reads, the sampling temperature now (else the config's), and the stage of
    two-stage training (1: generator alone; 2: generator frozen)."""

    noise: Noise | None = None
    norm: Norm | None = None
    rng: torch.Generator | None = None
    temperature: float | None = None
    stage: int | None = None


def slots(cfg: ObjectiveSettings, seq_len: int) -> int:
    """P, the prediction slots of a ``seq_len``-token row: ``max_predictions``, or when it
    is unset the original's ``int((mask_prob + 0.005) * seq_len)`` (19 at 128, 79 at 512)
    at the highest rate of a schedule (``mask_prob_end``), at least 1 and at most
    ``seq_len``."""
    top = max(cfg.mask_prob, cfg.mask_prob_end or 0.0)
    P = cfg.max_predictions or int((top + 0.005) * seq_len)
    return max(1, min(P, seq_len))


def candidate_mask(input_ids: torch.Tensor, attention_mask: torch.Tensor,
                   special: SpecialTokens) -> torch.Tensor:
    """(B, T) bool: tokens that may be chosen (not padding, not a special token)."""
    ok = attention_mask.bool()
    for token_id in special.ids():
        ok &= input_ids != token_id
    return ok


def chosen_count(candidates: torch.Tensor, cfg: ObjectiveSettings,
                 rate: float | None = None) -> torch.Tensor:
    """(B,) the budget of each row, in tokens: ``max(1, min(max_predictions, round(rate *
    n)))``, never more than the row's n candidates (exactly what unit token chooses);
    ``rate``: the schedule's now (unset: ``mask_prob``)."""
    P = slots(cfg, candidates.shape[1])
    n = candidates.sum(1)
    rate = cfg.mask_prob if rate is None else rate
    # torch.round rounds half to even, like Python's round() in the original data code.
    return torch.round(n.to(torch.float64) * rate).long().clamp(1, P).minimum(n)


def unit_starts(candidates: torch.Tensor, cfg: ObjectiveSettings,
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


def choose_positions(candidates: torch.Tensor, cfg: ObjectiveSettings,
                     rng: torch.Generator | None = None,
                     scores: torch.Tensor | None = None,
                     word_starts: torch.Tensor | None = None,
                     span_u: torch.Tensor | None = None,
                     rate: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Choose each row's budget of ``max(1, min(max_predictions, round(rate * n)))`` tokens
    (``rate``: the schedule's now; unset: ``mask_prob``) among its n candidates: single
    tokens (unit token) or whole units (words, spans).

    Tokens: uniformly at random without replacement (top-k of random scores). Units: taken in
    random order while they fit, so a unit is never split and the budget is never exceeded
    (a row may stop short of it by less than one unit). A fixed number P of slots per row
    keeps shapes static and needs no sync.

    Returns:
        positions (B, P) long, distinct within a row; weights (B, P) bool, True for the
        chosen slots, which come first. Unused slots point at other positions of the row.
    """
    B, T = candidates.shape
    P = slots(cfg, T)
    k = chosen_count(candidates, cfg, rate)  # (B,) the budget, in tokens
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


def choose(noise: Noise, input_ids: torch.Tensor, attention_mask: torch.Tensor,
           special: SpecialTokens, cfg: ObjectiveSettings,
           word_starts: torch.Tensor | None = None, rate: float | None = None) -> Noise:
    """``noise`` (of these rows) with the positions chosen from it at ``rate`` (unset:
    ``mask_prob``): the one choice a step makes, which masking then reads (and the loss
    denominators count)."""
    cand = candidate_mask(input_ids, attention_mask, special)
    positions, weights = choose_positions(cand, cfg, scores=noise.scores,
                                          word_starts=word_starts, span_u=noise.span_u,
                                          rate=rate)
    return dataclasses.replace(noise, chosen=(positions, weights))


def mask_inputs(input_ids: torch.Tensor, attention_mask: torch.Tensor, special: SpecialTokens,
                vocab_size: int, cfg: ObjectiveSettings,
                rng: torch.Generator | None = None, noise: Noise | None = None,
                word_starts: torch.Tensor | None = None) -> Masked:
    """Steps 1-2: choose positions and build the generator's input x_masked."""
    if noise is None:
        noise = Noise.draw(*input_ids.shape, vocab_size, cfg, rng, input_ids.device)
    if noise.chosen is None:
        noise = choose(noise, input_ids, attention_mask, special, cfg, word_starts)
    positions, weights = noise.chosen  # type: ignore[misc]
    targets = torch.gather(input_ids, 1, positions)
    u = noise.mask_u
    m, r = cfg.mask_token_prob, cfg.random_token_prob
    use_mask = weights & (u < m)
    use_random = weights & (u >= m) & (u < m + r)  # type: ignore[operator]
    new = torch.where(use_mask, special.mask, torch.where(use_random, noise.random_ids, targets))
    return Masked(input_ids=input_ids.scatter(1, positions, new), positions=positions,
                  weights=weights, targets=targets)


class Ranks(Protocol):
    """What :func:`step_draws` needs of the runtime: this process's rank, and a sum over
    the processes."""

    rank: int

    def all_sum(self, x: torch.Tensor) -> torch.Tensor: ...


def step_draws(batch: Batch, global_batch: int, vocab_size: int, special: SpecialTokens,
               cfg: ObjectiveSettings, rng: torch.Generator, rt: Ranks,
               rate: float | None = None) -> tuple[Norm, Noise]:
    """A step's loss denominators (summed over ranks) and this rank's rows of its random
    draws, drawn for the whole global batch (of which ``batch`` is this rank's rows), with
    the positions chosen at ``rate`` (a schedule's now; unset: ``mask_prob``): the step's
    one choice, which the denominators count. What a training or validation step draws
    before its micro-batches."""
    ids, mask = batch.input_ids, batch.attention_mask
    noise = Noise.draw(global_batch, ids.shape[1], vocab_size, cfg, rng, ids.device)
    first = rt.rank * len(ids)
    mine = choose(noise.rows(first, first + len(ids)), ids, mask, special, cfg,
                  batch.word_starts, rate)
    chosen = mine.chosen[1].sum()  # type: ignore[index]
    counts = rt.all_sum(torch.stack([chosen, mask.sum()]).double())
    return Norm(chosen=counts[0].float(), tokens=counts[1].float()), mine
