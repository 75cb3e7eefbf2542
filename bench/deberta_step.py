"""Our DeBERTa-V3 RTD step against the step a user of transformers' DebertaV2 classes writes.

    python bench/deberta_step.py [--shapes 16x128 4x512] [--repeats 3] [--steps 2]

Same body and sizes on both sides: ``debertav3-xsmall`` (12 x 384, 6 heads, 256 position
buckets; the generator as wide and 6 blocks deep), DeBERTa-V3's vocabulary of 128,100, 15% of
the tokens masked.

- ours: what `electra pretrain --preset debertav3-xsmall` runs (``electra.commands.pretrain.
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

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

from electra.config import TrainConfig, model_preset
from electra.data.tokenizer import SpecialTokens
from electra.objectives.config import OBJECTIVE_PRESETS, ObjectiveConfig, RunConfig

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
    obj = ObjectiveConfig(**{**OBJECTIVE_PRESETS[PRESET], "max_predictions": int(0.155 * T)})
    torch.manual_seed(0)
    if side == "ours":
        from electra.commands.pretrain import make_trainer, train_step
        from electra.objectives.pretraining import ElectraPretrainingModel
        from electra.runtime import Runtime

        run = RunConfig(model=cfg, objective=obj, train=TrainConfig(
            batch_size=B, warmup_steps=0, max_steps=1000))
        rt = Runtime()
        trainer = make_trainer(ElectraPretrainingModel(cfg, obj, SPECIAL,
                                                       rt.model_kernels(run.train.unpad)), run, rt)
        return lambda b: train_step(trainer, b, run, SPECIAL, B)

    from transformers import DebertaV2ForMaskedLM, DebertaV2ForTokenClassification

    from electra.objectives.masking import mask_inputs
    from electra.saved.hf_format import to_deberta_config

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


def worker(side: str, B: int, T: int, steps: int) -> None:
    from electra.runtime import keep_freed_memory

    keep_freed_memory()
    step = build(side, B, T)
    step(batch(B, T, 0))  # warm-up
    t0 = time.perf_counter()
    for i in range(steps):
        step(batch(B, T, i + 1))
    dt = time.perf_counter() - t0
    print(json.dumps({"tok_s": B * T * steps / dt,
                      "rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20}))


def measure(side: str, B: int, T: int, steps: int, threads: int) -> dict:
    out = subprocess.run([sys.executable, __file__, "--worker", side, "--shapes", f"{B}x{T}",
                          "--steps", str(steps), "--threads", str(threads)],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", nargs="+", default=["16x128", "4x512"])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--worker", choices=["ours", "hf"])
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    if a.worker:
        B, T = (int(x) for x in a.shapes[0].split("x"))
        return worker(a.worker, B, T, a.steps)
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text()
                .splitlines() if line.startswith("model name")), "unknown CPU")
    print(f"{cpu}; torch {torch.__version__}; {a.threads} threads")
    report = {"cpu": cpu, "shapes": {}}
    for shape in a.shapes:
        B, T = (int(x) for x in shape.split("x"))
        runs: dict[str, list[dict]] = {"ours": [], "hf": []}
        for _ in range(a.repeats):
            for side in ("ours", "hf"):
                runs[side].append(measure(side, B, T, a.steps, a.threads))
        ratios = [o["tok_s"] / h["tok_s"] for o, h in zip(runs["ours"], runs["hf"], strict=True)]
        row = {side: {"tok_s": [round(min(t), 1), round(statistics.median(t), 1),
                                round(max(t), 1)],
                      "rss_gb": round(max(r["rss_gb"] for r in rs), 2)}
               for side, rs in runs.items() for t in [[r["tok_s"] for r in rs]]}
        row["ratio"] = [round(min(ratios), 2), round(statistics.median(ratios), 2),
                        round(max(ratios), 2)]
        report["shapes"][shape] = row
        print(f"{shape}: ours {row['ours']['tok_s']} tok/s (RSS {row['ours']['rss_gb']} GB), "
              f"hf {row['hf']['tok_s']} tok/s (RSS {row['hf']['rss_gb']} GB), "
              f"ours/hf {row['ratio']} (min/median/max)")
    print(json.dumps(report))


if __name__ == "__main__":
    main()
