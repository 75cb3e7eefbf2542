"""All-Tokens MLM (section 3.2): Replace MLM predicting every token, with a copy mechanism:

    p(x_i) = D_i·[x_i = x_corrupt_i] + (1 - D_i)·softmax(z_i)[x_i]

D_i a sigmoid of the discriminator's head (its RTD head is the copy gate);
L = L_MLM(generator) + mean_i -log p(x_i).
"""

from __future__ import annotations

from typing import Any

from electra.objectives.base import (
    ElectraOutput,
    Objective,
    Step,
    Term,
    corrupt_with,
    finish,
    generate,
)
from electra.objectives.losses import copy_mlm_loss, pair


class AllTokensMLM(Objective):
    name = "all_tokens_mlm"
    summary = "replace_mlm predicting every token, with a copy probability"
    main_mlm = True

    def forward(self, model: Any, step: Step) -> ElectraOutput:
        gen, sampled = generate(model, step)
        corrupted, labels = corrupt_with(step, sampled)
        mask = step.attention_mask
        h = model.discriminator.encoder(corrupted, mask, step.token_type_ids,
                                        sequence_ids=step.sequence_ids,
                                        layout=step.layout)  # (B, T, H)
        disc_logits = model.discriminator.head(h)  # (B, T): "replaced", D_i = sigmoid(-it)
        loss, correct = copy_mlm_loss(model.main_mlm.logits(h, padded=True), disc_logits,
                                      step.input_ids, corrupted, mask, step.tokens)
        real = mask.bool()
        mlm = Term(loss, {"mlm_acc": pair((correct & real).sum(), real.sum())})
        return finish(step, gen.loss + mlm.loss, {"gen_loss": gen, "mlm_loss": mlm}, corrupted,
                      labels, disc_logits)

    def mlm_rows(self, seq_len: int, predictions: int) -> int:
        return seq_len  # every token
