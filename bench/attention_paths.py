"""Attention without dropout in training on the CPU: written out (softmax(q k^T) v, what
``FAST_CPU`` runs for rows up to ``WRITTEN_KEYS``) against SDPA's CPU kernel.

    python bench/attention_paths.py [--repeats 5] [--keys 64 128 256 512]
        [--local 512 1024 2048] [--shapes 32x128 16x256 4x1024] [--rounds 3] [--threads 2]

Part 1, the kernels: 4 heads of 64 over 16,384 tokens (rows of each ``--keys`` length), bf16
and fp32, the forward alone (no gradient: evaluation) and forward + backward, ms min/median/
max over ``--repeats``; and a ModernBERT local block's blocked kernel (keys at most 64 away:
blocks of 128 queries against their 256 keys, ``local_attention``) over 8,192 tokens at each
``--local`` length, the blocks through SDPA or written out, forward and backward. Part 2, a
whole step: ModernBERT-small's ELECTRA pretraining step (``electra pretrain --preset
modernbert-small``: attention dropout 0, bf16 where the CPU has it) with the rule as it is
against every attention through SDPA (``WRITTEN_KEYS`` emptied), each in its own process,
interleaved for ``--rounds`` rounds: seconds a step (the least of 3 after one warm-up) and
the paired ratio SDPA / written. The last line is JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "bench")]


def spread(values: list[float], digits: int = 1) -> list[float]:
    return [round(min(values), digits), round(statistics.median(values), digits),
            round(max(values), digits)]


def timed(f, repeats: int) -> list[float]:
    f()  # warm-up
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        f()
        out.append(1e3 * (time.perf_counter() - t0))
    return out


def kernel_row(dtype: torch.dtype, T: int, repeats: int) -> dict:
    from electra.model.kernels import written_attention

    q, k, v = (torch.randn(16384 // T, 4, T, 64, dtype=dtype, requires_grad=True)
               for _ in range(3))
    g, plain = torch.ones_like(q), torch.nn.Identity()
    paths = {"written": lambda: written_attention(q, k, v, None, plain),
             "sdpa": lambda: F.scaled_dot_product_attention(q, k, v)}
    row: dict = {"dtype": str(dtype).removeprefix("torch."), "keys": T}
    for name, f in paths.items():
        with torch.no_grad():
            row[f"{name}_forward_ms"] = spread(timed(f, repeats))
        row[f"{name}_backward_too_ms"] = spread(timed(lambda f=f: f().backward(g), repeats))
    return row


def local_row(dtype: torch.dtype, T: int, repeats: int) -> dict:
    from electra.model.kernels import local_attention

    q, k, v = (torch.randn(max(1, 8192 // T), 4, T, 64, dtype=dtype, requires_grad=True)
               for _ in range(3))
    g = torch.ones_like(q)
    row: dict = {"dtype": str(dtype).removeprefix("torch."), "local_length": T}
    for name, written in (("written", True), ("sdpa", False)):
        row[f"{name}_backward_too_ms"] = spread(timed(
            lambda w=written: local_attention(q, k, v, None, 64, 128, written=w).backward(g),
            repeats))
    return row


def kernels(keys: list[int], local: list[int], repeats: int) -> list[dict]:
    rows = []
    for dtype in (torch.bfloat16, torch.float32):
        for T in keys:
            rows.append(kernel_row(dtype, T, repeats))
            print(rows[-1], flush=True)
        for T in local:
            rows.append(local_row(dtype, T, repeats))
            print(rows[-1], flush=True)
    return rows


def step_worker(mode: str, B: int, T: int) -> None:
    import modernbert_step

    from electra.model import kernels as k

    if mode == "sdpa":
        k.WRITTEN_KEYS.clear()
    step = modernbert_step.build("ours", B, T)
    step(modernbert_step.batch(B, T, 0))
    best = min(timed(lambda: step(modernbert_step.batch(B, T, 1)), 3))
    print(json.dumps({"s": best / 1e3}))


def steps(shapes: list[str], rounds: int, threads: int) -> list[dict]:
    rows = []
    for shape in shapes:
        got: dict[str, list[float]] = {"written": [], "sdpa": []}
        for _ in range(rounds):
            for mode in got:
                out = subprocess.run([sys.executable, __file__, "--worker", mode, "--shapes",
                                      shape, "--threads", str(threads)], check=True,
                                     capture_output=True, text=True).stdout
                got[mode].append(json.loads(out.strip().splitlines()[-1])["s"])
        ratio = [s / w for w, s in zip(got["written"], got["sdpa"], strict=True)]
        row = {"shape": shape, **{f"{m}_s": spread(v, 3) for m, v in got.items()},
               "sdpa_over_written": spread(ratio, 2)}
        print(row, flush=True)
        rows.append(row)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--keys", type=int, nargs="+", default=[64, 128, 256, 512])
    ap.add_argument("--local", type=int, nargs="*", default=[512, 1024, 2048])
    ap.add_argument("--shapes", nargs="*", default=["32x128", "16x256", "4x1024"])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--worker", choices=["written", "sdpa"])
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    from electra.runtime import keep_freed_memory

    keep_freed_memory()  # as the commands run: freed memory reused, not faulted in again
    if a.worker:
        B, T = (int(x) for x in a.shapes[0].split("x"))
        return step_worker(a.worker, B, T)
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text()
                .splitlines() if line.startswith("model name")), "unknown CPU")
    print(f"{cpu}; torch {torch.__version__}; {a.threads} threads", flush=True)
    report = {"cpu": cpu, "kernels": kernels(a.keys, a.local, a.repeats),
              "steps": steps(a.shapes, a.rounds, a.threads) if a.shapes else []}
    print(json.dumps(report))


if __name__ == "__main__":
    main()
