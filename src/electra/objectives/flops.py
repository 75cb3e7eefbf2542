"""Training FLOPs of a pretraining step, per objective (for MFU and equal-compute comparisons).

Counts matrix multiplies only, at 6 FLOPs per multiply-accumulate and parameter-token
(2 forward + 4 backward), the convention of Kaplan et al. and nanoGPT's MFU. Attention's score
and value products count 2·T·H multiply-accumulates per token and layer. A V-way MLM output
layer counts the rows it is computed on: the P = min(max_predictions, T) prediction slots of
each sequence (every slot, used or not), or every token for All-Tokens MLM. Embedding lookups,
LayerNorm, softmax and sampling are not counted (a few % of a step).

The count equals torch's ``FlopCounterMode`` on a real step
(``tests/experiments/test_compare.py``) when attention runs as plain matrix products.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from electra.objectives.registry import OBJECTIVES

if TYPE_CHECKING:
    from electra.config import ModelConfig, ObjectiveConfig


def step_flops_per_sequence(cfg: ModelConfig, objective: ObjectiveConfig, seq_len: int) -> int:
    """Training FLOPs (forward and backward) of one sequence of ``seq_len`` tokens under
    ``objective.kind``: what that objective runs (``Objective.macs``)."""
    if objective.two_stage_steps:
        raise ValueError("two-stage training changes its cost at the stage boundary; count "
                         "each stage's objective separately")
    P = min(objective.max_predictions, seq_len)
    return 6 * OBJECTIVES[objective.kind].macs(cfg, seq_len, P)
