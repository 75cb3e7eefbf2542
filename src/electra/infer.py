"""Inference with a fine-tuned model, as evaluation and `electra predict` both run it:
class ids or scores, each word's tag, each question's best answer. No training here."""

from __future__ import annotations

from typing import Any

import torch

from electra.config import FinetuneConfig
from electra.data.squad import QAExample, best_answers, qa_features
from electra.data.tagging import Sentence, encode_tagged, word_predictions
from electra.data.tasks import TaskData
from electra.model import QuestionAnswerer, SequenceClassifier, TokenClassifier
from electra.runtime import autocast


@torch.no_grad()
def predict(model: SequenceClassifier, batch: dict[str, torch.Tensor], regression: bool,
            precision: str = "auto", batch_size: int = 128) -> torch.Tensor:
    """Predicted label ids (or scores, for regression) for encoded examples."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    outs = []
    for i in range(0, len(batch["input_ids"]), batch_size):
        part = {k: v[i : i + batch_size].to(device) for k, v in batch.items() if k != "labels"}
        with autocast(device, precision):
            logits = model(part["input_ids"], part["attention_mask"], part["token_type_ids"])
        outs.append(logits.float().cpu())
    model.train(was_training)
    logits = torch.cat(outs)
    return logits.squeeze(-1) if regression else logits.argmax(-1)


@torch.no_grad()
def predict_tags(model: TokenClassifier, tok: Any, sentences: list[Sentence],
                 data: TaskData, cfg: FinetuneConfig, batch_size: int = 64) -> list[list[str]]:
    """Each sentence's predicted tag per word (read at the word's first piece; a word cut off
    by max_length gets "O", or the first tag where there is no "O")."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    names = {i: t for t, i in data.labels.items()}
    fallback = data.labels.get("O", 0)
    out: list[list[str]] = []
    for i in range(0, len(sentences), batch_size):
        part = sentences[i : i + batch_size]
        b = encode_tagged(tok, part, cfg.max_length, data.labels)
        with autocast(device, cfg.precision):
            logits = model(b["input_ids"].to(device), b["attention_mask"].to(device),
                           b["token_type_ids"].to(device)).float().cpu()
        out += [[names[t] for t in ids] for ids in word_predictions(
            logits, b["first"], [len(s.words) for s in part], fallback)]
    model.train(was_training)
    return out


@torch.no_grad()
def answer_questions(model: QuestionAnswerer, tok: Any, examples: list[QAExample],
                     cfg: FinetuneConfig, batch_size: int = 64
                     ) -> tuple[dict[str, str], dict[str, float]]:
    """Each question's best answer over its context's windows, and its no-answer score
    minus the best answer's (SQuAD 2.0 answers "" above a threshold)."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    f = qa_features(tok, examples, cfg.max_length, cfg.doc_stride,  # type: ignore[arg-type]
                    cfg.max_query_length)
    starts, ends = [], []
    for i in range(0, len(f["example"]), batch_size):
        part = {k: f[k][i : i + batch_size].to(device) for k in ("input_ids", "token_type_ids",
                                                                 "attention_mask")}
        with autocast(device, cfg.precision):
            logits = model(part["input_ids"], part["attention_mask"],
                           part["token_type_ids"]).float().cpu().numpy()
        starts += list(logits[..., 0])
        ends += list(logits[..., 1])
    model.train(was_training)
    return best_answers(starts, ends, f, examples, cfg.n_best, cfg.max_answer_length)
