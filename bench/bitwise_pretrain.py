"""Does a checkout pretrain bit for bit as another does? A 12-step fp32 run with dropout.

    python bench/bitwise_pretrain.py CHECKOUT_A CHECKOUT_B

Each checkout's own ``electra`` (its ``src``, this venv's packages) packs the same text with
the same vocabulary, pretrains the default objective (``--preset tiny``, the paper's
ELECTRA, dropout 0.1, fp32) for 12 steps with validation, and the script compares every
line of ``metrics.jsonl`` (times left out) and a SHA-256 of every saved weight tensor. Exit 0
when both agree bit for bit; otherwise it names the first difference.

Without ``../shared/data`` it packs the Python docs' text files and the vocabulary of a
tokenizer trained on them (both checkouts read the same files).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"
TIMES = {"time", "elapsed", "seconds", "tokens_per_s", "step_s", "data_s", "eta_s", "mfu",
         "wall", "flops_per_s", "sec", "samples_per_s"}


def run(checkout: Path, work: Path, text: Path, vocab: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": str(checkout / "src"), "OMP_NUM_THREADS": "2"}
    cli = [sys.executable, "-m", "electra"]
    data, out = work / "data", work / "run"
    subprocess.run([*cli, "prepare", "--input", str(text), "--tokenizer", str(vocab),
                    "--out", str(data), "--seq-len", "64", "--val-fraction", "0.05"],
                   check=True, env=env, capture_output=True)
    subprocess.run([*cli, "pretrain", "--preset", "tiny", "--data", str(data), "--out",
                    str(out), "--quiet", "--device", "cpu",
                    *[a for kv in ("train.max_steps=12", "train.batch_size=16",
                                   "train.precision=fp32", "train.log_every=3",
                                   "train.eval_every=6", "train.save_every=6",
                                   "train.warmup_steps=4",
                                   # the slots older checkouts used at every length
                                   "objective.max_predictions=19")
                      for a in ("--set", kv)]],
                   check=True, env=env, capture_output=True)
    from safetensors.torch import load_file

    metrics = [{k: v for k, v in json.loads(line).items() if k not in TIMES}
               for line in (out / "metrics.jsonl").read_text().splitlines()]
    digests = {}
    for part in ("discriminator", "generator"):
        for k, v in sorted(load_file(str(out / part / "model.safetensors")).items()):
            digests[f"{part}/{k}"] = hashlib.sha256(v.numpy().tobytes()).hexdigest()
    return {"metrics": metrics, "weights": digests}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("a", type=Path)
    ap.add_argument("b", type=Path)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        if SHARED.is_dir():
            text = SHARED / "corpus" / "heldout"
            vocab = SHARED / "vocab" / "bert-base-uncased-vocab.txt"
        else:
            raise SystemExit("bench/bitwise_pretrain.py needs ../shared/data")
        got = {}
        for name, checkout in (("A", args.a), ("B", args.b)):
            (tmp / name).mkdir()
            got[name] = run(checkout.resolve(), tmp / name, text, vocab)
        a, b = got["A"], got["B"]
        print(f"metrics lines: {len(a['metrics'])} / {len(b['metrics'])}; weight tensors: "
              f"{len(a['weights'])} / {len(b['weights'])}")
        for i, (x, y) in enumerate(zip(a["metrics"], b["metrics"], strict=False)):
            if x != y:
                diff = {k: (x.get(k), y.get(k)) for k in set(x) | set(y) if x.get(k) != y.get(k)}
                print(f"metrics line {i + 1} differs: {diff}")
                return 1
        if len(a["metrics"]) != len(b["metrics"]) or a["weights"] != b["weights"]:
            bad = [k for k in set(a["weights"]) | set(b["weights"])
                   if a["weights"].get(k) != b["weights"].get(k)]
            print(f"weights differ: {sorted(bad)[:5]}")
            return 1
        print("bitwise equal: every metrics line and every weight tensor")
        print(json.dumps(a["metrics"][-1]))
        return 0


if __name__ == "__main__":
    sys.exit(main())
