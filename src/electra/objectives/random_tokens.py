"""Replaced-token detection without a generator (section 3.2): the chosen positions get
uniform (or unigram) random tokens and the discriminator finds them; L = λ·L_disc."""

from __future__ import annotations

from typing import Any

from electra.objectives.base import ElectraOutput, Objective, Step, corrupt_with, detect, finish
from electra.objectives.sampling import unigram_sample


class RandomTokens(Objective):
    name = "random"
    summary = "no generator: chosen positions get random tokens, the discriminator finds them"
    generator = False

    def forward(self, model: Any, step: Step) -> ElectraOutput:
        noise = step.noise
        sampled = (noise.random_ids if step.cfg.replacement == "uniform"
                   else unigram_sample(model.unigram, noise.sample_u))
        corrupted, labels = corrupt_with(step, sampled)
        disc, disc_logits = detect(model, step, corrupted, labels)
        return finish(step, step.cfg.disc_weight * disc.loss, {"disc_loss": disc}, corrupted,
                      labels, disc_logits)

    def needs_unigram(self, cfg: Any) -> bool:
        return cfg.replacement == "unigram"
