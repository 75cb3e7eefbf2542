"""`electra prepare --engine ray` against the one-process path on the same text: tokens/s (and
MB/s), and tokens/s per core (the cores each uses: 1, or the actors' count), interleaved in one run.

    python bench/prepare_ray.py [--corpus ../shared/data/corpus/train] [--mb 10]
        [--workers 2] [--repeats 3]

A local Ray cluster is started once (its start is timed apart: on a real cluster it is
already up) and the same slice of the corpus (its first ``--mb`` MB of files) is prepared
with BERT's vocabulary at 128 tokens, packed, by both engines in turn; the outputs are
checked byte-identical. The last line is JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from electra.data.prepare import PrepareOptions, prepare

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", default=str(ROOT.parent / "shared/data/corpus/train"))
    ap.add_argument("--vocab", default=str(ROOT.parent / "shared/data/vocab/"
                                               "bert-base-uncased-vocab.txt"))
    ap.add_argument("--mb", type=float, default=10.0)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    import ray

    files, size = [], 0
    for f in sorted(Path(args.corpus).rglob("*.txt")):
        if size >= args.mb * 1e6:
            break
        files.append(str(f))
        size += f.stat().st_size
    t0 = time.perf_counter()
    ray.init(num_cpus=args.workers, include_dashboard=False, log_to_driver=False,
             configure_logging=False)
    started = time.perf_counter() - t0
    times: dict[str, list[float]] = {"local": [], "ray": []}
    tokens = 0
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.repeats):
            for engine in ("local", "ray"):
                out = Path(tmp) / f"{engine}-{r}"
                t = time.perf_counter()
                meta = prepare(PrepareOptions(
                    inputs=files, tokenizer=args.vocab, out=str(out), seq_len=128,
                    val_fraction=0.01, pack=True, quiet=True, engine=engine,
                    workers=1 if engine == "local" else args.workers))
                times[engine].append(time.perf_counter() - t)
                tokens = meta["tokens_in"]  # the tokens encoded (before packing drops any)
        same = all((Path(tmp) / "local-0" / p.relative_to(Path(tmp) / "ray-0")).read_bytes()
                   == p.read_bytes() for p in (Path(tmp) / "ray-0").rglob("*.bin"))
    ray.shutdown()
    out = {"mb": round(size / 1e6, 1), "workers": args.workers, "ray_start_s": round(started, 1),
           "byte_identical": same}
    for engine, ts in times.items():
        cores = 1 if engine == "local" else args.workers
        med = statistics.median(ts)
        print(f"{engine:5s} s min/med/max {min(ts):6.1f} {med:6.1f} {max(ts):6.1f}  "
              f"MB/s {size / 1e6 / med:5.2f}  tokens/s {tokens / med:,.0f}  per core "
              f"{tokens / med / cores:,.0f}")
        out[f"{engine}_s_median"] = round(med, 2)
        out[f"{engine}_tok_s"] = round(tokens / med)
        out[f"{engine}_tok_s_per_core"] = round(tokens / med / cores)
    out["ray_over_local"] = round(out["local_s_median"] / out["ray_s_median"], 2)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
