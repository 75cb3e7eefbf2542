"""`electra predict` against a transformers ``pipeline`` on the same model, whole commands timed
interleaved in one run.

    python bench/predict_vs_pipeline.py [--rows 4000] [--repeats 3]

The model: ELECTRA-Small fine-tuned briefly from random init on SST-2 (its weights do not
matter for speed), exported with `electra export` as an ElectraForSequenceClassification
folder. The inputs: the first ``--rows`` SST-2 training sentences (real lengths), one per
line. Sides, each a fresh process timed from its start (imports included):

- ``ours``: `electra predict --model FT/seed-1 --input sentences.txt --out preds.jsonl`
  (default precision: bf16 where the CPU multiplies it natively; unpadded, batches of 64 of
  similar length).
- ``pipeline``: transformers' ``pipeline("text-classification", model=EXPORT)`` over the same
  lines, ``batch_size=64``, fp32, results written as JSON lines; ``pipeline-bf16`` the same
  with ``torch_dtype=torch.bfloat16``.

Prints sentences/s min/median/max per side and each side's paired ratio to ``pipeline``;
and checks that both sides predict the same labels (fp32 ours against fp32 pipeline).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GLUE = ROOT.parent / "shared" / "data" / "glue" / "SST-2"
VOCAB = ROOT.parent / "shared" / "data" / "vocab" / "bert-base-uncased-vocab.txt"


def pipeline_worker(model: str, inputs: str, out: str, dtype: str) -> None:
    import torch
    from transformers import pipeline

    lines = Path(inputs).read_text().splitlines()
    kw = {"dtype": torch.bfloat16} if dtype == "bf16" else {}
    pipe = pipeline("text-classification", model=model, device="cpu", **kw)
    with open(out, "w") as f:
        for r in pipe(lines, batch_size=64, truncation=True, max_length=128):
            f.write(json.dumps(r) + "\n")


def electra(*args: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    subprocess.run([sys.executable, "-m", "electra", *args], check=True, capture_output=True,
                   env=env)


def timed(side: str, ft: Path, hf: Path, inputs: Path, out: Path) -> float:
    if side.startswith("ours"):
        cmd = [sys.executable, "-m", "electra", "predict", "--model", str(ft / "seed-1"),
               "--input", str(inputs), "--out", str(out), "--quiet"]
    else:
        cmd = [sys.executable, __file__, "--worker", str(hf), str(inputs),
               str(out), "bf16" if side.endswith("bf16") else "fp32"]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True, env=env)
    return time.perf_counter() - t0


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        pipeline_worker(*sys.argv[2:6])
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=4000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--sides", default="pipeline,ours,pipeline-bf16")
    args = ap.parse_args()
    if not GLUE.is_dir():
        raise SystemExit(f"{GLUE}: absent (this bench needs ../shared/data/glue)")
    sides = args.sides.split(",")
    with tempfile.TemporaryDirectory() as tmp:
        w = Path(tmp)
        electra("finetune", "--random-init", "small", "--tokenizer", str(VOCAB), "--task",
                "sst2", "--data", str(GLUE), "--out", str(w / "ft"), "--quiet", "--set",
                "epochs=1", "--set", "max_train_examples=256")
        electra("export", str(w / "ft" / "seed-1"), "--out", str(w / "hf"))
        rows = (GLUE / "train.tsv").read_text().splitlines()[1 : args.rows + 1]
        (w / "in.txt").write_text("\n".join(r.split("\t")[0] for r in rows) + "\n")
        times: dict[str, list[float]] = {s: [] for s in sides}
        for _ in range(args.repeats):
            for side in sides:
                times[side].append(timed(side, w / "ft", w / "hf", w / "in.txt",
                                         w / f"{side}.jsonl"))
        ours = [json.loads(x)["label"] for x in (w / "ours.jsonl").read_text().splitlines()]
        theirs = [json.loads(x)["label"] for x in
                  (w / "pipeline.jsonl").read_text().splitlines()]
        names = {f"LABEL_{i}": n for i, n in enumerate(sorted(set(ours)))}
        agree = sum(a == names.get(b, b) for a, b in zip(ours, theirs, strict=True))
    print(f"{args.rows} SST-2 sentences, ELECTRA-Small, {args.repeats} interleaved repeats, "
          f"whole commands")
    for side, v in times.items():
        rates = [args.rows / t for t in v]
        line = (f"{side:14s} sentences/s min/med/max {min(rates):7.0f} "
                f"{statistics.median(rates):7.0f} {max(rates):7.0f}")
        if side != "pipeline" and "pipeline" in times:
            r = [p / s for p, s in zip(times["pipeline"], v, strict=True)]
            line += (f"   pipeline/{side} min/med/max {min(r):.2f} {statistics.median(r):.2f} "
                     f"{max(r):.2f}")
        print(line)
    print(f"labels agreeing (ours at the default precision, the pipeline in fp32): "
          f"{agree}/{len(ours)}")


if __name__ == "__main__":
    main()
