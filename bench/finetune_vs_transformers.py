"""`electra finetune` against a plain transformers fine-tuning loop, the whole command of each
timed interleaved in one run (one repeat: every side once, in turn).

    python bench/finetune_vs_transformers.py [--tasks SST-2,MRPC,RTE] [--rows 2000]
        [--epochs 1] [--repeats 3] [--before /tmp/electra-before]
        [--sides ours,ours-fp32,hf-fp32,...]

ELECTRA-Small from random init (BERT's vocabulary), the same ``--rows`` training rows of a
GLUE task from ../shared/data/glue (our ``max_train_examples`` subset), ``--epochs`` epochs
(one), batch 32, seed ``repeat + 1`` on every side; the dev set scored at the end. Sides:

- ``ours``: `electra finetune` as a user runs it (default precision: bf16 autocast where the
  CPU multiplies bf16 natively), which unpads; ``ours-grouped`` adds
  ``--set group_by_length=true``; ``ours-fp32``: ``--set precision=fp32``; ``ours-padded``:
  ``--set unpad=false`` (every position computed; combinable: ``ours-grouped-fp32``).
- ``before`` / ``before-fp32``: the same command from another checkout (``--before``, e.g. a
  worktree of the commit before unpadding).
- ``hf-fp32`` / ``hf-bf16``: transformers' ``ElectraForSequenceClassification`` built from
  an ``ElectraConfig`` of the same shape, ``ElectraTokenizerFast.from_pretrained`` on the
  same vocabulary (a folder holding it as ``vocab.txt``, as a user's checkpoint does; the
  worker stops unless its ids equal ours on every training row),
  ``DataCollatorWithPadding`` (dynamic padding, what ``Trainer`` does) over shuffled batches,
  torch's AdamW (lr 3e-4, weight decay 0.01, eps 1e-6), linear warmup (10%) and decay, clipping
  at 1.0; ``hf-bf16`` under CPU bf16 autocast; ``hf-fp32-ld`` adds our layer-wise
  learning-rate decay (0.8 a layer below the head, as `electra finetune` trains ELECTRA-Small),
  for an accuracy comparison with the same optimizer. The script (this file, ``--worker``)
  is timed from its start, imports included, as ours is.

Prints each side's seconds (min/median/max), its dev scores by seed, and every side's paired
ratio against the first ``hf-fp32*`` side.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GLUE = ROOT.parent / "shared" / "data" / "glue"
VOCAB = ROOT.parent / "shared" / "data" / "vocab" / "bert-base-uncased-vocab.txt"
SMALL = dict(vocab_size=30522, embedding_size=128, hidden_size=256, num_hidden_layers=12,
             num_attention_heads=4, intermediate_size=1024, max_position_embeddings=512)


def layerwise(model, lr: float, decay: float, weight_decay: float) -> list[dict]:
    """transformers' ELECTRA parameters in `electra finetune`'s groups: lr * decay ** (L -
    depth), depth 0 the embeddings, i + 1 layer i, L + 1 the classifier."""
    L = model.config.num_hidden_layers
    groups: dict = {}
    for name, p in model.named_parameters():
        if name.startswith("electra.embeddings"):  # and embeddings_project
            depth = 0
        elif name.startswith("electra.encoder.layer."):
            depth = int(name.split(".")[3]) + 1
        else:
            depth = L + 1
        plain = p.ndim < 2 or name.endswith(".bias")
        g = groups.setdefault((depth, plain), {"params": [], "lr": lr * decay ** max(0, L - depth),
                                               "weight_decay": 0.0 if plain else weight_decay})
        g["params"].append(p)
    return list(groups.values())


def hf_worker(task: Path, rows: int, seed: int, precision: str, epochs: int,
              layer_decay: float) -> dict:
    """A plain transformers loop; returns the dev accuracy."""
    import torch
    from torch.utils.data import DataLoader
    from transformers import (
        DataCollatorWithPadding,
        ElectraConfig,
        ElectraForSequenceClassification,
        ElectraTokenizerFast,
        get_linear_schedule_with_warmup,
    )

    sys.path.insert(0, str(ROOT / "src"))
    from electra.data.tokenizer import load_tokenizer
    from electra.tasks.sequence.data import glue_task, read_glue

    spec = glue_task(task.name.lower().replace("-", ""))
    train, dev = read_glue(spec, task, "train"), read_glue(spec, task, next(iter(spec.dev)))
    pick = torch.randperm(len(train), generator=torch.Generator().manual_seed(0))
    train = [train[i] for i in sorted(pick[:rows].tolist())]  # ours: max_train_examples
    label = {name: i for i, name in enumerate(spec.labels)}
    with tempfile.TemporaryDirectory() as folder:  # transformers 5 ignores vocab_file=
        shutil.copy(VOCAB, Path(folder) / "vocab.txt")
        tok = ElectraTokenizerFast.from_pretrained(folder)

    def encode(examples):
        pairs = examples[0].text_b is not None
        enc = tok([e.text_a for e in examples], [e.text_b for e in examples] if pairs else None,
                  truncation=True, max_length=128)
        return [{**{k: v[i] for k, v in enc.items()}, "labels": label[e.label]}
                for i, e in enumerate(examples)]

    theirs = encode(train)
    t0 = time.perf_counter()  # the check's time is not the loop's: the parent subtracts it
    ours = load_tokenizer(VOCAB)
    ours.enable_truncation(128)
    mine = ours.encode_batch([(e.text_a, e.text_b) if e.text_b is not None else e.text_a
                              for e in train])
    if [r["input_ids"] for r in theirs] != [e.ids for e in mine]:
        raise SystemExit("the transformers tokenizer's ids differ from electra's")
    check_s = time.perf_counter() - t0

    torch.manual_seed(seed)
    model = ElectraForSequenceClassification(ElectraConfig(**SMALL, num_labels=len(label)))
    collate = DataCollatorWithPadding(tok)
    loader = DataLoader(theirs, batch_size=32, shuffle=True, collate_fn=collate,
                        drop_last=True)
    steps = len(loader) * epochs
    params = (layerwise(model, 3e-4, layer_decay, 0.01) if layer_decay < 1 else
              model.parameters())
    opt = torch.optim.AdamW(params, lr=3e-4, weight_decay=0.01, eps=1e-6)
    schedule = get_linear_schedule_with_warmup(opt, int(0.1 * steps), steps)
    half = precision == "bf16"
    model.train()
    for batch in (b for _ in range(epochs) for b in loader):  # reshuffled every epoch
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=half):
            loss = model(**batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        schedule.step()
        opt.zero_grad(set_to_none=True)
    model.eval()
    right = 0
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=half):
        for batch in DataLoader(encode(dev), batch_size=128, collate_fn=collate):
            right += int((model(**batch).logits.argmax(-1) == batch["labels"]).sum())
    return {"accuracy": right / len(dev), "check_s": check_s}


def run(side: str, task: Path, out: Path, rows: int, seed: int, epochs: int,
        before: Path | None) -> tuple[float, float]:
    """(seconds, dev accuracy) of one side's whole command."""
    if side.startswith("hf"):
        cmd = [sys.executable, __file__, "--worker", str(task), str(rows), str(seed),
               side.split("-")[1], str(epochs), "0.8" if side.endswith("-ld") else "1"]
        env_src = ROOT
    else:
        cmd = [sys.executable, "-m", "electra", "finetune", "--random-init", "small",
               "--tokenizer", str(VOCAB), "--task", task.name.lower().replace("-", ""),
               "--data", str(task), "--out", str(out), "--quiet", "--seeds", str(seed),
               "--set", f"epochs={epochs}", "--set", f"max_train_examples={rows}"]
        cmd += ["--set", "precision=fp32"] if side.endswith("fp32") else []
        cmd += ["--set", "group_by_length=true"] if "grouped" in side else []
        cmd += ["--set", "unpad=false"] if "padded" in side else []
        env_src = before if side.startswith("before") else ROOT
    import os

    env = {**os.environ, "PYTHONPATH": str(env_src / "src")}
    t0 = time.perf_counter()
    done = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env)
    seconds = time.perf_counter() - t0
    if side.startswith("hf"):
        worker = json.loads(done.stdout.strip().splitlines()[-1])
        return seconds - worker["check_s"], worker["accuracy"]
    return seconds, json.loads((out / "results.json").read_text())["median"]["dev"]["accuracy"]


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        task, rows, seed, precision, epochs, decay = sys.argv[2:8]
        print(json.dumps(hf_worker(Path(task), int(rows), int(seed), precision, int(epochs),
                                   float(decay))))
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", default="SST-2,MRPC,RTE")
    ap.add_argument("--rows", type=int, default=2000)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--sides", default="hf-fp32,ours,ours-fp32,ours-grouped")
    ap.add_argument("--before", type=Path, help="another checkout, for sides before*")
    args = ap.parse_args()
    sides = args.sides.split(",")
    if not GLUE.is_dir():
        raise SystemExit(f"{GLUE}: absent (this bench needs ../shared/data/glue)")
    for name in args.tasks.split(","):
        times: dict[str, list[float]] = {s: [] for s in sides}
        scores: dict[str, list[float]] = {s: [] for s in sides}
        with tempfile.TemporaryDirectory() as tmp:
            for r in range(args.repeats):
                for side in sides:
                    seconds, acc = run(side, GLUE / name, Path(tmp) / f"{side}-{r}",
                                       args.rows, r + 1, args.epochs, args.before)
                    times[side].append(seconds)
                    scores[side].append(acc)
                    print(f"  {name} repeat {r} {side}: {seconds:.1f} s, dev {acc:.4f}",
                          flush=True)
        print(f"{name}, {args.rows} rows, {args.epochs} epoch(s), ELECTRA-Small from random init, "
              f"{args.repeats} interleaved repeats (seeds 1..{args.repeats})")
        for side in sides:
            v = times[side]
            line = (f"{side:13s} seconds min/med/max {min(v):6.1f} {statistics.median(v):6.1f} "
                    f"{max(v):6.1f}   dev acc by seed {[round(a, 4) for a in scores[side]]}")
            ref = next((x for x in sides if x.startswith("hf-fp32")), None)
            if ref is not None and side != ref:
                ratios = [h / s for h, s in zip(times[ref], v, strict=True)]
                line += (f"   {ref}/{side} min/med/max {min(ratios):.2f} "
                         f"{statistics.median(ratios):.2f} {max(ratios):.2f}")
            print(line, flush=True)


if __name__ == "__main__":
    main()
