"""The whole pretraining loop of two checkouts, timed interleaved (A B, B A, A B ...).

    git worktree add /tmp/electra-before HEAD~1      # or any commit
    python bench/ab_loop.py /tmp/electra-before .  [--config configs/cpu-30min.toml]

Where ``ab_step.py`` times the step function alone, this runs `electra pretrain` itself, each
measurement a fresh process importing electra from that checkout's ``src``: ``--steps``
steps of the config (no validation, no checkpoint before the end) on the same data. It
records the wall time between consecutive batch fetches (everything a step costs, loop
included) and the process's minor page faults per step (fresh memory from the kernel), and
reports, over the steps after the first 10: mean ms/step and median faults/step per side,
min/median/max, and the paired speed B/A (A's ms / B's ms). The order alternates each round
so that neither side always runs first. Without --data it packs ../shared/data's held-out
corpus with BERT's vocabulary (see step_ablation.py).
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SKIP = 10  # warm-up steps left out


def worker(args: argparse.Namespace) -> None:
    import resource
    import time

    sys.path.insert(0, str(Path(args.worker) / "src"))
    from electra.cli import main
    from electra.data import loader

    stamps: list[tuple[float, int]] = []
    fetch = loader.BatchLoader.__next__

    def timed_next(self):  # type: ignore[no-untyped-def]
        stamps.append((time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF).ru_minflt))
        return fetch(self)

    loader.BatchLoader.__next__ = timed_next  # type: ignore[method-assign]
    code = main(["pretrain", "--config", args.config, "--data", args.data, "--out", args.out,
                 "--overwrite", "--quiet", "--set", f"train.max_steps={args.steps}",
                 "--set", "train.eval_every=0", "--set", "train.save_every=100000",
                 "--set", "train.warmup_steps=10"])
    assert code == 0, code
    steps = [(b[0] - a[0], b[1] - a[1]) for a, b in itertools.pairwise(stamps)][SKIP:]
    print(json.dumps({"ms": 1000 * statistics.mean(t for t, _ in steps),
                      "faults": statistics.median(f for _, f in steps)}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("a", nargs="?", help="checkout A (the baseline)")
    ap.add_argument("b", nargs="?", help="checkout B")
    ap.add_argument("--data", help="prepared folder (default: as step_ablation.py)")
    ap.add_argument("--config", default=str(ROOT / "configs/cpu-30min.toml"))
    ap.add_argument("--steps", type=int, default=40, help="steps per run (the first 10 are "
                    "left out)")
    ap.add_argument("--repeats", type=int, default=6)
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
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
    results: dict[str, list[dict]] = {"A": [], "B": []}
    for r in range(args.repeats):
        for side in ("A", "B") if r % 2 == 0 else ("B", "A"):
            cmd = [sys.executable, __file__, "--worker", sides[side], "--data", args.data,
                   "--config", args.config, "--steps", str(args.steps),
                   "--out", f"{tmp.name}/run{side}"]
            out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
            results[side].append(json.loads(out.splitlines()[-1]))
    print(f"config {args.config}, {args.steps} steps of `electra pretrain` (the first {SKIP} "
          f"left out), {args.repeats} rounds, order alternating")
    for side, runs in results.items():
        ms = [r["ms"] for r in runs]
        faults = [r["faults"] for r in runs]
        print(f"{side} {sides[side]}: ms/step min/med/max {min(ms):6.0f} "
              f"{statistics.median(ms):6.0f} {max(ms):6.0f}; minor faults/step median "
              f"{statistics.median(faults):,.0f}")
    speed = [a["ms"] / b["ms"] for a, b in zip(results["A"], results["B"], strict=True)]
    print(f"speed B/A paired min/med/max {min(speed):.2f} {statistics.median(speed):.2f} "
          f"{max(speed):.2f}")


if __name__ == "__main__":
    main()
