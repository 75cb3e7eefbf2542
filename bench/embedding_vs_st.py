"""`electra finetune --task embedding` against sentence-transformers' own trainer on the same
pairs, model and settings, each a whole command timed interleaved (issue 72).

    python bench/embedding_vs_st.py [--pairs 3200] [--epochs 1] [--repeats 3]
        [--preset small] [--sides ours,ours-fp32,st-fp32,st-bf16] [--out runs/embedding-vs-st]

Both sides start from the same weights: a random-init ``--preset`` discriminator (BERT's
vocabulary from ../shared/data/vocab) saved as a run, which ours fine-tunes and whose
sentence-transformers export (mean pooling, normalised) sentence-transformers loads. The
pairs: STS-B training pairs scored 4 or more and MRPC's paraphrases (the first ``--pairs``
of them, shuffled with seed 0). Settings on both sides: InfoNCE with in-batch negatives at
temperature 0.05 (``MultipleNegativesRankingLoss``, scale 20), batch 32, 128 tokens, AdamW
(lr 1e-4, weight decay 0.01), 10% linear warmup then linear decay, clipping at 1.0, one
learning rate for every layer, seed 1. Sides: ``ours`` (bf16 where the CPU multiplies it
natively, as a user runs it), ``ours-fp32``; ``st-fp32``, ``st-bf16``
(``SentenceTransformerTrainer``, ``bf16=True``: CPU autocast; it needs ``pip install
accelerate``).

Each side runs as its own process under ``/usr/bin/time`` (wall seconds, CPU seconds, peak
resident memory), interleaved, ``--repeats`` rounds; then each trained model's STS-B dev
Spearman (`electra evaluate --task sts`, not timed). Prints min/median/max a side and CPU
time and memory ratios against ``st-fp32``; lines in ``bench/results/embedding_vs_st.jsonl``.
"""

from __future__ import annotations

import argparse
import csv
import json
import random
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data"
RESULTS = Path(__file__).resolve().parent / "results" / "embedding_vs_st.jsonl"
LR, BATCH, LENGTH = 1e-4, 32, 128


def _pairs(n: int) -> list[tuple[str, str]]:
    def rows(path: Path) -> list[dict[str, str]]:
        with path.open(encoding="utf-8-sig") as f:
            return list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))

    sts = [(r["sentence1"], r["sentence2"]) for r in rows(SHARED / "glue/STS-B/train.tsv")
           if float(r["score"]) >= 4]
    mrpc = [(r["#1 String"], r["#2 String"]) for r in rows(SHARED / "glue/MRPC/train.tsv")
            if r["Quality"] == "1"]
    out = sts + mrpc
    random.Random(0).shuffle(out)
    return out[:n]


def _setup(out: Path, preset: str, n: int) -> None:
    """OUT/run (random init), OUT/st0 (its sentence-transformers export), OUT/pairs.jsonl."""
    import torch

    from electra.cli import main
    from electra.data.tokenizer import load_tokenizer
    from electra.model import Discriminator
    from electra.model.bodies import model_preset
    from electra.saved import folders

    if not (out / "run/discriminator/model.safetensors").exists():
        (out / "vocab").mkdir(parents=True, exist_ok=True)
        shutil.copy(SHARED / "vocab/bert-base-uncased-vocab.txt", out / "vocab/vocab.txt")
        tok = load_tokenizer(out / "vocab")
        torch.manual_seed(0)
        model = Discriminator(model_preset(preset, vocab_size=tok.get_vocab_size()))
        folders.save(model, "discriminator", out / "run/discriminator", tok)
    if not (out / "st0/modules.json").exists():
        assert main(["export", str(out / "run"), "--out", str(out / "st0"),
                     "--sentence-transformers", "mean"]) == 0
    pairs = _pairs(n)
    with (out / "pairs.jsonl").open("w", encoding="utf-8") as f:
        for q, p in pairs:
            f.write(json.dumps({"query": q, "positive": p}) + "\n")
    with (out / "dev.jsonl").open("w", encoding="utf-8") as f:  # ours reads a dev file
        for q, p in pairs[:64]:
            f.write(json.dumps({"query": q, "positive": p}) + "\n")


def _command(side: str, out: Path, where: Path, epochs: int) -> list[str]:
    if side.startswith("ours"):
        precision = ["--set", "precision=fp32"] if side.endswith("fp32") else []
        return ["electra", "finetune", "--model", str(out / "run"), "--task", "embedding",
                "--train", str(out / "pairs.jsonl"), "--dev", str(out / "dev.jsonl"),
                "--out", str(where), "--quiet", "--seeds", "1", "--set", f"lr={LR}",
                "--set", "layer_decay=1.0", "--set", f"batch_size={BATCH}", "--set",
                f"max_length={LENGTH}", "--set", f"epochs={epochs}", *precision]
    return [sys.executable, __file__, "--worker", side, "--out", str(out), "--where",
            str(where), "--epochs", str(epochs)]


def _worker(side: str, out: Path, where: Path, epochs: int) -> None:
    """sentence-transformers' own trainer on the pairs (what a user of it writes)."""
    from datasets import Dataset
    from sentence_transformers import (
        SentenceTransformer,
        SentenceTransformerTrainer,
        SentenceTransformerTrainingArguments,
    )
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss

    rows = [json.loads(x) for x in (out / "pairs.jsonl").read_text().splitlines()]
    data = Dataset.from_dict({"anchor": [r["query"] for r in rows],
                              "positive": [r["positive"] for r in rows]})
    model = SentenceTransformer(str(out / "st0"), device="cpu")
    model.max_seq_length = LENGTH
    args = SentenceTransformerTrainingArguments(
        output_dir=str(where / "trainer"), num_train_epochs=epochs,
        per_device_train_batch_size=BATCH, learning_rate=LR, weight_decay=0.01,
        warmup_ratio=0.1, lr_scheduler_type="linear", max_grad_norm=1.0, seed=1,
        bf16=side.endswith("bf16"), use_cpu=True, save_strategy="no", report_to="none",
        logging_steps=1000, disable_tqdm=True, dataloader_drop_last=False)
    SentenceTransformerTrainer(model=model, args=args, train_dataset=data,
                               loss=MultipleNegativesRankingLoss(model, scale=20.0)).train()
    model.save(str(where / "seed-1"))


def _timed(cmd: list[str]) -> dict[str, float]:
    """Wall seconds, CPU seconds (user + system) and peak resident MB of one command."""
    log = Path("/tmp/embedding_vs_st.time")
    start = time.perf_counter()
    done = subprocess.run(["/usr/bin/time", "-o", str(log), "-f", "%U %S %M", *cmd],
                          capture_output=True, text=True)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{done.stderr[-3000:]}")
    user, system, rss = log.read_text().split()[-3:]
    return {"wall_s": wall, "cpu_s": float(user) + float(system), "peak_mb": int(rss) / 1024}


def _sts(model: Path) -> float:
    done = subprocess.run(["electra", "evaluate", "--model", str(model), "--task", "sts",
                           "--data", str(SHARED / "glue/STS-B"), "--quiet"],
                          capture_output=True, text=True, check=True)
    return float(json.loads(done.stdout.strip().splitlines()[-1])["dev"]["spearman"])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=3200)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--preset", default="small")
    ap.add_argument("--sides", default="ours,ours-fp32,st-fp32,st-bf16")
    ap.add_argument("--out", type=Path, default=Path("runs/embedding-vs-st"))
    ap.add_argument("--worker")
    ap.add_argument("--where", type=Path)
    a = ap.parse_args()
    if a.worker:
        return _worker(a.worker, a.out, a.where, a.epochs)
    _setup(a.out, a.preset, a.pairs)
    sides = a.sides.split(",")
    got: dict[str, list[dict[str, float]]] = {s: [] for s in sides}
    for r in range(a.repeats):
        for side in (sides if r % 2 == 0 else sides[::-1]):  # interleaved, order alternated
            where = a.out / f"{side}-{r}"
            shutil.rmtree(where, ignore_errors=True)
            got[side].append(_timed(_command(side, a.out, where, a.epochs)))
            print(f"round {r + 1} {side}: {json.dumps(got[side][-1])}", flush=True)
    from refusal_time import cpu_name  # (bench/, on the path when run as a script)

    cpu = cpu_name()
    base = got.get("st-fp32")
    for side in sides:
        line = {"side": side, "cpu": cpu, "pairs": a.pairs, "epochs": a.epochs,
                "preset": a.preset,
                "sts_b_dev_spearman": round(_sts(a.out / f"{side}-0/seed-1"), 4)}
        for key in ("wall_s", "cpu_s", "peak_mb"):
            vals = sorted(x[key] for x in got[side])
            line[key] = [round(vals[0], 1), round(statistics.median(vals), 1),
                         round(vals[-1], 1)]
            if base and side != "st-fp32":  # paired by round: theirs / ours (> 1: ours less)
                ratios = sorted(b[key] / x[key] for b, x in zip(base, got[side], strict=True))
                line[f"st_fp32_over_this_{key}"] = [round(ratios[0], 2),
                                                    round(statistics.median(ratios), 2),
                                                    round(ratios[-1], 2)]
        print(json.dumps(line))
        with RESULTS.open("a", encoding="utf-8") as f:
            f.write(json.dumps(line) + "\n")


if __name__ == "__main__":
    main()
