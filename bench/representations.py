"""How spread out are a discriminator's representations? Pretrained vs the same shape at init.

For each model: the mean pairwise cosine of token vectors (last layer) and of the [CLS]
vectors, and their effective rank (exp of the entropy of the normalised singular values
of the centred vectors; the width is the maximum). Collapsed representations (high
cosine, low rank) are hard to fine-tune from; see docs/explanation/short-runs.md,
"Fine-tuning after a short CPU pretraining".

    python bench/representations.py --model RUN [--checkpoints] [--text glue/SST-2/dev.tsv]

Without --text it reads sentences from the shared corpus's held-out files.
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

import torch
import torch.nn.functional as F

from electra.data.tokenizer import load_tokenizer
from electra.model import Discriminator
from electra.objectives.pretraining import ElectraPretrainingModel
from electra.saved import folders

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"


def sentences(path: Path | None, n: int) -> list[str]:
    if path is not None and path.suffix == ".tsv":
        with open(path, encoding="utf-8") as f:
            rows = list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
        return [r["sentence"] for r in rows[:n]]
    files = [path] if path else sorted((SHARED / "corpus" / "heldout").glob("*"))
    out: list[str] = []
    for file in files:
        out += [line.strip() for line in file.read_text().splitlines() if len(line) > 40]
    return out[:n]


def mean_cosine(x: torch.Tensor, n: int = 2000) -> float:
    pick = torch.randperm(len(x), generator=torch.Generator().manual_seed(0))[:n]
    x = F.normalize(x[pick].float(), dim=-1)  # the same sample of rows for every model
    c = x @ x.T
    m = len(x)
    return float((c.sum() - m) / (m * m - m))


def effective_rank(x: torch.Tensor) -> float:
    s = torch.linalg.svdvals((x - x.mean(0)).float())
    p = s / s.sum()
    return float(torch.exp(-(p * p.clamp_min(1e-12).log()).sum()))


@torch.no_grad()
def describe(model: Discriminator, batch: dict[str, torch.Tensor]) -> dict[str, float]:
    h = model.eval().encoder(batch["ids"], batch["mask"])
    cls, tokens = h[:, 0], h[batch["mask"].bool()]
    return {"token_cos": mean_cosine(tokens), "token_rank": effective_rank(tokens),
            "cls_cos": mean_cosine(cls), "cls_rank": effective_rank(cls)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, help="a pretraining run folder")
    ap.add_argument("--text", type=Path, help="a GLUE .tsv with a 'sentence' column, or text")
    ap.add_argument("--n", type=int, default=400, help="sentences (default 400)")
    ap.add_argument("--checkpoints", action="store_true", help="also each kept checkpoint")
    args = ap.parse_args()
    torch.manual_seed(0)
    run = Path(args.model)
    trained = folders.load(run, "discriminator")[0]
    tok = load_tokenizer(run / "discriminator")
    tok.enable_padding(pad_id=0)
    tok.enable_truncation(128)
    enc = tok.encode_batch(sentences(args.text, args.n))
    batch = {"ids": torch.tensor([e.ids for e in enc]),
             "mask": torch.tensor([e.attention_mask for e in enc])}
    models: dict[str, Discriminator] = {"pretrained": trained,
                                        "random init": Discriminator(trained.config)}
    if args.checkpoints:
        from safetensors.torch import load_model

        for ck in sorted((run / "checkpoints").glob("step-*[0-9]")):
            m = ElectraPretrainingModel(trained.config)
            load_model(m, str(ck / "model.safetensors"), strict=False)
            models[ck.name] = m.discriminator
    width = trained.config.hidden_size
    print(f"{len(enc)} sentences; width {width}\n")
    print("| model | token mean cosine | token effective rank | [CLS] mean cosine | "
          "[CLS] effective rank |\n|---|---|---|---|---|")
    for name, model in models.items():
        d = describe(model, batch)
        print(f"| {name} | {d['token_cos']:.3f} | {d['token_rank']:.1f} | {d['cls_cos']:.3f} "
              f"| {d['cls_rank']:.1f} |")


if __name__ == "__main__":
    main()
