"""Fine-tuning with batches grouped by length against random batches, the whole command timed
interleaved in one run (A B A B ...).

    python bench/finetune_grouping.py [--task SST-2] [--rows 2000] [--repeats 3]
                                      [--precision auto]

ELECTRA-Small from random init (`--random-init small` with BERT's vocabulary), the first
``--rows`` training rows of a GLUE task from ../shared/data/glue (its dev set for the score),
one epoch, seed 1: `electra finetune` as a user runs it, without and with
``--set group_by_length=true``. Prints each side's seconds (min/median/max), the paired
ratios and the last repeat's dev scores.
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
GLUE = ROOT.parent / "shared" / "data" / "glue"
VOCAB = ROOT.parent / "shared" / "data" / "vocab" / "bert-base-uncased-vocab.txt"


def run(task: Path, out: Path, grouped: bool, rows: int, precision: str) -> tuple[float, dict]:
    cmd = [sys.executable, "-m", "electra", "finetune", "--random-init", "small", "--tokenizer",
           str(VOCAB), "--task", task.name.lower().replace("-", ""), "--data", str(task),
           "--out", str(out), "--quiet", "--set", "epochs=1", "--set",
           f"max_train_examples={rows}", "--set", f"precision={precision}",
           "--set", f"group_by_length={str(grouped).lower()}"]
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    return seconds, json.loads((out / "results.json").read_text())["median"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", default="SST-2")
    ap.add_argument("--rows", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--precision", default="auto")
    args = ap.parse_args()
    task = GLUE / args.task
    if not task.is_dir():
        raise SystemExit(f"{task}: absent (this bench needs ../shared/data/glue)")
    times: dict[str, list[float]] = {"random": [], "grouped": []}
    scores: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.repeats):
            for name in times:
                out = Path(tmp) / f"{name}-{r}"
                seconds, scores[name] = run(task, out, name == "grouped", args.rows,
                                            args.precision)
                times[name].append(seconds)
    print(f"{args.task}, {args.rows} rows, 1 epoch, ELECTRA-Small from random init, "
          f"precision={args.precision}, {args.repeats} interleaved repeats")
    for name, v in times.items():
        print(f"{name:8s} seconds min/med/max {min(v):6.1f} {statistics.median(v):6.1f} "
              f"{max(v):6.1f}   dev {json.dumps(scores[name])}")
    ratios = [a / b for a, b in zip(times["random"], times["grouped"], strict=True)]
    print(f"speed-up (random / grouped) min/med/max {min(ratios):.2f} "
          f"{statistics.median(ratios):.2f} {max(ratios):.2f}")


if __name__ == "__main__":
    main()
