"""Extractive question answering (SQuAD 1.1 and 2.0): reading, features, answers, scores.

    read_squad(path, training)      the official JSON; in training every answerable question
                                    must have an answer whose text sits at its answer_start
                                    (those that do not are counted and skipped)
    qa_features(tok, examples, ...) windows over each context: [CLS] question [SEP] context
                                    window [SEP], max 512 tokens, stride 128, question <= 64
                                    tokens (the original's settings); character offsets come
                                    from the tokenizer's own offsets, never from re-tokenising
    best_answers(...)               n-best (20) spans of <= 30 tokens per question over its
                                    windows; for 2.0 the score of "no answer" ([CLS])
    squad_scores(...)               the official evaluation: answer normalisation, exact match
                                    and F1 as the max over gold answers; for 2.0 HasAns/NoAns
                                    splits and the no-answer threshold chosen on this set
                                    (best_exact / best_f1 and their thresholds)
"""

from __future__ import annotations

import collections
import re
import string
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from electra.data.tokenizer import special_names
from electra.errors import UserError
from electra.io.files import read_json

if TYPE_CHECKING:
    from tokenizers import Tokenizer  # (the types only: the readers stay light)


@dataclass
class QAExample:
    qid: str
    question: str
    context: str
    answers: list[tuple[str, int]] = field(default_factory=list)  # (text, start character)
    impossible: bool = False
    title: str = ""


def read_squad(path: str | Path, training: bool) -> tuple[list[QAExample], int, str]:
    """The questions of a SQuAD JSON file, its skipped count (answers whose text is not at
    their answer_start) and its version ("1.1" or "2.0", from the file or is_impossible).

    Raises:
        UserError: a missing or damaged file, a file that is not SQuAD JSON, or (training)
            an answerable question without an answer.
    """
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: no such file")
    doc = read_json(path, "give the official SQuAD file")
    try:
        articles = doc["data"]
        if not isinstance(articles, list):
            raise TypeError
    except (KeyError, TypeError):
        raise UserError(f"{path}: not SQuAD JSON (no top-level \"data\" list of articles)"
                        ) from None
    out, skipped, v2 = [], 0, str(doc.get("version", "")).startswith("v2") or str(
        doc.get("version", "")).startswith("2")
    seen: dict[str, str] = {}  # question id -> where it was first given
    for a_i, article in enumerate(articles, 1):
        paragraphs = article.get("paragraphs", []) if isinstance(article, dict) else None
        if not isinstance(paragraphs, list):
            raise UserError(f"{path}: article {a_i} has no \"paragraphs\" list; not SQuAD JSON")
        for p_i, para in enumerate(paragraphs, 1):
            where = f"{path}: article {a_i}, paragraph {p_i}"
            if not isinstance(para, dict) or not isinstance(para.get("context"), str) or \
                    not isinstance(para.get("qas"), list):
                raise UserError(f"{where}: needs a \"context\" string and a \"qas\" list "
                                f"(SQuAD's layout)")
            if para["qas"] and not para["context"].strip():
                raise UserError(f"{where}: the context is empty; every question needs the "
                                f"text its answer is taken from")
            for qa in para["qas"]:
                e = _question(qa, where, para["context"], training, seen)
                e.title = str(article.get("title", ""))
                v2 = v2 or "is_impossible" in qa
                if training and not e.impossible and not _at_start(e):
                    skipped += 1
                    continue
                out.append(e)
    if not out and skipped:
        raise UserError(f"{path}: no usable question: the answer of each of its {skipped} "
                        f"questions is not at its answer_start in the context (answer_start "
                        f"counts the context's characters from 0); check the offsets")
    if not out:
        raise UserError(f"{path}: no questions")
    return out, skipped, "2.0" if v2 else "1.1"


def _question(qa: Any, where: str, context: str, training: bool,
              seen: dict[str, str]) -> QAExample:
    """One question of a paragraph, checked: an id given once in the file, text fields, an
    answer (training keeps the first) for every answerable question in training."""
    if not isinstance(qa, dict) or not all(isinstance(qa.get(k), str)
                                           for k in ("id", "question")):
        raise UserError(f"{where}: a question without an \"id\" and a \"question\" string")
    if qa["id"] in seen:
        raise UserError(f"{where}: question id {qa['id']!r} is given twice (first in "
                        f"{seen[qa['id']]}); SQuAD names each question by a unique id")
    seen[qa["id"]] = where.rsplit(": ", 1)[-1]
    impossible = bool(qa.get("is_impossible", False))
    try:
        answers = [(a["text"], int(a["answer_start"])) for a in qa.get("answers", [])]
        if not all(isinstance(text, str) for text, _ in answers):
            raise TypeError
    except (KeyError, TypeError, ValueError, OverflowError):
        raise UserError(f"{where}: question {qa['id']} has an answer without a \"text\" "
                        f"string and an integer \"answer_start\"") from None
    if training and not impossible:
        if not answers:
            raise UserError(f"{where}: question {qa['id']} has no answer; a training file "
                            f"needs one for every answerable question (SQuAD 2.0 marks the "
                            f"others is_impossible)")
        answers = answers[:1]  # the original trains on the first answer
    return QAExample(qa["id"], qa["question"], context, answers, impossible)


def _at_start(e: QAExample) -> bool:
    """Whether the (first) answer's text sits at its answer_start in the context."""
    text, start = e.answers[0]
    return start >= 0 and e.context[start : start + len(text)] == text


def split_articles(examples: list[QAExample], fraction: float, seed: int = 0
                   ) -> tuple[list[QAExample], list[QAExample]]:
    """(train, held out): whole articles (by title) in a fixed random order, the first
    ``fraction`` of the articles to train; no article is on both sides."""
    titles = sorted({e.title for e in examples})
    if len(titles) < 2:
        raise UserError(f"article_split={fraction} splits by article, and the file has "
                        f"{len(titles)} (by title); give a file of several articles, or drop "
                        f"article_split")
    rng = np.random.default_rng(seed)
    order = [titles[i] for i in rng.permutation(len(titles))]
    train_titles = set(order[: max(1, round(fraction * len(titles)))])
    return ([e for e in examples if e.title in train_titles],
            [e for e in examples if e.title not in train_titles])


def qa_features(tok: Tokenizer, examples: list[QAExample], max_length: int = 512,
                stride: int = 128, max_query: int = 64, training: bool = False
                ) -> dict[str, Any]:
    """Windows over each context. Tensors input_ids, token_type_ids, attention_mask (padded
    to the longest), and per feature: ``example`` (its question's index), ``offsets``
    (each token's character span in the context, None outside it), and in training
    ``start``/``end`` (the answer's token positions, 0 = [CLS] where the window does not
    hold the whole answer or there is none)."""
    import torch


    tok.no_padding()
    tok.no_truncation()
    questions = []
    for e in examples:  # the question cut to max_query tokens, at a token's end
        enc = tok.encode(e.question, add_special_tokens=False)
        cut = e.question if len(enc.ids) <= max_query else e.question[
            : enc.offsets[max_query - 1][1]]
        questions.append(cut)
    q_len = max(len(tok.encode(q, add_special_tokens=False).ids) for q in questions)
    if max_length - q_len - 3 <= stride:
        raise UserError(f"max_length={max_length} leaves {max_length - q_len - 3} context "
                        f"tokens per window after a {q_len}-token question, not more than the "
                        f"stride {stride}; raise max_length or lower doc_stride")
    tok.enable_truncation(max_length, stride=stride, strategy="only_second")
    ids, types, example, offsets, starts, ends = [], [], [], [], [], []
    for i, e in enumerate(examples):
        first = tok.encode(questions[i], e.context)
        for w in [first, *first.overflowing]:
            seq = w.sequence_ids
            offs = [o if s == 1 else None for o, s in zip(w.offsets, seq, strict=True)]
            ids.append(w.ids)
            types.append(w.type_ids)
            example.append(i)
            offsets.append(offs)
            if training:
                s, t = _answer_tokens(e, offs)
                starts.append(s)
                ends.append(t)
    pad = tok.token_to_id(special_names(tok)["pad"])
    T = max(map(len, ids))
    out = {"input_ids": torch.tensor([r + [pad] * (T - len(r)) for r in ids]),
           "token_type_ids": torch.tensor([r + [0] * (T - len(r)) for r in types]),
           "attention_mask": torch.tensor([[1] * len(r) + [0] * (T - len(r)) for r in ids]),
           "example": example, "offsets": offsets}
    if training:
        out["start"], out["end"] = torch.tensor(starts), torch.tensor(ends)
    return out


def _answer_tokens(e: QAExample, offsets: list[tuple[int, int] | None]) -> tuple[int, int]:
    """The first answer's (start, end) token positions in a window, or (0, 0)."""
    if e.impossible or not e.answers:
        return 0, 0
    text, a = e.answers[0]
    b = a + len(text)
    inside = [i for i, o in enumerate(offsets) if o is not None]
    if not inside or offsets[inside[0]][0] > a or offsets[inside[-1]][1] < b:
        return 0, 0  # the window does not hold the whole answer
    start = next(i for i in inside if offsets[i][1] > a)
    end = next(i for i in reversed(inside) if offsets[i][0] < b)
    return start, end


def best_answers(start_logits: np.ndarray, end_logits: np.ndarray, features: dict[str, Any],
                 examples: list[QAExample], n_best: int = 20, max_answer: int = 30
                 ) -> tuple[dict[str, str], dict[str, float]]:
    """Each question's best span over its windows (its context's characters, through the
    offsets), and the no-answer score: min over windows of ([CLS] start + end logits) minus
    the best span's score (> threshold: answer nothing, SQuAD 2.0)."""
    by_example: dict[int, list[int]] = collections.defaultdict(list)
    for f, i in enumerate(features["example"]):
        by_example[i].append(f)
    answers, null_minus_best = {}, {}
    for i, e in enumerate(examples):
        best, best_score, null = "", -np.inf, np.inf
        for f in by_example[i]:
            s, t, offs = start_logits[f], end_logits[f], features["offsets"][f]
            null = min(null, float(s[0] + t[0]))
            top_s = np.argsort(s[: len(offs)])[::-1][:n_best]
            top_t = np.argsort(t[: len(offs)])[::-1][:n_best]
            for a in top_s:
                for b in top_t:
                    if offs[a] is None or offs[b] is None or b < a or b - a + 1 > max_answer:
                        continue
                    score = float(s[a] + t[b])
                    if score > best_score:
                        best_score = score
                        best = e.context[offs[a][0] : offs[b][1]]
        answers[e.qid] = best
        null_minus_best[e.qid] = null - best_score if np.isfinite(best_score) else np.inf
    return answers, null_minus_best


# -- the official evaluation (v1.1 and v2.0 scripts' rules) ------------------------------


def normalize_answer(s: str) -> str:
    """Lower case, no punctuation, no articles (a, an, the), single spaces."""
    s = "".join(ch for ch in s.lower() if ch not in set(string.punctuation))
    s = re.sub(r"\b(a|an|the)\b", " ", s)
    return " ".join(s.split())


def exact_score(gold: str, pred: str) -> float:
    return float(normalize_answer(gold) == normalize_answer(pred))


def f1_score(gold: str, pred: str) -> float:
    g, p = normalize_answer(gold).split(), normalize_answer(pred).split()
    if not g or not p:  # a no-answer: right only if both are empty
        return float(g == p)
    common = collections.Counter(g) & collections.Counter(p)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision, recall = same / len(p), same / len(g)
    return 2 * precision * recall / (precision + recall)


def squad_scores(examples: list[QAExample], answers: dict[str, str],
                 null_minus_best: dict[str, float] | None = None,
                 threshold: float = 0.0) -> dict[str, float]:
    """The official scores (x100): exact and f1, each the max over the gold answers (an
    unanswerable question's gold is ""). With ``null_minus_best`` (SQuAD 2.0): the answer is
    "" where it exceeds ``threshold`` (the submitted predictions); HasAns/NoAns splits; and
    the official v2.0 script's best_exact/best_f1 over no-answer thresholds, with them."""
    preds = dict(answers)
    if null_minus_best is not None:
        preds = {q: ("" if null_minus_best[q] > threshold else a) for q, a in answers.items()}
    ex, f1 = {}, {}
    for e in examples:
        golds = [t for t, _ in e.answers if normalize_answer(t)] or [""]
        ex[e.qid] = max(exact_score(g, preds[e.qid]) for g in golds)
        f1[e.qid] = max(f1_score(g, preds[e.qid]) for g in golds)
    n = len(examples)
    out = {"exact": 100 * sum(ex.values()) / n, "f1": 100 * sum(f1.values()) / n,
           "total": n}
    if null_minus_best is None:
        return out
    for name, keep in (("HasAns", lambda e: not e.impossible), ("NoAns", lambda e: e.impossible)):
        part = [e.qid for e in examples if keep(e)]
        if part:
            out[f"{name}_exact"] = 100 * sum(ex[q] for q in part) / len(part)
            out[f"{name}_f1"] = 100 * sum(f1[q] for q in part) / len(part)
            out[f"{name}_total"] = len(part)
    has = {e.qid: not e.impossible for e in examples}
    for name, scores in (("exact", ex), ("f1", f1)):
        best, at = _best_threshold(preds, scores, null_minus_best, has)
        out[f"best_{name}"], out[f"best_{name}_thresh"] = best, at
    return out


def _best_threshold(preds: dict[str, str], scores: dict[str, float],
                    null_minus_best: dict[str, float],
                    has_answer: dict[str, bool]) -> tuple[float, float]:
    """The official find_best_thresh: start from answering nothing (every unanswerable
    question right), then answer in order of increasing no-answer score, keeping the best."""
    current = best = sum(1 for q in scores if not has_answer[q])
    best_at = 0.0
    for q in sorted(null_minus_best, key=lambda q: null_minus_best[q]):
        if q not in scores:
            continue
        current += scores[q] if has_answer[q] else (-1 if preds[q] else 0)
        if current > best:
            best, best_at = current, null_minus_best[q]
    return 100.0 * best / len(scores), best_at
