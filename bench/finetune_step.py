"""The fine-tuning step alone, padded against unpadded, interleaved in one process.

    python bench/finetune_step.py [--repeats 3] [--precision bf16]

ELECTRA-Small (random init) with the sequence head, 12 random batches of 32 SST-2 training
sentences (BERT's vocabulary, ../shared/data), each cut to its longest row as `electra
finetune` cuts them, one AdamW step each: the model built with ``unpad=False`` (every
position computed) and with ``unpad=True`` (the real tokens only). Prints ms per step
min/median/max and the padding left after the cut.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import statistics
import time
from pathlib import Path

import torch
from tokenizers import BertWordPieceTokenizer

from electra.model.bodies import model_preset
from electra.model.kernels import FAST_CPU
from electra.runtime import autocast
from electra.tasks.sequence.head import SequenceClassifier
from electra.train.optim import adamw, param_groups

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"


@functools.cache
def _sst2() -> tuple[BertWordPieceTokenizer, list[str]]:
    tok = BertWordPieceTokenizer(str(SHARED / "vocab" / "bert-base-uncased-vocab.txt"),
                                 lowercase=True)
    tok.enable_truncation(128)
    tok.enable_padding()
    return tok, (SHARED / "glue" / "SST-2" / "train.tsv").read_text().splitlines()[1:]


def sst2_batches(size: int, n: int, g: torch.Generator
                 ) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """``n`` batches of ``size`` random SST-2 training sentences (drawn with ``g``; BERT's
    vocabulary), each cut to its longest row as `electra finetune` cuts them: (ids, mask,
    random 0/1 labels)."""
    tok, lines = _sst2()
    pick = torch.randperm(len(lines), generator=g)[: size * n].tolist()
    texts = [lines[i].split("\t")[0] for i in pick]
    batches = []
    for i in range(n):
        enc = tok.encode_batch(texts[i * size: (i + 1) * size])
        mask = torch.tensor([e.attention_mask for e in enc])
        keep = int(mask.sum(1).max())
        batches.append((torch.tensor([e.ids for e in enc])[:, :keep], mask[:, :keep],
                        torch.randint(2, (size,), generator=g)))
    return batches


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--precision", default="bf16")
    args = ap.parse_args()
    batches = sst2_batches(32, 12, torch.Generator().manual_seed(0))
    cfg = model_preset("small", vocab_size=30522)
    sides = {}
    for unpad in (False, True):
        torch.manual_seed(0)
        model = SequenceClassifier(cfg, 2, dataclasses.replace(FAST_CPU, unpad=unpad)).train()
        sides["unpadded" if unpad else "padded"] = (model, adamw(param_groups(model, 0.01),
                                                                  lr=1e-4))
    times: dict[str, list[float]] = {k: [] for k in sides}
    for _ in range(args.repeats):
        for name, (model, opt) in sides.items():
            t0 = time.perf_counter()
            for ids, mask, y in batches:
                with autocast(torch.device("cpu"), args.precision):
                    loss = torch.nn.functional.cross_entropy(model(ids, mask).float(), y)
                loss.backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
            times[name].append((time.perf_counter() - t0) / len(batches) * 1e3)
    pad = 1 - sum(float(m.float().mean()) for _, m, _ in batches) / len(batches)
    print(f"SST-2 batches of 32 cut to their longest row: {pad:.1%} padding; "
          f"precision {args.precision}")
    for name, v in times.items():
        print(f"{name:9s} ms/step min/med/max {min(v):6.1f} {statistics.median(v):6.1f} "
              f"{max(v):6.1f}")


if __name__ == "__main__":
    main()
