"""ModernBERT's local attention on a CPU: the dense masked matrix against the blocked kernel.

    python bench/local_attention.py [--lengths 128 512 1024 2048 8192] [--repeats 3]

A local block of ``modernbert-small`` (4 heads of 64, a window of 128 tokens: keys at most 64
away), forward and backward at the default precision (bf16 autocast) and in fp32, 8,192
tokens a batch (B = 8192 / T rows). "dense": SDPA over the T x T scores with the band mask
(what the kernels ran before); "blocked": ``electra.model.kernels.local_attention`` with
blocks of ``chunk`` queries against their chunk + 128 keys. Interleaved, ``repeats`` rounds,
min/median/max ms and the median ratio dense/blocked. The last line is JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from electra.model.kernels import band, local_attention

HEADS, HS, WINDOW = 4, 64, 64


def run(kind: str, T: int, chunk: int, dtype: torch.dtype, reps: int) -> float:
    B = max(1, 8192 // T)
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(B, HEADS, T, HS, generator=g, dtype=dtype, requires_grad=True)
               for _ in range(3))
    keys = torch.ones(B, T, dtype=torch.bool)

    def once() -> None:
        if kind == "dense":
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=band(
                keys[:, None, None, :], T, WINDOW, q.device))
        else:
            out = local_attention(q, k, v, keys, WINDOW, chunk)
        out.float().sum().backward()

    once()
    t0 = time.perf_counter()
    for _ in range(reps):
        once()
    return (time.perf_counter() - t0) / reps * 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lengths", type=int, nargs="+", default=[128, 512, 1024, 2048, 8192])
    ap.add_argument("--chunks", type=int, nargs="+", default=[64, 128, 256])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text()
                .splitlines() if line.startswith("model name")), "unknown CPU")
    print(f"{cpu}; torch {torch.__version__}; {a.threads} threads")
    report: dict = {"cpu": cpu, "rows": []}
    for dtype in (torch.bfloat16, torch.float32):
        for T in a.lengths:
            kinds = ["dense"] + [f"blocked-{c}" for c in a.chunks if c < T]
            times: dict[str, list[float]] = {k: [] for k in kinds}
            for _ in range(a.repeats):
                for kind in kinds:
                    chunk = int(kind.split("-")[1]) if "-" in kind else 0
                    times[kind].append(run(kind.split("-")[0], T, chunk, dtype, 2))
            row = {"dtype": str(dtype).split(".")[1], "T": T,
                   **{k: [round(min(t), 1), round(statistics.median(t), 1), round(max(t), 1)]
                      for k, t in times.items()}}
            best = min(kinds[1:], key=lambda k: statistics.median(times[k]), default=None)
            if best:
                row["best"] = best
                row["dense_over_best"] = round(statistics.median(times["dense"])
                                               / statistics.median(times[best]), 2)
            report["rows"].append(row)
            print(row)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
