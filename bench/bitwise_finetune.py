"""Does a checkout fine-tune bit for bit as another does? Five fp32 runs with dropout.

    python bench/bitwise_finetune.py CHECKOUT_A CHECKOUT_B [--cases custom,tagging,...]

Each checkout's own ``electra`` (its ``src``, this venv's packages) fine-tunes a tiny model
from random init (``--random-init tiny``, a tokenizer trained here once for both) on the
same files: a custom CSV (two seeds, ``select=best``), tagging (JSONL), SQuAD (v1.1 layout),
COPA (the SuperGLUE fixture) and a two-task run (custom + COPA), each in fp32 with dropout
for 2 epochs, on 2 threads, each into the same --out path (moved aside after). Every file
each run leaves is compared: JSON files and ``metrics.jsonl`` lines
without their times, weights (``*.safetensors``) tensor by tensor, any other file byte for
byte. Exit 0 when both agree bit for bit; otherwise every difference is listed.

The check behind a refactor of fine-tuning (issue 41): behaviour not meant to change stays
bitwise.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COPA = ROOT / "tests" / "fixtures" / "superglue" / "COPA"
TIMES = {"seconds", "tokens_per_s", "time", "elapsed", "step_s", "eta_s", "samples_per_s",
         "mfu"}  # tokens_per_s over a fixed peak: a timing too


def sentiment(path: Path, n: int, seed: int) -> None:
    rng = random.Random(seed)
    filler = ["the", "a", "movie", "film", "plot", "actors", "story", "was", "is", "quite"]
    rows = ["text,label"]
    for _ in range(n):
        label = rng.choice(["pos", "neg"])
        words = [rng.choice(filler) for _ in range(rng.randint(3, 8))]
        words.insert(rng.randrange(len(words) + 1), rng.choice(
            ["good", "great"] if label == "pos" else ["bad", "awful"]))
        rows.append(f"{' '.join(words)},{label}")
    path.write_text("\n".join(rows) + "\n")


def inputs(w: Path) -> None:
    """The files every case reads, written once for both checkouts."""
    sentiment(w / "train.csv", 96, 0)
    sentiment(w / "dev.csv", 32, 1)
    paras = []
    for i in range(16):
        ctx = f"Anna lives in Oslo number {i}. She works at a bank in the city."
        paras.append({"context": ctx, "qas": [{"id": f"q{i}", "question": "Where is Anna?",
                                               "answers": [{"text": "Oslo",
                                                            "answer_start": ctx.index("Oslo")}]}]})
    (w / "sq.json").write_text(json.dumps({"version": "1.1", "data": [
        {"title": "t", "paragraphs": paras}]}))
    rng = random.Random(2)
    rows = []
    for _ in range(32):
        name, city = rng.choice(["Anna", "Bo", "Cy"]), rng.choice(["Oslo", "Rome", "Lima"])
        rows.append(json.dumps({"tokens": [name, "lives", "in", city],
                                "tags": ["B-PER", "O", "O", "B-LOC"]}) + "\n")
    (w / "tags.jsonl").write_text("".join(rows))
    text = (w / "train.csv").read_text() + "".join(p.read_text() for p in COPA.glob("*.jsonl"))
    (w / "c.txt").write_text(text)
    sys.path.insert(0, str(ROOT / "src"))
    from electra.data.tokenizer import train_tokenizer

    train_tokenizer([str(w / "c.txt")], 150, w / "tok")


def cases(w: Path, precision: str = "fp32") -> dict[str, list[str]]:
    common = ["--random-init", "tiny", "--tokenizer", str(w / "tok"), "--quiet",
              "--device", "cpu", "--set", f"precision={precision}", "--set", "epochs=2",
              "--set", "batch_size=8",
              # two threads whatever the machine's load (threads=0 takes fewer on a busy
              # machine, and another thread count sums in another order)
              "--set", "threads=2"]
    return {
        "custom": [*common, "--task", "custom", "--train", str(w / "train.csv"),
                   "--dev", str(w / "dev.csv"), "--seeds", "1,2", "--set", "select=best"],
        "tagging": [*common, "--task", "tagging", "--train", str(w / "tags.jsonl"),
                    "--dev", str(w / "tags.jsonl")],
        "squad": [*common, "--task", "squad1", "--train", str(w / "sq.json"),
                  "--dev", str(w / "sq.json"), "--set", "max_length=48",
                  "--set", "doc_stride=16"],
        "copa": [*common, "--task", "copa", "--data", str(COPA)],
        "two-task": [*common, "--task", "custom,copa", "--data", f",{COPA}",
                     "--train", f"{w / 'train.csv'},", "--dev", f"{w / 'dev.csv'},"],
    }


def run(checkout: Path, args: list[str], out: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(checkout / "src"), "OMP_NUM_THREADS": "2"}
    res = subprocess.run([sys.executable, "-m", "electra", "finetune", *args, "--out",
                          str(out)], env=env, capture_output=True, text=True)
    if res.returncode:
        raise SystemExit(f"{checkout}: finetune {' '.join(args)} exited {res.returncode}:\n"
                         f"{res.stderr[-2000:]}")


def _json(value: object) -> object:
    if isinstance(value, dict):
        return {k: _json(v) for k, v in value.items() if k not in TIMES}
    if isinstance(value, list):
        return [_json(v) for v in value]
    return value


def files(root: Path) -> set[Path]:
    """The files under ``root`` but TensorBoard's (their names and records carry times)."""
    return {p.relative_to(root) for p in root.rglob("*")
            if p.is_file() and "tb" not in p.relative_to(root).parts}


def differences(a: object, b: object, path: str = "") -> list[str]:
    """Every key path where two JSON values differ (keys only one has named as such)."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(a.keys() | b.keys()):
            if k not in a or k not in b:
                out.append(f"{path}.{k} (only in {'B' if k in b else 'A'})")
            elif a[k] != b[k]:
                out += differences(a[k], b[k], f"{path}.{k}")
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y
                for d in differences(x, y, f"{path}[{i}]")]
    return [path or "the top"]


def compare(a: Path, b: Path) -> list[str]:
    """Every difference between two output folders."""
    from safetensors.torch import load_file

    fa, fb = files(a), files(b)
    diffs = [f"only in A: {p}" for p in sorted(fa - fb)] + [
        f"only in B: {p}" for p in sorted(fb - fa)]
    for rel in sorted(fa & fb):
        pa, pb = a / rel, b / rel
        if rel.suffix == ".safetensors":
            ta, tb = load_file(pa), load_file(pb)
            bad = sorted(k for k in ta.keys() | tb.keys()
                         if k not in ta or k not in tb or not ta[k].equal(tb[k]))
            if bad:
                diffs.append(f"{rel}: {len(bad)} tensor(s) differ, e.g. {bad[0]}")
        elif rel.suffix == ".json" or rel.name.endswith(".jsonl"):
            lines = pa.read_text().splitlines() if rel.suffix == ".jsonl" else [pa.read_text()]
            other = pb.read_text().splitlines() if rel.suffix == ".jsonl" else [pb.read_text()]
            ja, jb = ([_json(json.loads(x)) for x in v] for v in (lines, other))
            if ja != jb:
                diffs.append(f"{rel}: differs at {', '.join(differences(ja, jb))}")
        elif pa.read_bytes() != pb.read_bytes():
            diffs.append(f"{rel}: bytes differ")
    return diffs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("a", type=Path)
    ap.add_argument("b", type=Path)
    ap.add_argument("--cases", default="custom,tagging,squad,copa,two-task")
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16", "fp16"],
                    help="the runs' precision (bf16, fp16: autocast's path)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        w = Path(tmp)
        inputs(w)
        table, failed = cases(w, args.precision), 0
        for name in args.cases.split(","):
            for side, checkout in (("A", args.a), ("B", args.b)):
                # one --out path for both (the cards and config.json name the command), and
                # moved aside after
                run(checkout.resolve(), table[name], w / "run")
                (w / side).mkdir(exist_ok=True)
                (w / "run").rename(w / side / name)
            diffs = compare(w / "A" / name, w / "B" / name)
            n = len(files(w / "A" / name))
            print(f"{name}: {'bitwise equal' if not diffs else 'DIFFERS'} ({n} files)")
            for d in diffs:
                print(f"  {d}")
            failed += bool(diffs)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
