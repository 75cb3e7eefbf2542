"""How fast the memory-mapped loader delivers batches, against what training consumes.

    python bench/loader_throughput.py --data PREPARED_DIR [--batch 64] [--train-tok-s 5563]

Reads shuffled batches (the order `electra pretrain` uses) for a few seconds and prints
tokens/s delivered and the ratio to a training rate (default: the 30-minute CPU run's
median, docs/explanation/short-runs.md). The loader runs in the training process, so this
time is taken from the step; the ratio says how small that share is.
"""

from __future__ import annotations

import argparse
import json
import time

from electra.data.loader import BatchLoader, ShardDataset


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", required=True)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--train-tok-s", type=float, default=5563.0)
    args = ap.parse_args()
    loader = BatchLoader(ShardDataset(args.data), args.batch, seed=0)
    next(loader)
    n_tokens, n_batches, t0 = 0, 0, time.perf_counter()
    while time.perf_counter() - t0 < args.seconds:
        n_tokens += int(next(loader)["attention_mask"].sum())
        n_batches += 1
    tok_s = n_tokens / (time.perf_counter() - t0)
    print(f"{n_batches} batches of {args.batch}: {tok_s:,.0f} tokens/s delivered, "
          f"{tok_s / args.train_tok_s:,.0f}x the training rate {args.train_tok_s:,.0f}")
    print(json.dumps({"loader_tok_s": round(tok_s), "ratio": round(tok_s / args.train_tok_s)}))


if __name__ == "__main__":
    main()
