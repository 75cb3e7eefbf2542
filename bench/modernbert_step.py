"""Our ModernBERT ELECTRA step against transformers' own ModernBertForMaskedLM training step.

    python bench/modernbert_step.py [--shapes 32x128 4x1024] [--repeats 3] [--steps 2]

Same body and sizes on both sides: ``modernbert-small`` (7 x 256, GeGLU 384, windows of 128,
every third block global), vocabulary 30,522, masking 15%.

- ours: what `electra pretrain --preset modernbert-small` runs (``electra.train.pretraining.
  train_step``: the ELECTRA objective, a generator 1/4 wide sharing the embeddings and the
  discriminator, at the default precision: bf16 autocast where the CPU has bf16 units),
  unpadded layout, AdamW, clipping, schedule.
- hf: transformers' ``ModernBertForMaskedLM`` (sdpa attention) in fp32, as a
  transformers-based script trains it: labels -100 off the masked positions, torch's AdamW,
  clipping. It trains one model, the MLM; ours trains two (the generator and the
  discriminator) and samples between them.

Each (side, shape) is timed in its own process, interleaved ours/hf for ``repeats`` rounds:
tokens/s min/median/max, the paired ratio ours/hf, each side's peak RSS. The last line is
JSON.
"""

from __future__ import annotations

import peer_step
import torch

from electra.data.tokenizer import SpecialTokens
from electra.model.bodies import model_preset
from electra.objectives.config import ObjectiveConfig

VOCAB = 30522
SPECIAL = SpecialTokens(pad=0, unk=100, cls=101, sep=102, mask=103)


def batch(B: int, T: int, seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1000, VOCAB, (B, T), generator=g)
    ids[:, 0], ids[:, -1] = SPECIAL.cls, SPECIAL.sep
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids),
            "token_type_ids": torch.zeros_like(ids)}


def build(side: str, B: int, T: int):
    """The step function of one side."""
    cfg = model_preset("modernbert-small", vocab_size=VOCAB, max_position_embeddings=max(T, 512))
    obj = ObjectiveConfig(max_predictions=int(0.155 * T))
    torch.manual_seed(0)
    if side == "ours":
        return peer_step.ours(cfg, obj, SPECIAL, B)

    from transformers import ModernBertForMaskedLM

    from electra.model.bodies.modernbert.hf import to_config as to_modernbert_config
    from electra.objectives.masking import mask_inputs

    hf_cfg = to_modernbert_config(cfg)
    hf_cfg._attn_implementation = "sdpa"
    model = ModernBertForMaskedLM(hf_cfg).train()
    opt = torch.optim.AdamW(model.parameters(), lr=5e-4)
    rng = torch.Generator().manual_seed(1)

    def step(b):
        m = mask_inputs(b["input_ids"], b["attention_mask"], SPECIAL, VOCAB, obj, rng)
        labels = torch.full_like(b["input_ids"], -100)
        labels.scatter_(1, m.positions, torch.where(m.weights, m.targets, -100))
        loss = model(input_ids=m.input_ids, attention_mask=b["attention_mask"],
                     labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
    return step


if __name__ == "__main__":
    peer_step.main(__file__, __doc__, build, batch, ["32x128", "4x1024"])
