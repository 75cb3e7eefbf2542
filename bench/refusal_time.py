"""How long a mistake takes to be answered: each refusal's wall time, a fresh `electra`
process each, against `python -c "import torch"` (what every refusal paid before the early
checks, issue 69) and `electra --version` (the interpreter's and the CLI's own start),
interleaved over rounds; min/median/max seconds.

    python bench/refusal_time.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ELECTRA = [sys.executable, "-m", "electra"]

CASES = {
    "--version": [*ELECTRA, "--version"],
    "import torch (the peer)": [sys.executable, "-c", "import torch"],
    "finetune --help": [*ELECTRA, "finetune", "--help"],
    "evaluate: a missing --model": [*ELECTRA, "evaluate", "--model", "x", "--task", "sst2",
                                    "--data", "d"],
    "finetune: a missing --model": [*ELECTRA, "finetune", "--model", "x", "--task", "sst2",
                                    "--data", "d", "--out", "o"],
    "finetune: a bad --set": [*ELECTRA, "finetune", "--model", ".", "--task", "sst2",
                              "--data", "d", "--out", "o", "--set", "epochs=0"],
    "pretrain: an unknown --set key": [*ELECTRA, "pretrain", "--preset", "tiny", "--data", "d",
                                       "--out", "o", "--set", "train.bogus=1"],
    "pretrain: a missing --data": [*ELECTRA, "pretrain", "--preset", "tiny", "--data", "d",
                                   "--out", "o"],
    "export: a missing run": [*ELECTRA, "export", "x", "--out", "o"],
}


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    times: dict[str, list[float]] = {name: [] for name in CASES}
    with tempfile.TemporaryDirectory() as here:
        for _ in range(args.rounds):
            for name, argv in CASES.items():
                t = time.perf_counter()
                res = subprocess.run(argv, cwd=here, capture_output=True, text=True,
                                     env={**os.environ, "PYTHONPATH": str(
                                         Path(__file__).resolve().parents[1] / "src")})
                times[name].append(time.perf_counter() - t)
                expect = 2 if name.split(":")[0] in ("evaluate", "finetune", "pretrain",
                                                     "export") else 0
                assert res.returncode == expect, (name, res.returncode, res.stderr)
    load = os.getloadavg()[0]
    print(f"{cpu_name()}, {os.cpu_count()} cores, load "
          f"{load:.1f}; {args.rounds} rounds, interleaved; seconds, min / median / max")
    print("| | min | median | max |\n|---|---|---|---|")
    for name, ts in times.items():
        print(f"| {name} | {min(ts):.2f} | {statistics.median(ts):.2f} | {max(ts):.2f} |")


if __name__ == "__main__":
    main()
