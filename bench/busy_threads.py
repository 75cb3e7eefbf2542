"""How many torch threads a training step should use on a machine other jobs keep busy.

    python bench/busy_threads.py [--loads 0,2,5] [--threads 1,2] [--steps 3] [--repeats 2]

For each load, that many busy-loop processes (``while True: pass``) run beside a fresh
process that times ``--steps`` steps of `electra pretrain`'s training step (the demo's
shape: the ``tiny`` preset, batch 32 x 128, the default precision) with ``--threads``
torch threads; thread counts interleave, each repeated. Prints seconds a step,
min/median/max, per load and thread count. Data: as bench/step_ablation.py.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def worker(args: argparse.Namespace) -> None:
    import torch

    torch.set_num_threads(args.worker_threads)
    sys.path.insert(0, str(ROOT / "bench"))
    from step_ablation import training_step

    cfg = Path(args.tmp) / "demo.toml"
    cfg.write_text('preset = "tiny"\n[train]\nlr = 1e-3\n')
    step = training_step(args.data, str(cfg), 32)
    step()
    t0 = time.perf_counter()
    for _ in range(args.steps):
        step()
    print(json.dumps({"s_per_step": (time.perf_counter() - t0) / args.steps}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--loads", default="0,2,5")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--data")
    ap.add_argument("--worker-threads", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--tmp", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker_threads:
        return worker(args)
    tmp = tempfile.TemporaryDirectory()
    sys.path.insert(0, str(ROOT / "bench"))
    from step_ablation import default_data

    data = args.data or default_data(tmp.name)
    rows = {}
    for load in map(int, args.loads.split(",")):
        busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
                for _ in range(load)]
        try:
            for _ in range(args.repeats):
                for t in map(int, args.threads.split(",")):
                    out = subprocess.run(
                        [sys.executable, __file__, "--worker-threads", str(t), "--tmp",
                         tmp.name, "--data", data, "--steps", str(args.steps)],
                        capture_output=True, text=True, check=True).stdout
                    rows.setdefault((load, t), []).append(
                        json.loads(out.strip().splitlines()[-1])["s_per_step"])
        finally:
            for p in busy:
                p.kill()
                p.wait()
    for (load, t), v in rows.items():
        print(f"load {load} busy loops, {t} thread(s): {min(v):.2f} / "
              f"{statistics.median(v):.2f} / {max(v):.2f} s a step (min/median/max, "
              f"{len(v)} runs)")


if __name__ == "__main__":
    main()
