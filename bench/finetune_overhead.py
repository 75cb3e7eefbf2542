"""The fine-tuning step's cost that does not grow with the batch: its top-level aten ops, and
ms a step against the real tokens in it over several batch sizes.

    python bench/finetune_overhead.py [--batches 4,8,32,64] [--repeats 3]

ELECTRA-Small (random init) with the sequence head, unpadded as `electra finetune` runs it,
SST-2 training sentences (BERT's vocabulary, ../shared/data) in batches cut to their longest
row, one AdamW step each, in bf16 autocast (the weights cast once, as the trainer does) and
in fp32. Prints the ops a step (counted as bench/op_count.py counts) and, per batch size, ms
a step min/median over ``--repeats`` passes of 10 batches with the real tokens a step; then
the least-squares line ms = a + b * tokens.
Its intercept ``a`` is the part of a step that a bigger batch does not pay again (op
dispatch, the optimizer, Python): where it is large the step is bound by its op count.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import statistics
import time
from collections.abc import Callable

import torch
from finetune_step import sst2_batches
from op_count import top_level_ops

from electra.model.bodies import model_preset
from electra.model.kernels import FAST_CPU
from electra.runtime import autocast
from electra.tasks.sequence.head import SequenceClassifier
from electra.train.cast import CastOnce
from electra.train.optim import adamw, param_groups


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", default="4,8,32,64")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    g = torch.Generator().manual_seed(0)

    for precision in ("bf16", "fp32"):
        torch.manual_seed(0)
        model = SequenceClassifier(model_preset("small", vocab_size=30522), 2,
                                   dataclasses.replace(FAST_CPU, unpad=True)).train()
        opt = adamw(param_groups(model, 0.01), lr=1e-4)
        # the linear layers' weights cast once a micro-batch, as the trainer does in bf16
        cast = CastOnce(model, torch.bfloat16) if precision == "bf16" else contextlib.nullcontext

        def step(batch: tuple[torch.Tensor, ...], precision: str = precision,
                 model: torch.nn.Module = model, opt: torch.optim.Optimizer = opt,
                 cast: Callable[[], contextlib.AbstractContextManager] = cast) -> None:
            ids, mask, y = batch
            with autocast(torch.device("cpu"), precision), cast():
                loss = torch.nn.functional.cross_entropy(model(ids, mask).float(), y)
                loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

        warm = sst2_batches(32, 3, g)
        for b in warm[:2]:
            step(b)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            step(warm[2])
        print(f"{precision}: {sum(top_level_ops(prof.events()).values()):,} top-level aten "
              "ops a step (batch 32)")
        points = []
        for size in (int(x) for x in args.batches.split(",")):
            run = sst2_batches(size, 10, g)
            step(run[0])
            times = []
            for _ in range(args.repeats):
                t0 = time.perf_counter()
                for b in run:
                    step(b)
                times.append((time.perf_counter() - t0) / len(run) * 1e3)
            tokens = sum(int(b[1].sum()) for b in run) / len(run)
            points.append((tokens, statistics.median(times)))
            print(f"  batch {size:3d}: {min(times):6.1f} / {statistics.median(times):6.1f} ms "
                  f"a step (min / median), {tokens:.0f} real tokens a step")
        mx = statistics.mean(x for x, _ in points)
        my = statistics.mean(y for _, y in points)
        b = sum((x - mx) * (y - my) for x, y in points) / sum((x - mx) ** 2 for x, _ in points)
        print(f"  ms = {my - b * mx:.1f} + {b:.3f} * tokens (least squares over the medians)")


if __name__ == "__main__":
    main()
