"""Multi-task vs single-task fine-tuning, and linear probes vs full fine-tunes, on real GLUE
data (issue 26's measurements).

    python bench/multitask_and_probes.py WORK [--glue ../shared/data/glue] [--rows 2000]

1. ``electra demo`` into WORK/demo (skipped when WORK/demo/run exists): the pretrained model.
2. For the demo's discriminator and for random init in its shape: RTE, MRPC, STS-B and CoLA
   fine-tuned one at a time and all four together (``--task rte,mrpc,stsb,cola``), seeds
   1,2,3, each task capped at --rows training examples, 3 epochs everywhere (so the two
   modes see the same examples as often at α=1), and the same runs as linear probes
   (``freeze=encoder``, lr 1e-3).
3. A markdown table of each task's dev score (median and min-max over the seeds) and the
   compute each took (the sum of the seeds' result.json seconds).

Every command's output stays in WORK; a rerun reads back what is finished.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

TASKS = {"rte": ("RTE", "accuracy"), "mrpc": ("MRPC", "f1"), "stsb": ("STS-B", "spearman"),
         "cola": ("CoLA", "mcc")}
SEEDS = "1,2,3"


def electra(*args: str) -> None:
    cmd = [sys.executable, "-m", "electra", *args]
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)


def finetune(out: Path, source: list[str], tasks: list[str], glue: Path, rows: int,
             probe: bool) -> dict:
    if not (out / "results.json").is_file():
        sets = ["--set", f"max_train_examples={rows}", "--set", "epochs=3", "--quiet"]
        if probe:
            sets += ["--set", "freeze=encoder", "--set", "lr=1e-3"]
        electra("finetune", *source, "--task", ",".join(tasks), "--data",
                ",".join(str(glue / TASKS[t][0]) for t in tasks), "--seeds", SEEDS,
                "--out", str(out), "--resume" if (out.with_name(out.name + ".partial")
                                                  .is_dir()) else "--overwrite", *sets)
    return json.loads((out / "results.json").read_text())


def seconds(out: Path) -> float:
    return sum(json.loads(p.read_text()).get("seconds", 0.0)
               for p in out.glob("seed-*/result.json"))


def spread(values: list[float]) -> str:
    return (f"{100 * statistics.median(values):.1f} "
            f"({100 * min(values):.1f}-{100 * max(values):.1f})")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("work", type=Path)
    ap.add_argument("--glue", type=Path, default=Path("../shared/data/glue"))
    ap.add_argument("--rows", type=int, default=2000)
    a = ap.parse_args()
    demo = a.work / "demo"
    if not (demo / "run/discriminator").is_dir():
        electra("demo", "--out", str(demo), "--quiet")
    sources = {"demo-pretrained": ["--model", str(demo / "run")],
               "random-init": ["--random-init", str(demo / "run")]}
    lines = ["| model | fine-tune | " + " | ".join(f"{t} ({m})" for t, (_, m) in TASKS.items())
             + " | compute |", "|---|---|" + "---|" * len(TASKS) + "---|"]
    for name, source in sources.items():
        for probe in (False, True):
            kind = "probe" if probe else "full"
            single, secs = {}, 0.0
            for t in TASKS:
                out = a.work / f"{name}-{kind}-{t}"
                res = finetune(out, source, [t], a.glue, a.rows, probe)
                single[t] = [s["dev"][TASKS[t][1]] for s in res["seeds"].values()]
                secs += seconds(out)
            lines.append(f"| {name} | {kind}, one task at a time | "
                         + " | ".join(spread(v) for v in single.values()) + f" | {secs:.0f} s |")
            out = a.work / f"{name}-{kind}-multi"
            res = finetune(out, source, list(TASKS), a.glue, a.rows, probe)
            multi = {t: [res["seeds"][s][t]["dev"][TASKS[t][1]] for s in res["seeds"]]
                     for t in TASKS}
            lines.append(f"| {name} | {kind}, the four together | "
                         + " | ".join(spread(v) for v in multi.values())
                         + f" | {seconds(out):.0f} s |")
    print("\n".join(lines))
    (a.work / "table.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
