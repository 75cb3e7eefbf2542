"""Extractive question answering: SQuAD 1.1 and 2.0, from the official JSON.

The head is a dense layer giving each token a start and an end logit, trained on windows of
the context (``doc_stride`` apart) with the mean of the two positions' cross-entropies,
scored with the official script's exact match and F1 (SQuAD 2.0: with the best no-answer
threshold too); it exports as transformers' ``ElectraForQuestionAnswering``. Reading,
windows and scores are ``electra.tasks.qa.data``'.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import torch
from torch import nn

from electra.config import FamilySettings, FinetuneConfig, ModelConfig
from electra.errors import UserError
from electra.io.files import jsonl, read_text
from electra.model import EncoderWithHead
from electra.model.kernels import Kernels
from electra.tasks.base import Head, TaskData, cross_entropy, logits
from electra.tasks.qa.data import (
    QAExample,
    best_answers,
    qa_features,
    read_squad,
    split_articles,
    squad_scores,
)

if TYPE_CHECKING:
    from tokenizers import Tokenizer  # (the types only: the readers stay light)


class QuestionAnswerer(EncoderWithHead):
    """Encoder + dense -> a start and an end logit per token (extractive QA). Keys map onto
    transformers' ElectraForQuestionAnswering (``qa_outputs``)."""

    def __init__(self, cfg: ModelConfig, kernels: Kernels | None = None) -> None:
        super().__init__()
        self.build_head(cfg, 2, kernels, dropout=False)  # a start and an end logit

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        """Start and end logits (B, T, 2); padding's are the dtype's lowest, so an answer's
        softmax is over the real tokens alone (how much padding a batch has changes
        nothing)."""
        out = super().forward(input_ids, attention_mask, token_type_ids)
        if attention_mask is None:
            return out
        return out.masked_fill(~attention_mask.bool()[..., None], torch.finfo(out.dtype).min)

    def head(self, h: torch.Tensor) -> torch.Tensor:
        """Hidden states (B, T, H) -> start and end logits (B, T, 2)."""
        return self.head_out(h if self.transform is None else self.transform(h))


@dataclass(frozen=True)
class QASettings(FamilySettings):
    """Extractive QA's windows and answers (``--task squad1|squad2``)."""

    RANGES: ClassVar[dict[str, str | tuple[str, ...]]] = {
        "doc_stride": ">= 1", "max_query_length": ">= 1", "n_best": ">= 1",
        "max_answer_length": ">= 1", "article_split": "[0, 1)"}
    doc_stride: int = 128
    """Tokens by which consecutive windows over a long context overlap."""
    max_query_length: int = 64
    """The question's most tokens (longer ones are cut)."""
    n_best: int = 20
    """Start and end candidates per window."""
    max_answer_length: int = 30
    """The longest answer span, in tokens."""
    article_split: float = 0.0
    """> 0: train on this fraction of the articles of --train and evaluate on the
    others of --dev (one file for both: a stand-in when there is no separate train set)."""


class QA(Head):
    name = "qa"
    Settings = QASettings
    tasks = ("squad1", "squad2")
    help = "squad1 or squad2"
    defaults = {"max_length": 512}  # noqa: RUF012 (read, never changed)
    hf_part = "qa"
    hf_class = "ElectraForQuestionAnswering"
    pipeline_tag = "question-answering"
    hf_keys = (("head_out.weight", "qa_outputs.weight"), ("head_out.bias", "qa_outputs.bias"))

    hub_datasets = {"squad1": ("rajpurkar/squad", "plain_text"),  # noqa: RUF012 (read only)
                    "squad2": ("rajpurkar/squad_v2", "squad_v2")}

    def load(self, task: str, train: str | None = None, dev: str | None = None,
             predict: str | None = None, split: str | None = None, **_: Any) -> TaskData:
        """Train: questions with their first answer; answers not at their answer_start are
        skipped and counted."""
        evaluating = split is not None
        if predict:
            raise UserError(f"--predict test writes GLUE submission files; score {task} with "
                            f"`electra evaluate --dev FILE`")
        if not dev or not (train or evaluating):
            raise UserError(f"--task {task} needs --train FILE and --dev FILE (SQuAD JSON; one "
                            f"file for both with --set article_split=0.5)")
        metrics = ("f1", "exact") + (("best_f1", "best_exact") if task == "squad2" else ())
        dev_q = read_squad(dev, training=False)[0]
        train_q: list[Any] = []
        if not evaluating:
            train_q, skipped, _ = read_squad(train, training=True)  # type: ignore[arg-type]
            if skipped:
                print(f"electra: note: {skipped} training answer(s) of {train} are not at "
                      f"their answer_start in the context and were skipped", file=sys.stderr)
        return TaskData(task, train_q, {"dev": dev_q}, metrics, False, head=self)

    def prepare(self, data: TaskData, cfg: FinetuneConfig) -> TaskData:
        """``article_split``: train on a fraction of the articles, evaluate on the others.
        The stride checked against the length (a window moves on by the stride)."""
        qa = self.settings(cfg)
        if qa.doc_stride >= cfg.max_length:  # type: ignore[operator]
            raise UserError(f"doc_stride={qa.doc_stride} must be below max_length="
                            f"{cfg.max_length} (a window moves on by the stride); e.g. --set "
                            f"doc_stride={cfg.max_length // 4}")  # type: ignore[operator]
        if not qa.article_split:
            return data
        return data.replace(train=split_articles(data.train, qa.article_split)[0],
                            dev={"dev": split_articles(data.dev["dev"],
                                                       qa.article_split)[1]})

    def for_model(self, data: TaskData, meta: dict[str, Any], cfg: FinetuneConfig,
                  where: str) -> TaskData:
        """The articles the model was not trained on, with ``article_split``."""
        qa = self.settings(cfg)
        if qa.article_split:
            data = data.replace(dev={"dev": split_articles(data.dev["dev"],
                                                           qa.article_split)[1]})
        return data.replace(labels=meta["labels"])

    def read_inputs(self, path: Path, meta: dict[str, Any]) -> list[Any]:
        """SQuAD JSON, or JSONL {"question", "context"[, "id"]}."""
        if path.suffix == ".json":
            return read_squad(path, training=False)[0]
        out = []
        for n, r in jsonl(path, read_text(path, "--input").splitlines()):
            if not isinstance(r, dict) or not isinstance(r.get("question"), str) or not \
                    isinstance(r.get("context"), str):
                raise UserError(f'{path}:{n}: expected {{"question": ..., "context": ...}} '
                                f'(and optionally "id")')
            out.append(QAExample(str(r.get("id", n)), r["question"], r["context"]))
        if not out:
            raise UserError(f"{path}: no questions")
        return out

    def build(self, cfg: ModelConfig, labels: dict[str, int], regression: bool,
              kernels: Kernels | None = None, settings: dict[str, Any] | None = None
              ) -> nn.Module:
        return QuestionAnswerer(cfg, kernels)

    def encode(self, tok: Tokenizer, examples: list[Any], data: TaskData,
               cfg: FinetuneConfig) -> dict[str, torch.Tensor]:
        """Training windows, each with its answer's token positions (B, 2)."""
        qa = self.settings(cfg)
        f = qa_features(tok, examples, cfg.max_length, qa.doc_stride,  # type: ignore[arg-type]
                        qa.max_query_length, training=True)
        return {k: f[k] for k in ("input_ids", "token_type_ids", "attention_mask")} | {
            "labels": torch.stack([f["start"], f["end"]], 1)}

    def loss(self, logits: torch.Tensor, labels: torch.Tensor,
             data: TaskData) -> torch.Tensor:
        """The mean of the start and end positions' cross-entropies: (B, T, 2), (B, 2)."""
        return sum(cross_entropy(logits[..., k], labels[:, k])
                   for k in (0, 1)) / 2  # type: ignore[return-value]

    def predict(self, model: nn.Module, tok: Tokenizer, examples: list[Any], data: TaskData,
                cfg: FinetuneConfig) -> tuple[Any, Any]:
        return self.answers(model, tok, examples, cfg), examples

    def answers(self, model: nn.Module, tok: Tokenizer, examples: list[QAExample],
                cfg: FinetuneConfig, batch_size: int = 64
                ) -> tuple[dict[str, str], dict[str, float]]:
        """Each question's best answer over its context's windows, and its no-answer score
        minus the best answer's (SQuAD 2.0 answers "" above a threshold)."""
        qa = self.settings(cfg)
        f = qa_features(tok, examples, cfg.max_length, qa.doc_stride,  # type: ignore[arg-type]
                        qa.max_query_length)
        out = logits(model, f, cfg.precision, batch_size).numpy()  # (windows, T, 2)
        return best_answers(list(out[..., 0]), list(out[..., 1]), f, examples, qa.n_best,
                            qa.max_answer_length)

    def score(self, data: TaskData, preds: Any, labels: Any) -> dict[str, float]:
        """The official script's numbers, x100."""
        answers, null = preds
        return squad_scores(labels, answers, null if data.name == "squad2" else None)

    def report(self, split: str, preds: Any, labels: Any,
               data: TaskData) -> tuple[list[str], dict[str, Any] | None]:
        return ([f"{split}: every answer is empty"] if not any(preds[0].values()) else []), None

    def records(self, model: nn.Module, tok: Tokenizer, items: list[Any], data: TaskData,
                cfg: FinetuneConfig) -> list[dict[str, Any]]:
        answers, null = self.answers(model, tok, items, cfg)
        no_answer = data.name == "squad2"
        return [{"id": e.qid, "answer": "" if no_answer and null[e.qid] > 0 else
                 answers[e.qid], "no_answer_minus_best": round(null[e.qid], 4)} for e in items]

    def hf_labels(self, meta: dict[str, Any]) -> dict[str, Any]:
        return {}
