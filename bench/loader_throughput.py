"""How fast the memory-mapped loader delivers batches, against what training consumes; and
(--s3) the same folder read through an S3 server.

    python bench/loader_throughput.py --data PREPARED_DIR [--batch 64] [--train-tok-s 5563]
    python bench/loader_throughput.py --data PREPARED_DIR --s3 [--repeats 3]

Reads shuffled batches (the order `electra pretrain` uses) for a few seconds and prints
tokens/s delivered and the ratio to a training rate (default: the 30-minute CPU run's
median, docs/explanation/short-runs.md). The loader runs in the training process, so this
time is taken from the step; the ratio says how small that share is.

With --s3, an S3 server (moto's, on a free port of this machine) holds a copy of the folder,
and the local folder and ``s3://bench/data`` are read in turn, ``--repeats`` times: the
first fetch of the URL (its mirror into an empty cache, ``electra.io.remote``: the time a
run waits before its first step), then the loader's tokens/s from each (the URL's from its
mirror); and in the order of ``train.shuffle=blocks`` (``--block`` rows, ``--window``
blocks), over one epoch, the local folder's and the URL's streamed from an empty cache
(every block fetched once, as the batches need it: ``electra.data.stream``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from electra.data.loader import BatchLoader, Blocks, ShardDataset


def rate(data: str | Path | ShardDataset, batch: int, seconds: float,
         blocks: Blocks | None = None) -> float:
    data = data if isinstance(data, ShardDataset) else ShardDataset(data)
    loader = BatchLoader(data, batch, seed=0, blocks=blocks)
    next(loader)
    n_tokens, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        n_tokens += int(next(loader)["attention_mask"].sum())
    return n_tokens / (time.perf_counter() - t0)


def epoch_rate(data: ShardDataset, batch: int, blocks: Blocks) -> float:
    """Tokens/s over one epoch in the order of ``blocks`` (a stream from an empty cache:
    every block fetched once, as the batches need it)."""
    loader = BatchLoader(data, batch, seed=0, blocks=blocks)
    n_tokens, t0 = 0, time.perf_counter()
    while loader.state.epoch == 0:
        n_tokens += int(next(loader)["attention_mask"].sum())
    return n_tokens / (time.perf_counter() - t0)


def through_s3(args: argparse.Namespace) -> None:
    import fsspec
    from moto.server import ThreadedMotoServer

    from electra.io import remote

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    os.environ.update(AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench",
                      AWS_DEFAULT_REGION="us-east-1", AWS_ENDPOINT_URL=f"http://{host}:{port}")
    fs = fsspec.filesystem("s3", skip_instance_cache=True)
    fs.mkdir("bench")
    remote.upload(Path(args.data), "s3://bench/data", "--data")
    size = sum(f.stat().st_size for f in Path(args.data).rglob("*") if f.is_file())
    from electra.data.stream import StreamedShards

    blocks = Blocks(args.block, args.window, 1)
    fetch, local, s3, local_blocks, streamed = [], [], [], [], []
    for _ in range(args.repeats):
        with tempfile.TemporaryDirectory() as cache:
            os.environ["ELECTRA_CACHE"] = cache
            t0 = time.perf_counter()
            mirror = remote.local("s3://bench/data", "--data")
            fetch.append(time.perf_counter() - t0)
            local.append(rate(args.data, args.batch, args.seconds))
            s3.append(rate(mirror, args.batch, args.seconds))
        local_blocks.append(epoch_rate(ShardDataset(args.data), args.batch, blocks))
        with tempfile.TemporaryDirectory() as cache:
            os.environ["ELECTRA_CACHE"] = cache  # empty: every block fetched as it is needed
            streamed.append(epoch_rate(StreamedShards("s3://bench/data",
                                                      block_rows=args.block),
                                       args.batch, blocks))
    server.stop()
    med = statistics.median
    print(f"fetch of {size / 1e6:.1f} MB: s min/med/max {min(fetch):.2f} {med(fetch):.2f} "
          f"{max(fetch):.2f} ({size / 1e6 / med(fetch):.1f} MB/s)")
    for name, r in (("local", local), ("s3", s3),
                    ("local, shuffle=blocks, an epoch", local_blocks),
                    ("s3 streamed, an epoch, cold", streamed)):
        print(f"{name:32s} loader tokens/s min/med/max {min(r):,.0f} {med(r):,.0f} "
              f"{max(r):,.0f}")
    print(json.dumps({"mb": round(size / 1e6, 1), "fetch_s": round(med(fetch), 2),
                      "local_tok_s": round(med(local)), "s3_tok_s": round(med(s3)),
                      "s3_over_local": round(med(s3) / med(local), 2),
                      "local_blocks_tok_s": round(med(local_blocks)),
                      "streamed_tok_s": round(med(streamed)),
                      "streamed_over_local_blocks": round(med(streamed) / med(local_blocks),
                                                          2)}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", required=True)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--train-tok-s", type=float, default=5563.0)
    ap.add_argument("--s3", action="store_true")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--block", type=int, default=2048, help="train.shuffle_block")
    ap.add_argument("--window", type=int, default=32, help="train.shuffle_window")
    args = ap.parse_args()
    if args.s3:
        through_s3(args)
        return
    tok_s = rate(args.data, args.batch, args.seconds)
    print(f"batches of {args.batch}: {tok_s:,.0f} tokens/s delivered, "
          f"{tok_s / args.train_tok_s:,.0f}x the training rate {args.train_tok_s:,.0f}")
    print(json.dumps({"loader_tok_s": round(tok_s), "ratio": round(tok_s / args.train_tok_s)}))


if __name__ == "__main__":
    main()
