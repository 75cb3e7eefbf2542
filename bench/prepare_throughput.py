"""Data preparation throughput against the raw `tokenizers` batch encoder, same text, same run;
and (--parquet) the Parquet input path against the .txt path on the same documents.

    python bench/prepare_throughput.py [--corpus ../shared/data/corpus/train] [--repeats 3]
    python bench/prepare_throughput.py --parquet [--repeats 3]

Interleaves (raw encode, prepare --workers 1, prepare --workers 2) `repeats` times and
prints min/median/max seconds, MB/s and tokens/s for each, and the ratio of each prepare
to the raw encoder (1.0 = packing and writing cost nothing beyond encoding).

With --parquet, the corpus is first written as Parquet (one file per text file, one record
per document, its lines joined by newlines), and (txt, parquet) prepares are interleaved
for 1 and 2 workers; each pair's time ratio parquet/txt is reported, and the two outputs are
checked to be byte-identical.
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
from electra.data.tokenizer import load_tokenizer

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


def to_parquet(files: list[Path], out: Path) -> None:
    """Each text file as a Parquet file of its documents (blank lines between documents)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    out.mkdir(parents=True)
    for f in files:
        docs, lines = [], []
        for line in f.read_text(encoding="utf-8").splitlines():
            if line.strip():
                lines.append(line.strip())
            elif lines:
                docs.append("\n".join(lines))
                lines = []
        if lines:
            docs.append("\n".join(lines))
        pq.write_table(pa.table({"text": docs}), out / f"{f.stem}.parquet")


def parquet_vs_txt(args: argparse.Namespace, files: list[Path], size_mb: float) -> None:
    times: dict[str, list[float]] = {f"{form}_w{w}": [] for w in (1, 2)
                                     for form in ("txt", "parquet")}
    with tempfile.TemporaryDirectory() as tmp:
        to_parquet(files, Path(tmp) / "pq")
        pq_mb = sum(f.stat().st_size for f in (Path(tmp) / "pq").iterdir()) / 1e6
        sums = {}
        for r in range(args.repeats):
            for w in (1, 2):
                for form, src in (("txt", args.corpus), ("parquet", f"{tmp}/pq")):
                    out = f"{tmp}/{form}{w}_{r}"
                    t0 = time.perf_counter()
                    meta = prepare(PrepareOptions(inputs=[src], tokenizer=args.vocab, out=out,
                                                  workers=w, quiet=True))
                    times[f"{form}_w{w}"].append(time.perf_counter() - t0)
                    sums[form] = meta["files"]
        assert sums["txt"] == sums["parquet"], "the two outputs differ"
    print(f"corpus {args.corpus}: {size_mb:.1f} MB as .txt, {pq_mb:.1f} MB as Parquet; "
          f"repeats {args.repeats}; outputs byte-identical")
    for k, v in times.items():
        print(f"{k:12s} s min/med/max {min(v):6.2f} {statistics.median(v):6.2f} {max(v):6.2f}"
              f"   {size_mb / statistics.median(v):5.2f} MB/s")
    for w in (1, 2):
        ratios = [p / t for p, t in zip(times[f"parquet_w{w}"], times[f"txt_w{w}"],
                                        strict=True)]
        print(f"parquet / txt, --workers {w}: min/med/max {min(ratios):.3f} "
              f"{statistics.median(ratios):.3f} {max(ratios):.3f} (paired by repeat)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", default=str(ROOT.parent / "shared/data/corpus/train"))
    ap.add_argument("--vocab", default=str(ROOT.parent / "shared/data/vocab/"
                                           "bert-base-uncased-vocab.txt"))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--parquet", action="store_true", help="Parquet input vs .txt instead")
    args = ap.parse_args()
    files = expand_inputs([args.corpus])
    size_mb = sum(f.stat().st_size for f in files) / 1e6
    if args.parquet:
        parquet_vs_txt(args, files, size_mb)
        return
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
