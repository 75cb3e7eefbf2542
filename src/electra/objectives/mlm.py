"""BERT's masked LM, the paper's baseline: the discriminator-sized model predicts the
originals at the chosen positions from x_masked (80% [MASK], 10% random, 10% kept)."""

from __future__ import annotations

from typing import Any

import torch

from electra.objectives.base import ElectraOutput, Objective, Step, full_mlm


class MLM(Objective):
    name = "mlm"
    summary = "BERT's masked LM on a discriminator-sized model (the BERT baseline)"
    generator = False
    main_mlm = True
    detects = False
    mask_token_prob = 0.8
    random_token_prob = 0.1

    def forward(self, model: Any, step: Step) -> ElectraOutput:
        mlm = full_mlm(model, step, step.masked.input_ids)
        return step.output(mlm.loss, {"mlm_loss": mlm})

    def exported_generator(self, model: Any) -> torch.nn.Module | None:
        return model.main_mlm  # the full-size MLM model is what a BERT run keeps
