"""Peak memory of the cached contrastive loss (issue 72): `finetune --task embedding` of the
tiny preset (random init, BERT's vocabulary) on SQuAD dev's (question, paragraph) pairs, at
batch 512 with `cached=true` (grad_accum 16: 32 rows at a time, 511 negatives a query)
against the uncached loss at batch 32 (31 negatives) and at batch 512 in one piece; each
command's peak resident memory (the process's ru_maxrss) and its wall seconds (start-up
included), the
configurations interleaved, REPEATS times, min/median/max.

    python bench/embedding_cache_memory.py [--repeats 2] [--steps 4] [--length 192]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SHARED = Path(__file__).resolve().parent.parent.parent / "shared" / "data"
CONFIGS = [("uncached, batch 32", 32, 1, False), ("cached, batch 512 (16 x 32)", 512, 16, True),
           ("uncached, batch 512", 512, 1, False)]
RUN = ("import resource, subprocess, sys; rc = subprocess.run(sys.argv[1:]).returncode; "
       "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, rc)")


def pairs(folder: Path, n: int) -> Path:
    """The first ``n`` questions of SQuAD dev with their paragraphs, as JSONL pairs."""
    doc = json.loads((SHARED / "squad/dev-v1.1.json").read_text(encoding="utf-8"))
    rows = [{"query": qa["question"], "positive": p["context"]}
            for article in doc["data"] for p in article["paragraphs"] for qa in p["qas"]]
    path = folder / "pairs.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows[:n]), encoding="utf-8")
    (folder / "dev.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[-64:]),
                                      encoding="utf-8")
    return path


def run(folder: Path, batch: int, accum: int, cached: bool, steps: int, length: int,
        out: str) -> tuple[float, float]:
    """(peak resident GB, wall seconds) of one fine-tune of ``steps`` steps."""
    cmd = [sys.executable, "-m", "electra", "finetune", "--random-init", "tiny", "--tokenizer",
           str(folder / "vocab/vocab.txt"), "--task", "embedding", "--train",
           str(folder / "pairs.jsonl"), "--dev", str(folder / "dev.jsonl"), "--set",
           f"batch_size={batch}", "--set", f"grad_accum={accum}", "--set",
           f"cached={str(cached).lower()}", "--set", "epochs=1", "--set",
           f"max_train_examples={batch * steps}", "--set", f"max_length={length}", "--set",
           "precision=fp32", "--set", "group_by_length=false", "--quiet", "--out", out]
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", RUN, *cmd], capture_output=True, text=True,
                          check=True)
    seconds = time.perf_counter() - start
    kb, rc = done.stdout.split()[-2:]
    if rc != "0":
        sys.exit(f"failed: {' '.join(cmd)}\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return int(kb) / 2**20, seconds


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--length", type=int, default=192)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "vocab").mkdir()
        (folder / "vocab/vocab.txt").write_text(
            (SHARED / "vocab/bert-base-uncased-vocab.txt").read_text(encoding="utf-8"))
        pairs(folder, 512 * args.steps)
        found: dict[str, list[tuple[float, float]]] = {c[0]: [] for c in CONFIGS}
        for r in range(args.repeats):
            for i, (name, batch, accum, cached) in enumerate(CONFIGS):
                found[name].append(run(folder, batch, accum, cached, args.steps, args.length,
                                       str(folder / f"out-{r}-{i}")))
    print(f"tiny preset, SQuAD (question, paragraph) pairs, max_length {args.length}, fp32, "
          f"{args.steps} steps, {args.repeats} repeats: min / median / max")
    print("| loss | peak resident GB | command s |\n|---|---|---|")
    for name, values in found.items():
        cells = []
        for k in (0, 1):
            v = [x[k] for x in values]
            cells.append(f"{min(v):.2f} / {statistics.median(v):.2f} / {max(v):.2f}")
        print(f"| {name} | {cells[0]} | {cells[1]} |")


if __name__ == "__main__":
    main()
