"""Where an `electra finetune` command's time goes before its first training step, for one or
more checkouts, interleaved (one repeat: every checkout once, in turn).

    python bench/finetune_start.py [--checkouts . /tmp/electra-252066b] [--repeats 3]
        [--rows 2000] [--task SST-2]

Each run is the SST-2 command of `bench/finetune_vs_transformers.py` (ELECTRA-Small from
random init, BERT's vocabulary, ``--rows`` training rows, one epoch, batch 32, the default
precision), started in a fresh interpreter with that checkout's ``src`` first on the path.
The interpreter's first line takes the time; it then imports torch (timed: torch's own
import), marks when `torch._dynamo` is first imported (torch.optim imports it when the first
optimizer is made or stepped) and when the first training step starts, and runs the command.
Prints, per checkout, seconds min/median/max from the interpreter's start to: torch
imported, the first step, the end; and the share of the command before its first step.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"

# Runs in the measured interpreter: marks, then the command itself.
PROBE = r"""
import time
t0 = time.perf_counter()
import json, sys
marks = {}
import torch
marks["torch"] = time.perf_counter() - t0
from electra.train import trainer
step = trainer.Trainer.train_step
def first(self, *args, **kwargs):
    marks.setdefault("first_step", time.perf_counter() - t0)
    marks.setdefault("dynamo_before_step", "torch._dynamo" in sys.modules)
    return step(self, *args, **kwargs)
trainer.Trainer.train_step = first
from electra.cli import main
try:
    main(sys.argv[1:])
except SystemExit as stop:
    assert not stop.code, stop.code
marks["end"] = time.perf_counter() - t0
print("MARKS " + json.dumps(marks))
"""


def run(checkout: Path, task: str, rows: int, seed: int, out: Path) -> dict:
    """One command's marks (seconds from the interpreter's start)."""
    argv = ["finetune", "--random-init", "small", "--tokenizer",
            str(SHARED / "vocab" / "bert-base-uncased-vocab.txt"),
            "--task", task.lower().replace("-", ""), "--data", str(SHARED / "glue" / task),
            "--out", str(out), "--quiet", "--seeds", str(seed), "--set", "epochs=1",
            "--set", f"max_train_examples={rows}"]
    env = {**os.environ, "PYTHONPATH": str(checkout.resolve() / "src")}
    done = subprocess.run([sys.executable, "-c", PROBE, *argv], capture_output=True,
                          text=True, env=env, check=True)
    line = next(x for x in done.stdout.splitlines() if x.startswith("MARKS "))
    return json.loads(line[len("MARKS "):])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--checkouts", nargs="+", type=Path, default=[ROOT])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--rows", type=int, default=2000)
    ap.add_argument("--task", default="SST-2")
    args = ap.parse_args()
    marks: dict[Path, list[dict]] = {c: [] for c in args.checkouts}
    with tempfile.TemporaryDirectory() as tmp:
        for repeat in range(args.repeats):
            for i, checkout in enumerate(args.checkouts):
                got = run(checkout, args.task, args.rows, repeat + 1,
                          Path(tmp) / f"{repeat}-{i}")
                marks[checkout].append(got)
                print(f"  repeat {repeat} {checkout}: {got}", flush=True)
    print(f"{args.task}, {args.rows} rows, 1 epoch, ELECTRA-Small from random init, "
          f"{args.repeats} interleaved repeats; seconds from the interpreter's start, "
          "min/median/max")
    for checkout, runs in marks.items():
        def col(key: str, runs: list[dict] = runs) -> str:
            xs = sorted(r[key] for r in runs)
            return f"{xs[0]:5.2f} {statistics.median(xs):5.2f} {xs[-1]:5.2f}"

        share = sorted(r["first_step"] / r["end"] for r in runs)
        dynamo = {r["dynamo_before_step"] for r in runs}
        print(f"{checkout!s:28s} torch imported {col('torch')}   first step "
              f"{col('first_step')}   end {col('end')}   before the first step "
              f"{100 * share[0]:.0f}-{100 * share[-1]:.0f}%   torch._dynamo imported "
              f"before it: {sorted(dynamo)}")


if __name__ == "__main__":
    main()
