"""The training step of two checkouts of electra, timed interleaved in one run (A B A B ...).

    git worktree add /tmp/electra-before HEAD~1      # or any commit
    python bench/ab_step.py /tmp/electra-before .  [--config configs/cpu-30min.toml]

Each measurement is a fresh process importing electra from that checkout's ``src`` and the
step function from that checkout's own ``bench/step_ablation.py`` (``training_step``: what
that commit's `electra pretrain` runs): it builds the model and optimizer from the same seed,
warms up, and times ``--steps`` full steps (forward, backward, clipping, AdamW) on the same
batches. Both sides read the same prepared
data (by default ../shared/data's held-out corpus with BERT's vocabulary; see
step_ablation.py). Prints tokens/s min/median/max per side and the paired B/A ratios.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def worker(args: argparse.Namespace) -> None:
    sys.path[:0] = [str(Path(args.worker) / "src"), str(Path(args.worker) / "bench")]
    import time

    from step_ablation import training_step

    step = training_step(args.data, args.config, args.batch)
    for _ in range(args.warmup):
        step()
    t0 = time.perf_counter()
    n = sum(step() for _ in range(args.steps))
    print(json.dumps({"tokens_per_s": n / (time.perf_counter() - t0)}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("a", nargs="?", help="checkout A (the baseline)")
    ap.add_argument("b", nargs="?", help="checkout B")
    ap.add_argument("--data", help="prepared folder (default: as step_ablation.py)")
    ap.add_argument("--config", default=str(ROOT / "configs/cpu-30min.toml"))
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--steps", type=int, default=4, help="timed steps per measurement")
    ap.add_argument("--repeats", type=int, default=4)
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return worker(args)
    if not (args.a and args.b):
        ap.error("give two checkouts: A B")
    tmp = tempfile.TemporaryDirectory()
    if args.data is None:
        sys.path.insert(0, str(ROOT / "bench"))
        from step_ablation import default_data

        args.data = default_data(tmp.name)
    sides = {"A": str(Path(args.a).resolve()), "B": str(Path(args.b).resolve())}
    results: dict[str, list[float]] = {"A": [], "B": []}
    for _ in range(args.repeats):
        for side, src in sides.items():
            cmd = [sys.executable, __file__, "--worker", src, "--data", args.data,
                   "--config", args.config, "--batch", str(args.batch),
                   "--warmup", str(args.warmup), "--steps", str(args.steps)]
            out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
            results[side].append(json.loads(out.splitlines()[-1])["tokens_per_s"])
    print(f"config {args.config}, batch {args.batch} x {args.steps} timed steps, "
          f"{args.repeats} interleaved repeats")
    for side, v in results.items():
        print(f"{side} {sides[side]}: tokens/s min/med/max {min(v):7.0f} "
              f"{statistics.median(v):7.0f} {max(v):7.0f}")
    ratios = [b / a for a, b in zip(results["A"], results["B"], strict=True)]
    print(f"B/A paired min/med/max {min(ratios):.2f} {statistics.median(ratios):.2f} "
          f"{max(ratios):.2f}")


if __name__ == "__main__":
    main()
