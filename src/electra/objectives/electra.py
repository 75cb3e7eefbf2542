"""ELECTRA (Clark et al., 2020, section 2), and ELECTRA 15% (section 3.2).

    L = L_MLM(generator at the chosen positions M) + λ · mean_{non-pad i} BCE(D(x_corrupt)_i,
        [x_corrupt_i != x_i])

The generator's samples fill M (no gradient through sampling); a sample equal to the original
is labelled original. Two-stage training (``objective.two_stage_steps``) is this objective in
two stages: the generator alone, then the discriminator with the generator frozen.
"""

from __future__ import annotations

from typing import Any

import torch

from electra.objectives.base import (
    ElectraOutput,
    Objective,
    Step,
    corrupt_with,
    detect,
    finish,
    generate,
)


class Electra(Objective):
    name = "electra"
    summary = "generator + discriminator (the paper's method)"
    two_stage = True

    def forward(self, model: Any, step: Step) -> ElectraOutput:
        gen, sampled = generate(model, step)
        if step.stage == 1:  # two-stage training, stage 1: the generator alone
            return step.output(gen.loss, {"gen_loss": gen})
        corrupted, labels = corrupt_with(step, sampled)
        disc, disc_logits = detect(model, step, corrupted, labels, **self.scored_on(step))
        loss = step.cfg.disc_weight * disc.loss
        if step.stage != 2 and not self.frozen_generator:
            loss = gen.loss + loss  # step 6: one joint update (else the generator is frozen)
        return finish(step, loss, {"gen_loss": gen, "disc_loss": disc}, corrupted, labels,
                      disc_logits)

    def scored_on(self, step: Step) -> dict[str, Any]:
        """Where the discriminator's loss is averaged: every non-pad token."""
        return {}


class Electra15(Electra):
    name = "electra15"
    summary = "ELECTRA with the discriminator loss on the chosen positions only"
    two_stage = False

    def scored_on(self, step: Step) -> dict[str, Any]:
        real = step.attention_mask.bool()
        on = torch.zeros_like(real).scatter(1, step.masked.positions, step.masked.weights)
        return {"over": on, "denominator": step.chosen}
