"""Our ELECTRA-Small training step against the usual transformers-based one, same machine, same run.

    python bench/pretrain_step.py [--batch 32 128] [--repeats 3] [--steps 2] [--threads 2]

Both sides: discriminator 12x256 (ELECTRA-Small), generator 1/4 wide, shared embeddings,
vocabulary 30,522, seq 128, masking 15% (max 19 per sequence), lambda = 50, AdamW, clip 1.0.

- ours: what `electra pretrain` runs (electra.train.pretraining.train_step: the objective on
  our model under bf16 autocast, inverse-CDF sampling, lane dropout, then the scaffold's
  non-finite check, clipping, foreach AdamW and schedule).
- hf: transformers' ElectraForMaskedLM + ElectraForPreTraining in fp32, the generator head
  and cross-entropy over all positions (labels -100 off the masked ones), Gumbel-max
  sampling at the masked positions, torch's AdamW.

Both sides run with malloc keeping freed memory (``electra.runtime.keep_freed_memory``, as
`electra pretrain` sets it), so the ratio compares the steps, not the allocators.

First, from the same weights and batch in fp32 with dropout off, both must give the same
generator and discriminator losses (tolerance printed). Then each (side, batch) is timed in
its own process, interleaved ours/hf for `repeats` rounds, reporting tokens/s min/median/max,
the paired ratio, achieved GFLOP/s, MFU against bf16 and fp32 matmul peaks measured in this
run, and each side's peak RSS. The last line is JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

from electra.data.tokenizer import SpecialTokens
from electra.model.bodies import model_preset
from electra.objectives.config import ObjectiveConfig
from electra.objectives.flops import step_flops_per_sequence

SEQ = 128
SPECIAL = SpecialTokens(pad=0, unk=100, cls=101, sep=102, mask=103)  # bert-base-uncased
OBJ = ObjectiveConfig()


def batch(bs: int, seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1000, 30522, (bs, SEQ), generator=g)
    ids[:, 0], ids[:, -1] = SPECIAL.cls, SPECIAL.sep
    ids[:, SEQ // 2] = SPECIAL.sep
    types = torch.zeros_like(ids)
    types[:, SEQ // 2 + 1 :] = 1
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "token_type_ids": types}


def build(side: str, dropout: float = 0.1):
    """(models, optimizer, step function) for one side, from the same seed."""
    from electra.objectives.pretraining import ElectraPretrainingModel
    from electra.train.optim import param_groups

    cfg = model_preset("small", hidden_dropout=dropout, attention_dropout=dropout)
    torch.manual_seed(0)
    ours = ElectraPretrainingModel(cfg, OBJ, SPECIAL)
    if side == "ours":
        from electra.config import TrainConfig
        from electra.objectives.masking import Batch, Draws
        from electra.objectives.pretraining import electra_forward
        from electra.run_config import RunConfig
        from electra.runtime import Runtime, autocast
        from electra.train.pretraining import make_trainer, train_step

        rng = torch.Generator().manual_seed(1)
        trainer = {}

        def step(b, train=True, precision="bf16"):
            if not train:  # the equality check: the objective's forward alone
                with autocast(torch.device("cpu"), precision):
                    out = electra_forward(ours, Batch.of(b), Draws(rng=rng))
                return out.gen_loss.detach(), out.disc_loss.detach()
            bs = len(b["input_ids"])
            run = RunConfig(model=cfg, objective=OBJ, train=TrainConfig(
                batch_size=bs, precision=precision, warmup_steps=0))
            if "t" not in trainer:
                trainer["t"] = make_trainer(ours, run, Runtime())
            stats = train_step(trainer["t"], b, run, SPECIAL, bs)
            return stats["gen_loss"], stats["disc_loss"]

        return ours, step

    from transformers import ElectraForMaskedLM, ElectraForPreTraining

    from electra.model.bodies.bert.hf import to_config as to_hf_config
    from electra.model.bodies.bert.hf import to_state as to_hf_state_dict
    from electra.objectives.masking import mask_inputs

    disc = ElectraForPreTraining(to_hf_config(cfg))
    gen = ElectraForMaskedLM(to_hf_config(cfg.generator_config()))
    disc.load_state_dict(to_hf_state_dict(ours.discriminator.state_dict(), "discriminator"))
    gen.load_state_dict(to_hf_state_dict(ours.generator.state_dict(), "generator"))
    gen.electra.embeddings = disc.electra.embeddings  # shared embeddings, as in ELECTRA
    gen.generator_lm_head.weight = disc.electra.embeddings.word_embeddings.weight
    model = torch.nn.ModuleDict({"generator": gen, "discriminator": disc})
    opt = torch.optim.AdamW(param_groups(model, 0.01), lr=5e-4, eps=1e-6)
    rng = torch.Generator().manual_seed(1)

    def step(b, train=True, precision="fp32"):
        ids, am, tt = b["input_ids"], b["attention_mask"], b["token_type_ids"]
        m = mask_inputs(ids, am, SPECIAL, cfg.vocab_size, OBJ, rng)
        labels = torch.full_like(ids, -100)
        labels.scatter_(1, m.positions, torch.where(m.weights, m.targets, -100))
        g_out = gen(input_ids=m.input_ids, attention_mask=am, token_type_ids=tt, labels=labels)
        with torch.no_grad():  # Gumbel-max at the masked positions, fp32
            logits = torch.gather(g_out.logits, 1, m.positions[..., None].expand(
                -1, -1, cfg.vocab_size)).float()
            u = torch.rand(logits.shape, generator=rng)
            sampled = (logits - torch.log(-torch.log(u.clamp(1e-20, 1 - 1e-7)))).argmax(-1)
            corrupted = ids.scatter(1, m.positions, torch.where(m.weights, sampled, m.targets))
            replaced = (corrupted != ids).long()
        d_out = disc(input_ids=corrupted, attention_mask=am, token_type_ids=tt,
                     labels=replaced)
        if train:
            (g_out.loss + OBJ.disc_weight * d_out.loss).backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
        return g_out.loss.detach(), d_out.loss.detach()

    return model, step


def check_same_losses() -> float:
    """Same weights, batch, masking and samples in fp32 without dropout: losses must agree."""
    b = batch(8, seed=5)
    _, ours = build("ours", dropout=0.0)
    _, hf = build("hf", dropout=0.0)
    g1, _ = ours(b, train=False, precision="fp32")
    g2, _ = hf(b, train=False)
    # Inverse-CDF (ours) and Gumbel-max (hf) draw different samples from the same
    # distribution, so the generator loss is compared here and the discriminator loss on
    # one shared corruption (disc_loss_on_same_corruption).
    dg = abs(float(g1) - float(g2))
    assert dg < 1e-4, f"generator losses differ: {float(g1)} vs {float(g2)}"
    return dg


def disc_loss_on_same_corruption() -> float:
    """Both discriminators on one corrupted batch: the RTD losses must agree (fp32)."""
    from transformers import ElectraForPreTraining

    from electra.model import Discriminator
    from electra.model.bodies.bert.hf import to_config as to_hf_config
    from electra.model.bodies.bert.hf import to_state as to_hf_state_dict
    from electra.objectives.losses import discriminator_loss

    cfg = model_preset("small", hidden_dropout=0.0, attention_dropout=0.0)
    torch.manual_seed(0)
    d = Discriminator(cfg).eval()
    hf = ElectraForPreTraining(to_hf_config(cfg)).eval()
    hf.load_state_dict(to_hf_state_dict(d.state_dict(), "discriminator"))
    b = batch(8, seed=6)
    labels = torch.rand(b["input_ids"].shape, generator=torch.Generator().manual_seed(0)) < 0.15
    with torch.no_grad():
        ours = discriminator_loss(d(b["input_ids"], b["attention_mask"], b["token_type_ids"]),
                                  labels, b["attention_mask"])
        theirs = hf(input_ids=b["input_ids"], attention_mask=b["attention_mask"],
                    token_type_ids=b["token_type_ids"], labels=labels.long()).loss
    return abs(float(ours) - float(theirs))


def matmul_peak(dtype: torch.dtype, n: int = 2048, reps: int = 10) -> float:
    a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
    a @ b
    t0 = time.perf_counter()
    for _ in range(reps):
        a @ b
    return 2 * n**3 * reps / (time.perf_counter() - t0)


def worker(side: str, bs: int, steps: int) -> None:
    from electra.runtime import keep_freed_memory

    keep_freed_memory()
    _, step = build(side)
    step(batch(bs, 0))  # warm-up (allocations, kernels)
    t0 = time.perf_counter()
    for i in range(steps):
        step(batch(bs, i + 1))
    dt = time.perf_counter() - t0
    rss_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    print(json.dumps({"tok_s": bs * SEQ * steps / dt, "rss_gb": rss_gb}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, nargs="+", default=[32, 128])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--steps", type=int, default=2, help="timed steps per measurement")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--worker", choices=["ours", "hf"], help=argparse.SUPPRESS)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if args.worker:
        worker(args.worker, args.batch[0], args.steps)
        return
    dg = check_same_losses()
    dd = disc_loss_on_same_corruption()
    print(f"equality (fp32, dropout off, same weights and batch): |gen_loss diff| {dg:.2e}, "
          f"|disc_loss diff| on one corruption {dd:.2e} (tolerance 1e-4)")
    assert dd < 1e-4, dd
    peak_bf16, peak_fp32 = matmul_peak(torch.bfloat16), matmul_peak(torch.float32)
    flops = step_flops_per_sequence(model_preset("small"), OBJ, SEQ) / SEQ
    print(f"matmul peak on {args.threads} threads: bf16 {peak_bf16 / 1e9:.0f} GFLOP/s, "
          f"fp32 {peak_fp32 / 1e9:.0f} GFLOP/s; useful work {flops / 1e6:.1f} MFLOP/token")
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
    summary = {}
    for bs in args.batch:
        runs: dict[str, list[dict]] = {"ours": [], "hf": []}
        for _ in range(args.repeats):
            for side in ("ours", "hf"):
                out = subprocess.run(
                    [sys.executable, str(Path(__file__).resolve()), "--worker", side,
                     "--batch", str(bs), "--steps", str(args.steps), "--threads",
                     str(args.threads)], capture_output=True, text=True, env=env, check=True)
                runs[side].append(json.loads(out.stdout.strip().splitlines()[-1]))
        tok = {s: [r["tok_s"] for r in v] for s, v in runs.items()}
        rss = {s: max(r["rss_gb"] for r in v) for s, v in runs.items()}
        ratios = [a / b for a, b in zip(tok["ours"], tok["hf"], strict=True)]
        med = {s: statistics.median(v) for s, v in tok.items()}
        print(f"\nbatch {bs} x {SEQ}, {args.repeats} rounds x {args.steps} steps")
        for s in ("ours", "hf"):
            gflops = med[s] * flops / 1e9
            print(f"  {s:4s} tokens/s min/med/max {min(tok[s]):7.0f} {med[s]:7.0f} "
                  f"{max(tok[s]):7.0f}  {gflops:6.1f} GFLOP/s  MFU bf16 "
                  f"{gflops * 1e9 / peak_bf16:.1%} fp32 {gflops * 1e9 / peak_fp32:.1%}  "
                  f"peak RSS {rss[s]:.2f} GB")
        print(f"  ratio ours/hf (paired) min/med/max {min(ratios):.2f} "
              f"{statistics.median(ratios):.2f} {max(ratios):.2f}")
        summary = {"bs": bs, "ours_tok_s": round(med["ours"]), "hf_tok_s": round(med["hf"]),
                   "ratio": round(statistics.median(ratios), 2),
                   "mfu_bf16": round(med["ours"] * flops / peak_bf16, 3),
                   "ours_rss_gb": round(rss["ours"], 2), "hf_rss_gb": round(rss["hf"], 2)}
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
