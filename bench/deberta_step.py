"""Our DeBERTa-V3 RTD step against the step a user of transformers' DebertaV2 classes writes.

    python bench/deberta_step.py [--shapes 16x128 4x512] [--repeats 3] [--steps 2]

Same body and sizes on both sides: ``debertav3-xsmall`` (12 x 384, 6 heads, 256 position
buckets; the generator as wide and 6 blocks deep), DeBERTa-V3's vocabulary of 128,100, 15% of
the tokens masked.

- ours: what `electra pretrain --preset debertav3-xsmall` runs (``electra.train.pretraining.
  train_step``: RTD with GDES, λ = 50, at the default precision: bf16 autocast where the CPU
  has bf16 units, else fp32), AdamW, clipping, schedule.
- hf: transformers' ``DebertaV2ForMaskedLM`` (the generator) and
  ``DebertaV2ForTokenClassification`` (the discriminator, two labels) in fp32, as a script on
  them trains RTD: labels -100 off the masked positions, the MLM loss, a sample from the
  generator's softmax at the masked positions (no gradient), the discriminator's loss on
  original/replaced over the real tokens, ``mlm + 50 * disc`` in one backward, torch's AdamW
  over both, clipping. Their embeddings are not shared (GDES is not in transformers).

Each (side, shape) is timed in its own process, interleaved ours/hf for ``repeats`` rounds:
tokens/s min/median/max, the paired ratio ours/hf, each side's peak RSS. The last line is
JSON.
"""

from __future__ import annotations

import peer_step
import torch

from electra.data.tokenizer import SpecialTokens
from electra.model.bodies import model_preset, recipe
from electra.objectives.config import ObjectiveConfig

PRESET = "debertav3-xsmall"
VOCAB = 128_100
SPECIAL = SpecialTokens(pad=0, unk=3, cls=1, sep=2, mask=128_000)


def batch(B: int, T: int, seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1000, 120_000, (B, T), generator=g)
    ids[:, 0], ids[:, -1] = SPECIAL.cls, SPECIAL.sep
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids),
            "token_type_ids": torch.zeros_like(ids)}


def build(side: str, B: int, T: int):
    """The step function of one side."""
    cfg = model_preset(PRESET, vocab_size=VOCAB)
    obj = ObjectiveConfig(**{**recipe(PRESET).objective, "max_predictions": int(0.155 * T)})
    torch.manual_seed(0)
    if side == "ours":
        return peer_step.ours(cfg, obj, SPECIAL, B)

    from transformers import DebertaV2ForMaskedLM, DebertaV2ForTokenClassification

    from electra.model.bodies.deberta.hf import to_config as to_deberta_config
    from electra.objectives.masking import mask_inputs

    gen = DebertaV2ForMaskedLM(to_deberta_config(cfg.generator_config())).train()
    disc = DebertaV2ForTokenClassification(to_deberta_config(cfg, num_labels=2)).train()
    params = [*gen.parameters(), *disc.parameters()]
    opt = torch.optim.AdamW(params, lr=3e-4)
    rng = torch.Generator().manual_seed(1)

    def step(b):
        ids, attends = b["input_ids"], b["attention_mask"]
        m = mask_inputs(ids, attends, SPECIAL, VOCAB, obj, rng)
        labels = torch.full_like(ids, -100)
        labels.scatter_(1, m.positions, torch.where(m.weights, m.targets, -100))
        out = gen(input_ids=m.input_ids, attention_mask=attends, labels=labels)
        chosen = labels != -100
        with torch.no_grad():
            sampled = torch.multinomial(out.logits[chosen].float().softmax(-1), 1,
                                        generator=rng).squeeze(-1)
        corrupted = ids.clone()
        corrupted[chosen] = sampled
        replaced = (corrupted != ids).long().masked_fill(attends == 0, -100)
        d = disc(input_ids=corrupted, attention_mask=attends, labels=replaced)
        loss = out.loss + 50.0 * d.loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
    return step


if __name__ == "__main__":
    peer_step.main(__file__, __doc__, build, batch, ["16x128", "4x512"])
