"""How many aten ops one pretraining step launches: the launch budget a GPU pays per step.

    python bench/op_count.py [--preset small] [--batch 4] [--steps 2] [--precision bf16]
        [--kernels fast-cpu|reference]

The step `electra pretrain` runs (``step_ablation.training_step``: the command's kernels and
layout, forward, backward, clipping, AdamW), on the data of bench/step_ablation.py, warmed up
with 2 steps, then ``--steps`` steps under ``torch.profiler``; it counts the top-level aten
ops per step (those not called from inside another aten op: what would each be a launch, or
a few, on a GPU), and lists the most frequent. Issue 40 measured 4,513 a step from outside
(small, batch 4 x 128, bf16).
"""

from __future__ import annotations

import argparse
import collections
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "bench")]


def top_level_events(events):  # the profiler's events (a private type)
    """The aten ops among ``events`` whose parents (up the call tree) include no aten op."""
    for e in events:
        if not e.name.startswith("aten::"):
            continue
        parent, nested = e.cpu_parent, False
        while parent is not None:
            if parent.name.startswith("aten::"):
                nested = True
                break
            parent = parent.cpu_parent
        if not nested:
            yield e


def top_level_ops(events) -> collections.Counter:
    """How many of each top-level aten op (:func:`top_level_events`)."""
    return collections.Counter(e.name for e in top_level_events(events))


def count(data: str, config: str, batch: int, steps: int = 2, warmup: int = 2,
          kernels: str = "fast-cpu") -> tuple[float, collections.Counter]:
    """Top-level aten ops per step of `electra pretrain`'s step on the prepared folder
    ``data`` under the TOML ``config`` text, after ``warmup`` steps (the first makes the
    optimizer's state; every step after runs the same ops): (mean, counts over ``steps``
    steps). ``kernels``: the model's kernels by name (``electra.model.kernels.KERNELS``):
    ``fast-cpu``, what a CPU runs, or ``reference``, a GPU's (torch's dropout, SDPA), here
    on the CPU."""
    import torch
    from step_ablation import training_step

    from electra.model.kernels import KERNELS

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "c.toml"
        path.write_text(config)
        step = training_step(data, str(path), batch)
    for _ in range(warmup):
        step(kernels=KERNELS[kernels])
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            step(kernels=KERNELS[kernels])
    counts = top_level_ops(prof.events())
    return sum(counts.values()) / steps, counts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="small")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--precision", default="bf16")
    ap.add_argument("--data", help="prepared folder (default: as step_ablation.py)")
    ap.add_argument("--kernels", default="fast-cpu", choices=["fast-cpu", "reference"],
                    help="the model's kernels: a CPU's, or a GPU's (run here on the CPU)")
    ap.add_argument("--extra", action="append", default=[],
                    help="a [train] line, e.g. 'unpad = true'")
    args = ap.parse_args()
    from step_ablation import default_data

    tmp = tempfile.TemporaryDirectory()
    config = "\n".join([f'preset = "{args.preset}"', "[train]",
                        f'precision = "{args.precision}"', *args.extra, ""])
    total, counts = count(args.data or default_data(tmp.name), config, args.batch, args.steps,
                          kernels=args.kernels)
    print(f"{total:,.0f} top-level aten ops a step ({args.preset}, batch {args.batch}, "
          f"{args.precision}, {args.kernels} kernels, {args.steps} steps profiled)")
    for name, n in counts.most_common(15):
        print(f"  {n / args.steps:8,.0f}  {name}")


if __name__ == "__main__":
    main()
