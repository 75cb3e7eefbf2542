"""Does a sampling-temperature schedule get a short run off the all-original plateau?

    python bench/temperature_schedule.py [--steps 600] [--seeds 0 1]

The demo's setting (Python's docs, an 8k WordPiece vocabulary, the tiny preset, batch 32,
lr 1e-3), pretrained three ways for the same steps:

    T=1            the paper's temperature throughout
    T=3->1         3 at the start, linearly to 1 over the first half of the run
    T=3            3 throughout (what `electra demo` does)

Validation samples at each run's final temperature, so the first two are scored on the
paper's task (T=1) and the third on its own easier one. Reported per run, at the end:
held-out discriminator accuracy minus the all-original baseline (points), ROC-AUC, generator
accuracy, and the first validation at which the discriminator beat the baseline.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from electra.commands.pretrain import PretrainOptions, pretrain
from electra.config import TrainConfig
from electra.data.prepare import PrepareOptions, prepare
from electra.data.tokenizer import train_tokenizer
from electra.experiments.demo import write_corpus
from electra.model.bodies import model_preset
from electra.objectives.config import ObjectiveConfig
from electra.run_config import RunConfig
from electra.runtime import start
from electra.train.metrics import iter_metrics

SCHEDULES = {"T=1": {}, "T=3->1": {"temperature": 3.0, "temperature_end": 1.0},
             "T=3": {"temperature": 3.0}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp())
    train, held = write_corpus(tmp / "corpus")
    train_tokenizer([str(train)], 8192, tmp / "tok")
    prepare(PrepareOptions(inputs=[str(train)], val_inputs=[str(held)],
                           tokenizer=str(tmp / "tok"), out=str(tmp / "data"), quiet=True))
    results = []
    with start("auto", keep_memory=True) as rt:
        for seed in args.seeds:
            for name, sched in SCHEDULES.items():
                if "temperature_end" in sched:
                    sched = {**sched, "temperature_steps": args.steps // 2}
                cfg = RunConfig(model=model_preset("tiny"), objective=ObjectiveConfig(**sched),
                                train=TrainConfig(lr=1e-3, batch_size=32, warmup_steps=60,
                                                  max_steps=args.steps, log_every=10,
                                                  eval_every=args.steps // 6,
                                                  eval_batches=10, save_every=args.steps,
                                                  seed=seed))
                run = tmp / f"{name}-{seed}"
                t0 = time.perf_counter()
                last = pretrain(PretrainOptions(data=str(tmp / "data"), out=str(run),
                                                config=cfg, progress=False), rt)
                vals = [r for r in iter_metrics(run) if "val_disc_acc" in r]
                beat = next((r["step"] for r in vals
                             if r["val_disc_acc"] > r["val_baseline_acc"] + 0.0005), None)
                row = {"schedule": name, "seed": seed,
                       "margin_points": round(100 * (last["val_disc_acc"]
                                                     - last["val_baseline_acc"]), 2),
                       "auc": round(last["val_disc_auc"], 3),
                       "gen_acc": round(last["val_gen_acc"], 3),
                       "first_step_above_baseline": beat,
                       "minutes": round((time.perf_counter() - t0) / 60, 1)}
                results.append(row)
                print(json.dumps(row), flush=True)
    print("| schedule | seed | margin over all-original (points) | ROC-AUC | generator acc | "
          "first validation above baseline |\n|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['schedule']} | {r['seed']} | {r['margin_points']:+.2f} | {r['auc']:.3f} | "
              f"{r['gen_acc']:.1%} | {r['first_step_above_baseline'] or 'never'} |")


if __name__ == "__main__":
    main()
