"""Training FLOPs of a pretraining step, per objective (for MFU and equal-compute comparisons).

Counts matrix multiplies only, at 6 FLOPs per multiply-accumulate and parameter-token
(2 forward + 4 backward), the convention of Kaplan et al. and nanoGPT's MFU. Attention's score
and value products count 2·T·H multiply-accumulates per token and layer. A V-way MLM output
layer counts the rows it is computed on: the P = masking.slots(objective, T) prediction slots of
each sequence (every slot, used or not), or every token for All-Tokens MLM. Embedding lookups,
LayerNorm, softmax and sampling are not counted (a few % of a step). A frozen generator
(objective fast_electra) runs forward only: 2 FLOPs per multiply-accumulate of it, none of the
backward's 4.

The count equals torch's ``FlopCounterMode`` on a real step
(``tests/experiments/test_compare.py``) when attention runs as plain matrix products.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from electra.model.macs import encoder_macs, mlm_head_macs, rtd_head_macs
from electra.objectives.base import Objective
from electra.objectives.masking import slots
from electra.objectives.registry import OBJECTIVES

if TYPE_CHECKING:
    from electra.config import ModelConfig
    from electra.objectives.config import ObjectiveConfig


def step_flops_per_sequence(cfg: ModelConfig, objective: ObjectiveConfig, seq_len: int,
                            generator: ModelConfig | None = None) -> int:
    """Training FLOPs (forward and backward) of one sequence of ``seq_len`` tokens under
    ``objective.kind``: what that objective runs (:func:`objective_macs`); ``generator``:
    the frozen generator's config (objective fast_electra), its forward's FLOPs added."""
    if objective.two_stage_steps:
        raise ValueError("two-stage training changes its cost at the stage boundary; count "
                         "each stage's objective separately")
    P = slots(objective, seq_len)
    method = OBJECTIVES[objective.kind]
    flops = 6 * objective_macs(method, cfg, seq_len, P)
    if method.frozen_generator:
        if generator is None:
            raise ValueError("objective fast_electra's cost includes its frozen generator's "
                             "forward: pass generator=its config")
        flops += 2 * (encoder_macs(generator, seq_len) + mlm_head_macs(generator, P))
    return flops


def objective_macs(method: Objective, cfg: ModelConfig, seq_len: int, predictions: int) -> int:
    """Multiply-accumulates of one sequence's forward, from the objective's traits: the
    discriminator-sized encoder, the heads it trains on it, and the generator where it has
    one (an MLM at the ``predictions`` slots)."""
    T, P = seq_len, predictions
    macs = encoder_macs(cfg, T)
    macs += rtd_head_macs(cfg, T) if method.detects else 0
    macs += mlm_head_macs(cfg, method.mlm_rows(T, P)) if method.main_mlm else 0
    if method.generator:
        gen = cfg.generator_config()
        macs += encoder_macs(gen, T) + mlm_head_macs(gen, P)
    return macs
