"""Replace MLM (section 3.2): the chosen positions get generator samples instead of [MASK]
and the model predicts the originals there: L = L_MLM(generator) + L_MLM(model)."""

from __future__ import annotations

from typing import Any

from electra.objectives.base import ElectraOutput, Objective, Step, corrupt_with, full_mlm, generate
from electra.objectives.losses import pair


class ReplaceMLM(Objective):
    name = "replace_mlm"
    summary = ("chosen positions get generator samples instead of [MASK]; the model "
               "predicts the originals there")
    main_mlm = True
    detects = False

    def forward(self, model: Any, step: Step) -> ElectraOutput:
        gen, sampled = generate(model, step)
        corrupted, labels = corrupt_with(step, sampled)
        mlm = full_mlm(model, step, corrupted)
        real = step.attention_mask.bool()
        replaced = {"replaced_frac": pair((labels & real).sum(), real.sum())}
        return step.output(gen.loss + mlm.loss, {"gen_loss": gen, "mlm_loss": mlm}, replaced,
                           corrupted_ids=corrupted, labels=labels)
