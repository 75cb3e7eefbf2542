"""Sentence embeddings from any electra or transformers model's encoder, and STS-B scored with
them zero-shot (issue 62's first part: the embedding fine-tuning, the sentence-transformers
export and retrieval are to come).

    electra.encode(MODEL, ["a sentence", ...])        -> (N, H) float32, L2-normalised
    Encoder(MODEL).encode(sentences, batch_size=32)   the object MTEB's runner takes
    electra.sts(MODEL, data="glue/STS-B")             -> {"dev": {"spearman": ...}}

The encoder is the model's discriminator's (or a fine-tuned model's) as `electra detect` and
`finetune --model` open it: a run, one of its parts or checkpoints, a transformers folder, a
hub id. Pooling: ``mean`` over the real tokens (the default, sentence-transformers'), or
``cls`` (the first position); texts longer than the model's positions are cut.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch

from electra.data.tokenizer import SpecialTokens, load_tokenizer
from electra.errors import UserError
from electra.io import hub
from electra.runtime import autocast
from electra.saved.models import open_model
from electra.tasks.registry import load_task

POOLINGS = ("mean", "cls")


class Encoder:
    """A model's sentence embeddings: ``encode(sentences)`` -> (N, H) float32 (MTEB's
    runner calls it so: ``mteb.MTEB(tasks=...).run(Encoder("RUN"))``)."""

    def __init__(self, model: str | Path, pooling: str = "mean", normalize: bool = True,
                 max_length: int | None = None, precision: str = "fp32") -> None:
        if pooling not in POOLINGS:
            raise UserError(f"pooling={pooling!r}: choose one of {', '.join(POOLINGS)}")
        model = hub.resolve(model, "--model")  # a hub id's folder, read before opening it
        meta_kind = "classifier" if _is_classifier(model) else "discriminator"
        opened = open_model(model, meta_kind)
        self.module = opened[meta_kind].eval()
        self.encoder = self.module.encoder  # type: ignore[union-attr]
        self.tok = load_tokenizer(opened.tokenizer)
        self.pad = SpecialTokens.of(self.tok).pad
        limit = self.module.config.max_position_embeddings  # type: ignore[union-attr]
        self.max_length = min(max_length or limit, limit)
        self.pooling, self.normalize, self.precision = pooling, normalize, precision

    @torch.no_grad()
    def encode(self, sentences: list[str], batch_size: int = 32, **_: Any) -> np.ndarray:
        """(len(sentences), H) float32 embeddings, in order."""
        if isinstance(sentences, str):
            raise UserError("encode takes a list of texts; give [text] for one")
        self.tok.no_padding()
        self.tok.enable_truncation(self.max_length)
        out = []
        for i in range(0, len(sentences), batch_size):
            encs = self.tok.encode_batch(list(sentences[i:i + batch_size]))
            T = max(len(e.ids) for e in encs)
            ids = torch.full((len(encs), T), self.pad, dtype=torch.long)
            mask = torch.zeros_like(ids)
            for r, e in enumerate(encs):
                ids[r, :len(e.ids)] = torch.tensor(e.ids)
                mask[r, :len(e.ids)] = 1
            with autocast(torch.device("cpu"), self.precision):
                h = self.encoder(ids, mask, torch.zeros_like(ids)).float()
            if self.pooling == "cls":
                v = h[:, 0]
            else:
                m = mask[..., None].float()
                v = (h * m).sum(1) / m.sum(1).clamp(min=1)
            if self.normalize:
                v = torch.nn.functional.normalize(v, dim=-1)
            out.append(v.numpy())
        return np.concatenate(out) if out else np.zeros((0, self.module.config.hidden_size),  # type: ignore[union-attr]
                                                         dtype=np.float32)


def _is_classifier(model: str | Path) -> bool:
    meta = Path(model) / "config.json"
    try:
        return json.loads(meta.read_text()).get("kind") == "classifier"
    except (OSError, ValueError, AttributeError):
        return False


def encode(model: str | Path, texts: list[str], pooling: str = "mean",
           normalize: bool = True, batch_size: int = 32) -> np.ndarray:
    """The embeddings of ``texts`` (the Python API's ``electra.encode``)."""
    return Encoder(model, pooling, normalize).encode(texts, batch_size)


def sts(model: str | Path, data: str | Path, split: str = "dev", pooling: str = "mean",
        batch_size: int = 32) -> dict[str, dict[str, float]]:
    """STS-B zero-shot: the Spearman correlation between the cosine of each pair's
    embeddings and its gold score, on GLUE's own STS-B files (``data``: the folder; the
    Python API's ``electra.sts``)."""
    from scipy.stats import spearmanr  # scipy's import takes a second: only when scoring

    task = load_task("stsb", data=str(data), split=split)
    enc, out = Encoder(model, pooling, normalize=True), {}
    for name, rows in task.dev.items():
        pairs = [r for r in rows if r.label is not None and r.text_b is not None]
        if not pairs:
            raise UserError(f"--data {data}: no scored pairs in its {name} split")
        a = enc.encode([r.text_a for r in pairs], batch_size)
        b = enc.encode([r.text_b for r in pairs], batch_size)
        cosine = (a * b).sum(1)
        rho = spearmanr(cosine, np.array([float(r.label) for r in pairs])).statistic
        out[name] = {"spearman": float(rho)}
    return out
