"""The harness of the step benchmarks against a transformers peer (``modernbert_step.py``,
``deberta_step.py``): each (side, shape) timed in its own process, interleaved ours/hf for
``repeats`` rounds; tokens/s min/median/max, the paired ratio ours/hf, each side's peak RSS;
the last line JSON. A script hands :func:`main` its ``build(side, B, T)`` (the side's step
function) and ``batch(B, T, seed)``."""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

Build = Callable[[str, int, int], Callable[[Any], None]]


def ours(cfg: Any, obj: Any, special: Any, B: int) -> Callable[[Any], None]:
    """The step `electra pretrain` runs (``electra.train.pretraining.train_step``: the
    objective, AdamW, clipping, schedule, the default precision) for ``cfg`` and ``obj``."""
    from electra.config import TrainConfig
    from electra.objectives.pretraining import ElectraPretrainingModel
    from electra.run_config import RunConfig
    from electra.runtime import Runtime
    from electra.train.pretraining import make_trainer, train_step

    run = RunConfig(model=cfg, objective=obj, train=TrainConfig(
        batch_size=B, warmup_steps=0, max_steps=1000))
    rt = Runtime()
    trainer = make_trainer(ElectraPretrainingModel(cfg, obj, special,
                                                   rt.model_kernels(run.train.unpad)), run, rt)
    return lambda b: train_step(trainer, b, run, special, B)


def worker(build: Build, batch: Callable[..., Any], side: str, B: int, T: int,
           steps: int) -> None:
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


def measure(script: str, side: str, B: int, T: int, steps: int, threads: int) -> dict:
    out = subprocess.run([sys.executable, script, "--worker", side, "--shapes", f"{B}x{T}",
                          "--steps", str(steps), "--threads", str(threads)],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(script: str, doc: str, build: Build, batch: Callable[..., Any],
         shapes: list[str]) -> None:
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--shapes", nargs="+", default=shapes)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--worker", choices=["ours", "hf"])
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    if a.worker:
        B, T = (int(x) for x in a.shapes[0].split("x"))
        return worker(build, batch, a.worker, B, T, a.steps)
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text()
                .splitlines() if line.startswith("model name")), "unknown CPU")
    print(f"{cpu}; torch {torch.__version__}; {a.threads} threads")
    report: dict[str, Any] = {"cpu": cpu, "shapes": {}}
    for shape in a.shapes:
        B, T = (int(x) for x in shape.split("x"))
        runs: dict[str, list[dict]] = {"ours": [], "hf": []}
        for _ in range(a.repeats):
            for side in ("ours", "hf"):
                runs[side].append(measure(script, side, B, T, a.steps, a.threads))
        ratios = [o["tok_s"] / h["tok_s"] for o, h in zip(runs["ours"], runs["hf"], strict=True)]
        row: dict[str, Any] = {
            side: {"tok_s": [round(min(t), 1), round(statistics.median(t), 1),
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
