"""The CUDA path in about a minute on one GPU: what nothing on the CPU machine can test.

    python bench/gpu_check.py            # on a GPU machine (bench/gpu_kit.py uses its checks)
    python bench/gpu_check.py --smoke    # the same code on CPU at a tiny size (a dry run)

1. fp32: one batch through the ELECTRA objective (ELECTRA-Small's shape, dropout off) on the
   CPU and on the GPU from the same weights and random draws: every loss within 1e-4.
2. bf16: three optimizer steps under bf16 autocast with fused AdamW; losses finite.
3. fused AdamW (the GPU's optimizer, ``electra.train.optim.adamw``) against foreach AdamW on the
   CPU: one step from the same gradients, parameters within 1e-6.
4. Throughput: ELECTRA-Small (batch 128 x 128 tokens) and -Base (batch 32 x 512) training
   steps, bf16, tokens/s and MFU against the measured bf16 matmul peak.

Prints one JSON line with every figure; exits 1 if a check fails.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time

import torch

from electra.config import ObjectiveConfig, model_preset
from electra.io.tokenizer import SpecialTokens
from electra.model.kernels import kernels_for
from electra.objectives.flops import step_flops_per_sequence
from electra.objectives.masking import Noise
from electra.objectives.pretraining import ElectraPretrainingModel
from electra.train.optim import adamw, param_groups
from electra.train.runtime import autocast

SPECIAL = SpecialTokens(pad=0, unk=100, cls=101, sep=102, mask=103)


def make_batch(B: int, T: int, V: int, seed: int, device: torch.device) -> dict:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1000, V, (B, T), generator=g)
    ids[:, 0], ids[:, -1] = SPECIAL.cls, SPECIAL.sep
    return {"input_ids": ids.to(device), "attention_mask": torch.ones_like(ids).to(device),
            "token_type_ids": torch.zeros_like(ids).to(device)}


def model_for(preset: str, vocab: int, dropout: float = 0.1, device: str = "cpu",
              **over) -> ElectraPretrainingModel:
    """A model built with the kernels of the device it will run on."""
    cfg = model_preset(preset, vocab_size=vocab, hidden_dropout=dropout,
                       attention_dropout=dropout, **over)
    return ElectraPretrainingModel(cfg, ObjectiveConfig(), SPECIAL, kernels_for(device))


def to(noise: Noise, device: torch.device) -> Noise:
    return Noise(*(None if t is None else t.to(device) for t in (
        noise.scores, noise.mask_u, noise.random_ids, noise.sample_u, noise.span_u)))


def check_fp32(dev: torch.device, preset: str, B: int, T: int) -> dict:
    """Same weights, same draws, fp32 (no TF32): the CPU's and the GPU's losses."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(0)
    cpu = model_for(preset, 30522, dropout=0.0)
    gpu = copy.deepcopy(cpu).to(dev)
    noise = Noise.draw(B, T, 30522, ObjectiveConfig(), torch.Generator().manual_seed(1))
    out = {}
    for name, model, d in (("cpu", cpu, torch.device("cpu")), ("gpu", gpu, dev)):
        b = make_batch(B, T, 30522, 2, d)
        o = model(b["input_ids"], b["attention_mask"], b["token_type_ids"], to(noise, d))
        out[name] = {k: float(v.detach()) for k, v in o.losses.items()} | {
            "loss": float(o.loss.detach())}
        out[name + "_corrupted"] = o.corrupted_ids.cpu()
    diff = {k: abs(out["cpu"][k] - out["gpu"][k]) for k in out["cpu"]}
    same = bool((out["cpu_corrupted"] == out["gpu_corrupted"]).all())
    return {"fp32_losses_cpu": out["cpu"], "fp32_abs_diff": diff, "same_samples": same,
            "fp32_ok": same and max(diff[k] for k in ("gen_loss", "disc_loss")) <= 1e-4
            and diff["loss"] <= 1e-4 * max(1.0, abs(out["cpu"]["loss"]))}


def check_bf16_fused(dev: torch.device, preset: str, B: int, T: int) -> dict:
    """Three bf16 steps with fused AdamW on the device, then fused vs foreach on one step."""
    torch.manual_seed(0)
    model = model_for(preset, 30522, device=dev).to(dev)
    opt = adamw(param_groups(model, 0.01), lr=5e-4)
    losses = [bf16_step(model, opt, make_batch(B, T, 30522, step, dev), dev, step)
              for step in range(3)]
    fused = opt.defaults.get("fused") or False
    # Fused (device) against foreach (CPU) AdamW from the same weights and gradients.
    torch.manual_seed(0)
    a = model_for("tiny", 1000)
    grads = [torch.randn_like(p) for p in a.parameters()]
    b_model = copy.deepcopy(a).to(dev)
    for m, g_dev in ((a, "cpu"), (b_model, dev)):
        for p, g in zip(m.parameters(), grads, strict=True):
            p.grad = g.to(g_dev)
        adamw(param_groups(m, 0.01), lr=1e-3).step()
    gap = max(float((p.cpu() - q.detach().cpu()).abs().max())
              for p, q in zip(a.parameters(), b_model.parameters(), strict=True))
    finite = all(map(lambda x: x == x and abs(x) != float("inf"), losses))
    return {"bf16_losses": losses, "bf16_ok": finite, "fused_adamw": bool(fused),
            "fused_vs_foreach_max_diff": gap, "fused_ok": gap <= 1e-6}


def bf16_step(model: torch.nn.Module, opt: torch.optim.Optimizer, b: dict,
              dev: torch.device, step: int) -> float:
    """One training step under bf16 autocast; its loss."""
    with autocast(dev, "bf16"):
        o = model(b["input_ids"], b["attention_mask"], b["token_type_ids"],
                  rng=torch.Generator(dev).manual_seed(step))
    o.loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return float(o.loss.detach())


def matmul_peak(dev: torch.device, n: int) -> float:
    a = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    sync(dev)
    t0, reps = time.perf_counter(), 20
    for _ in range(reps):
        a @ b
    sync(dev)
    return 2 * n**3 * reps / (time.perf_counter() - t0)


def sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def throughput(dev: torch.device, preset: str, B: int, T: int, steps: int, peak: float) -> dict:
    """bf16 training steps of ``preset`` (ELECTRA objective, fused AdamW): tokens/s, MFU."""
    torch.manual_seed(0)
    model = model_for(preset, 30522, device=dev,
                      max_position_embeddings=max(512, T)).to(dev)
    opt = adamw(param_groups(model, 0.01), lr=1e-4)
    b = make_batch(B, T, 30522, 0, dev)
    times = []
    for step in range(steps + 3):
        sync(dev)
        t0 = time.perf_counter()
        bf16_step(model, opt, b, dev, step)
        sync(dev)
        if step >= 3:
            times.append(time.perf_counter() - t0)
    times.sort()
    med = times[len(times) // 2]
    flops = step_flops_per_sequence(model.config, ObjectiveConfig(), T) * B
    return {"tokens_per_s": round(B * T / med), "tflops": round(flops / med / 1e12, 1),
            "mfu": round(flops / med / peak, 3)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--smoke", action="store_true", help="run on CPU at a tiny size")
    args = p.parse_args()
    if args.smoke:
        dev, preset, sizes = torch.device("cpu"), "tiny", {"small": (4, 32), "base": (2, 64)}
        fp_preset, fp_b, peak_n, steps = "tiny", 2, 512, 2
    else:
        if not torch.cuda.is_available():
            print("gpu_check: no CUDA device (use --smoke for a CPU dry run)", file=sys.stderr)
            return 2
        dev, preset, sizes = torch.device("cuda"), "small", {"small": (128, 128),
                                                              "base": (32, 512)}
        fp_preset, fp_b, peak_n, steps = "small", 8, 8192, 10
    t0 = time.perf_counter()
    result = {"device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
              "torch": torch.__version__}
    result |= check_fp32(dev, fp_preset, fp_b, 128)
    result |= check_bf16_fused(dev, preset, fp_b, 128)
    peak = matmul_peak(dev, peak_n)
    result["bf16_matmul_peak_tflops"] = round(peak / 1e12, 1)
    for name, (B, T) in sizes.items():
        which = name if not args.smoke else "tiny"
        result[f"electra_{name}"] = throughput(dev, which, B, T, steps, peak)
    result["seconds"] = round(time.perf_counter() - t0, 1)
    ok = result["fp32_ok"] and result["bf16_ok"] and result["fused_ok"]
    result["ok"] = ok
    print(json.dumps(result, default=str))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
