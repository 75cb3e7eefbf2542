"""Data preparation throughput against the raw `tokenizers` batch encoder, same text, same run.

    python bench/prepare_throughput.py [--corpus ../shared/data/corpus/train] [--repeats 3]

Interleaves (raw encode, prepare --workers 1, prepare --workers 2) `repeats` times and
prints min/median/max seconds, MB/s and tokens/s for each, and the ratio of each prepare
to the raw encoder (1.0 = packing and writing cost nothing beyond encoding).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from electra.data.prepare import PrepareOptions, prepare
from electra.data.text import expand_inputs, read_chunks
from electra.tokenizer import load_tokenizer

ROOT = Path(__file__).resolve().parents[1]


def raw_encode(files, tok) -> tuple[float, int, int]:
    """Read the same chunks and run encode_batch on them; nothing else."""
    t0 = time.perf_counter()
    n_tokens = n_bytes = 0
    for chunk in read_chunks(files):
        lines = [line for line in chunk.lines if line]
        n_bytes += sum(len(x) for x in lines)
        for e in tok.encode_batch(lines, add_special_tokens=False):
            n_tokens += len(e.ids)
    return time.perf_counter() - t0, n_tokens, n_bytes


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", default=str(ROOT.parent / "shared/data/corpus/train"))
    ap.add_argument("--vocab", default=str(ROOT.parent / "shared/data/vocab/"
                                           "bert-base-uncased-vocab.txt"))
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    files = expand_inputs([args.corpus])
    size_mb = sum(f.stat().st_size for f in files) / 1e6
    tok = load_tokenizer(args.vocab)
    times: dict[str, list[float]] = {"raw_encode": [], "prepare_w1": [], "prepare_w2": []}
    tokens = 0
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.repeats):
            dt, tokens, _ = raw_encode(files, tok)
            times["raw_encode"].append(dt)
            for w in (1, 2):
                t0 = time.perf_counter()
                prepare(PrepareOptions(inputs=[args.corpus], tokenizer=args.vocab,
                                       out=f"{tmp}/out{w}_{r}", workers=w, quiet=True))
                times[f"prepare_w{w}"].append(time.perf_counter() - t0)
    print(f"corpus {args.corpus}: {size_mb:.1f} MB, {tokens:,} tokens; repeats {args.repeats}")
    med = {k: statistics.median(v) for k, v in times.items()}
    for k, v in times.items():
        print(f"{k:12s} s min/med/max {min(v):6.2f} {med[k]:6.2f} {max(v):6.2f}   "
              f"{size_mb / med[k]:5.2f} MB/s  {tokens / med[k]:11,.0f} tokens/s   "
              f"x raw {med[k] / med['raw_encode']:.2f}")
    print(json.dumps({"mb": round(size_mb, 1), "tokens": tokens,
                      **{f"{k}_s": round(v, 2) for k, v in med.items()},
                      "ratio_w1": round(med["prepare_w1"] / med["raw_encode"], 2),
                      "ratio_w2": round(med["prepare_w2"] / med["raw_encode"], 2)}))


if __name__ == "__main__":
    main()
