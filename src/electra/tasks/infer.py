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
from electra.train.runtime import autocast


@torch.no_grad()
def logits(model: torch.nn.Module, batch: dict[str, torch.Tensor], precision: str = "auto",
           batch_size: int = 128) -> torch.Tensor:
    """The model's float32 outputs (on the CPU) for encoded inputs of one width, in eval mode
    and in batches; the model's train/eval mode is restored after."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    outs = []
    for i in range(0, len(batch["input_ids"]), batch_size):
        part = {k: batch[k][i : i + batch_size].to(device)
                for k in ("input_ids", "attention_mask", "token_type_ids")}
        with autocast(device, precision):
            out = model(part["input_ids"], part["attention_mask"], part["token_type_ids"])
        outs.append(out.float().cpu())
    model.train(was_training)
    return torch.cat(outs)


def predict(model: SequenceClassifier, batch: dict[str, torch.Tensor], regression: bool,
            precision: str = "auto", batch_size: int = 128) -> torch.Tensor:
    """Predicted label ids (or scores, for regression) for encoded examples."""
    out = logits(model, batch, precision, batch_size)
    return out.squeeze(-1) if regression else out.argmax(-1)


def predict_tags(model: TokenClassifier, tok: Any, sentences: list[Sentence],
                 data: TaskData, cfg: FinetuneConfig, batch_size: int = 64) -> list[list[str]]:
    """Each sentence's predicted tag per word (read at the word's first piece; a word cut off
    by max_length gets "O", or the first tag where there is no "O")."""
    names = {i: t for t, i in data.labels.items()}
    fallback = data.labels.get("O", 0)
    out: list[list[str]] = []
    for i in range(0, len(sentences), batch_size):  # each batch padded to its own width
        part = sentences[i : i + batch_size]
        b = encode_tagged(tok, part, cfg.max_length, data.labels)
        out += [[names[t] for t in ids] for ids in word_predictions(
            logits(model, b, cfg.precision, batch_size), b["first"],
            [len(s.words) for s in part], fallback)]
    return out


def answer_questions(model: QuestionAnswerer, tok: Any, examples: list[QAExample],
                     cfg: FinetuneConfig, batch_size: int = 64
                     ) -> tuple[dict[str, str], dict[str, float]]:
    """Each question's best answer over its context's windows, and its no-answer score
    minus the best answer's (SQuAD 2.0 answers "" above a threshold)."""
    f = qa_features(tok, examples, cfg.max_length, cfg.doc_stride,  # type: ignore[arg-type]
                    cfg.max_query_length)
    out = logits(model, f, cfg.precision, batch_size).numpy()  # (windows, T, 2)
    return best_answers(list(out[..., 0]), list(out[..., 1]), f, examples, cfg.n_best,
                        cfg.max_answer_length)
