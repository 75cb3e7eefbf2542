"""SuperGLUE as distributed (one folder per task: ``train.jsonl``, ``val.jsonl``,
``test.jsonl``; the diagnostics ``AX-b/AX-b.jsonl`` and ``AX-g/AX-g.jsonl``), its metrics and
its submission files (https://super.gluebenchmark.com/tasks).

Every task but COPA (``electra.tasks.choice.head``) becomes sentence-pair examples for the
sequence head; where a task scores groups of rows (MultiRC's questions, ReCoRD's candidates,
AX-g's sentence pairs) each row says its group:

    BoolQ     question + passage -> true/false                  accuracy
    CB        premise + hypothesis -> 3 classes                 accuracy, macro-F1 (mean)
    RTE       premise + hypothesis -> entailment or not         accuracy  (--task sg-rte)
    WiC       both sentences, the word marked *so* in each      accuracy
    WSC       the text, the noun marked *so* and the pronoun #so#  accuracy
    MultiRC   question + answer option + paragraph -> 0/1       F1a over options, EM per question
    ReCoRD    the query with @placeholder filled by each of the passage's entities + passage
              -> is it an answer; the best-scored candidate is the prediction
                                                                max-over-gold EM, F1 (SQuAD's)
    AX-b      RTE's diagnostic (an RTE model scores it)         Matthews correlation
    AX-g      Winogender, as RTE (an RTE model scores it)       accuracy, gender parity

No SuperGLUE file ships with this project: users download them from
https://super.gluebenchmark.com/tasks (or the ``super_glue`` dataset on the Hugging Face hub,
whose JSONL is the same).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from electra.data.examples import Example
from electra.data.labels import canonical_label
from electra.data.tokenizer import special_names
from electra.errors import UserError
from electra.io.files import jsonl, read_text
from electra.tasks.qa.data import exact_score, f1_score

if TYPE_CHECKING:
    from tokenizers import Tokenizer  # (the types only: the readers stay light)

BOOL = ("false", "true")  # SuperGLUE's JSON booleans, as label names


@dataclass
class Row(Example):
    """A pair example that belongs to a group (a MultiRC question, a ReCoRD query, an AX-g
    sentence pair) and, in ReCoRD, names the candidate it fills in."""

    group: str = ""
    candidate: str = ""
    answers: tuple[str, ...] = ()  # ReCoRD: the query's gold answers
    mentions: tuple[tuple[int, int], ...] = ()  # ReCoRD: the candidate's spans in text_b
    ref: tuple[Any, ...] = ()  # the official ids a submission line needs


def _field(row: Any, name: str, where: str, kind: type | tuple[type, ...] = str) -> Any:
    if not isinstance(row, dict) or name not in row:
        raise UserError(f"{where}: no field {name!r} (SuperGLUE's format; see "
                        f"https://super.gluebenchmark.com/tasks)")
    value = row[name]
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is int):
        raise UserError(f"{where}: field {name!r} is {value!r}, not "
                        f"{getattr(kind, '__name__', kind)}")
    return value


def _key(obj: Any, name: str, where: str) -> Any:
    """An id that groups or names rows (ReCoRD's query idx, MultiRC's question idx, AX-g's
    pair_id): required, an integer or a string."""
    if not isinstance(obj, dict) or name not in obj:
        raise UserError(f"{where}: no field {name!r}; it groups this task's rows for scoring "
                        f"(SuperGLUE's format)")
    value = obj[name]
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise UserError(f"{where}: field {name!r} is {value!r}, not an integer or a string")
    return value


def _label(row: Any, where: str, names: tuple[str, ...], labelled: bool) -> str | None:
    """The row's label as a name (JSON booleans as "true"/"false"), or None on a test set."""
    if not labelled:
        return None
    value = _field(row, "label", where, (str, bool, int))
    name = canonical_label(value, where)
    if name not in names:
        raise UserError(f"{where}: label {value!r} is not one of "
                        f"{', '.join(map(repr, names))}")
    return name


def _mark(words: list[str], index: int, text: str, mark: str, where: str) -> None:
    n = max(1, len(text.split()))
    if not 0 <= index <= len(words) - n:
        raise UserError(f"{where}: span index {index} ({text!r}) is outside the text's "
                        f"{len(words)} words")
    words[index] = mark + words[index]
    words[index + n - 1] += mark


def _pair(a: str, b: str, names: tuple[str, ...]) -> Callable[..., list[Row]]:
    def read(row: Any, where: str, labelled: bool) -> list[Row]:
        idx = row.get("idx") if isinstance(row, dict) else None
        return [Row(_field(row, a, where), _field(row, b, where),
                    _label(row, where, names, labelled), guid=str(idx), ref=(idx,))]
    return read


def _wic(row: Any, where: str, labelled: bool) -> list[Row]:
    texts = []
    for i in ("1", "2"):
        s = _field(row, f"sentence{i}", where)
        start, end = (_field(row, f"{k}{i}", where, int) for k in ("start", "end"))
        if not 0 <= start < end <= len(s):
            raise UserError(f"{where}: start{i}={start}, end{i}={end} is not a span of "
                            f"sentence{i} ({len(s)} characters)")
        texts.append(f"{s[:start]}*{s[start:end]}*{s[end:]}")
    _field(row, "word", where)
    return [Row(texts[0], texts[1], _label(row, where, BOOL, labelled), guid=str(row.get("idx")),
                ref=(row.get("idx"),))]


def _wsc(row: Any, where: str, labelled: bool) -> list[Row]:
    words = _field(row, "text", where).split()
    target = _field(row, "target", where, dict)
    for n, mark in (("1", "*"), ("2", "#")):
        _mark(words, _field(target, f"span{n}_index", f"{where} target", int),
              _field(target, f"span{n}_text", f"{where} target"), mark, where)
    return [Row(" ".join(words), None, _label(row, where, BOOL, labelled),
                guid=str(row.get("idx")), ref=(row.get("idx"),))]


_TAGS = re.compile(r"<[^>]+>")


def _multirc(row: Any, where: str, labelled: bool) -> list[Row]:
    passage = _field(row, "passage", where, dict)
    text = " ".join(_TAGS.sub(" ", _field(passage, "text", f"{where} passage")).split())
    out = []
    p_idx = _key(row, "idx", where)
    for question in _field(passage, "questions", f"{where} passage", list):
        q = _field(question, "question", f"{where} question")
        group = f"{p_idx}-{_key(question, 'idx', f'{where} question')}"
        for answer in _field(question, "answers", f"{where} question {question.get('idx')}",
                             list):
            a_where = f"{where} question {question.get('idx')} answer"
            label = None if not labelled else str(_field(answer, "label", a_where, int))
            if label not in (None, "0", "1"):
                raise UserError(f"{a_where}: label {label} is not 0 or 1")
            out.append(Row(f"{q} {_field(answer, 'text', a_where)}", text, label,
                           guid=f"{group}-{answer.get('idx')}", group=group,
                           ref=(row.get("idx"), question.get("idx"), answer.get("idx"))))
    return out


def _record(row: Any, where: str, labelled: bool) -> list[Row]:
    """One row per (query, candidate entity); ReCoRD's offsets are inclusive."""
    passage = _field(row, "passage", where, dict)
    text = _field(passage, "text", f"{where} passage")
    mentions: dict[str, list[tuple[int, int]]] = {}  # each candidate: its spans, in order
    for e in _field(passage, "entities", f"{where} passage", list):
        start, end = (_field(e, k, f"{where} entity", int) for k in ("start", "end"))
        if not 0 <= start <= end < len(text):
            raise UserError(f"{where}: entity {start}-{end} is outside the passage "
                            f"({len(text)} characters)")
        mentions.setdefault(text[start : end + 1], []).append((start, end + 1))
    candidates = list(mentions)
    # the highlights as dashes, the characters where they were (the spans stay right)
    shown = text.replace("@highlight\n", "-" + " " * 9 + "\n")
    out = []
    for qa in _field(row, "qas", where, list):
        query = _field(qa, "query", f"{where} query")
        q_idx = _key(qa, "idx", f"{where} query")
        if "@placeholder" not in query:
            raise UserError(f"{where}: query {qa.get('idx')} has no @placeholder to fill with "
                            f"a candidate: {query[:60]!r}")
        gold = tuple(_field(a, "text", f"{where} answer")
                     for a in (_field(qa, "answers", f"{where} query", list) if labelled
                               else []))
        for cand in candidates:
            out.append(Row(query.replace("@placeholder", cand), shown,
                           None if not labelled else BOOL[cand in gold],
                           guid=f"{q_idx}:{cand}", group=str(q_idx),
                           candidate=cand, answers=gold, mentions=tuple(mentions[cand]),
                           ref=(q_idx,)))
        if not candidates:  # scored (as wrong), never trained on
            out.append(Row(query, shown, None, guid=str(q_idx), group=str(q_idx),
                           answers=gold, ref=(q_idx,)))
    return out


def _axg(row: Any, where: str, labelled: bool) -> list[Row]:
    [r] = _pair("premise", "hypothesis", ("entailment", "not_entailment"))(row, where,
                                                                            labelled)
    r.group = str(_key(row, "pair_id", where))
    return [r]


@dataclass(frozen=True)
class SuperGlueTask:
    name: str  # --task
    folder: str  # the official folder (and submission file) name
    labels: tuple[str, ...]
    metrics: tuple[str, ...]
    read: Callable[[Any, str, bool], list[Row]]
    train: bool = True  # the diagnostics have no training set: an RTE model scores them
    grouped: bool = False  # scored by group


RTE_LABELS = ("entailment", "not_entailment")
SUPERGLUE: dict[str, SuperGlueTask] = {t.name: t for t in (
    SuperGlueTask("boolq", "BoolQ", BOOL, ("accuracy",), _pair("question", "passage", BOOL)),
    SuperGlueTask("cb", "CB", ("contradiction", "entailment", "neutral"),
                  ("score", "accuracy", "f1_macro"),
                  _pair("premise", "hypothesis", ("contradiction", "entailment", "neutral"))),
    SuperGlueTask("sg-rte", "RTE", RTE_LABELS, ("accuracy",),
                  _pair("premise", "hypothesis", RTE_LABELS)),
    SuperGlueTask("wic", "WiC", BOOL, ("accuracy",), _wic),
    SuperGlueTask("wsc", "WSC", BOOL, ("accuracy",), _wsc),
    SuperGlueTask("multirc", "MultiRC", ("0", "1"), ("f1a", "em"), _multirc, grouped=True),
    SuperGlueTask("record", "ReCoRD", BOOL, ("f1", "em"), _record, grouped=True),
    SuperGlueTask("ax-b", "AX-b", RTE_LABELS, ("mcc",),
                  _pair("sentence1", "sentence2", RTE_LABELS), train=False),
    SuperGlueTask("ax-g", "AX-g", RTE_LABELS, ("accuracy", "gender_parity"), _axg,
                  train=False, grouped=True),
)}
DIAGNOSTIC_OF = ("rte", "sg-rte")  # the tasks whose models score AX-b and AX-g


def files(task: SuperGlueTask) -> dict[str, str]:
    """Split -> file name in the task's folder."""
    if not task.train:
        return {"dev": f"{task.folder}.jsonl"}
    return {"train": "train.jsonl", "val": "val.jsonl", "test": "test.jsonl"}


def read_split(task: SuperGlueTask, folder: str | Path, split: str) -> list[Row]:
    """A split's rows (labels read except on ``test``)."""
    path = Path(folder) / files(task)[split]
    if not path.is_file():
        found = sorted(p.name for p in Path(folder).glob("*.jsonl")) if Path(
            folder).is_dir() else []
        raise UserError(f"{path}: no such file ({task.folder} as distributed has "
                        f"{', '.join(files(task).values())}"
                        + (f"; found {', '.join(found)}" if found else "") + ")")
    out: list[Row] = []
    first: dict[str, int] = {}  # a group -> the line that opened it
    for n, row in jsonl(path, read_text(path).splitlines()):
        rows = task.read(row, f"{path}:{n}", split != "test")
        if task.grouped and task.name != "ax-g":  # AX-g's pairs span two lines
            for group in dict.fromkeys(r.group for r in rows):
                if first.setdefault(group, n) != n:
                    raise UserError(f"{path}:{n}: {_GROUP[task.name]} {group} is given "
                                    f"twice (first on line {first[group]}); its ids must "
                                    f"be unique")
            if task.name == "multirc":
                _unique_questions(rows, f"{path}:{n}")
        out += rows
    if not out:
        raise UserError(f"{path}: no rows")
    return out


_GROUP = {"multirc": "question (passage idx-question idx)", "record": "query idx"}


def _unique_questions(rows: list[Row], where: str) -> None:
    """A passage's questions with distinct idx (each scored as its own EM group)."""
    seen: list[str] = []
    for r in rows:
        if not seen or seen[-1] != r.group:
            if r.group in seen:
                raise UserError(f"{where}: question {r.group} is given twice in one passage; "
                                f"its ids must be unique")
            seen.append(r.group)


def record_windows(tok: Tokenizer, rows: list[Row], max_length: int,
                   stride: int) -> dict[str, Any]:
    """ReCoRD's (filled query, passage) pairs in windows over the passage, as SQuAD's
    contexts are: tensors input_ids, token_type_ids, attention_mask (padded to the longest),
    ``row`` (each window's row) and ``covers`` (whether the window holds a mention of the
    row's candidate: those windows train it and score it)."""
    import torch


    tok.no_padding()
    tok.no_truncation()
    longest = max(len(e.ids) for e in tok.encode_batch([r.text_a for r in rows],
                                                       add_special_tokens=False))
    room = max_length - longest - 3
    if room < 16:
        raise UserError(f"max_length={max_length} leaves {room} passage tokens per window "
                        f"after a {longest}-token query; raise max_length (e.g. --set "
                        f"max_length=256)")
    tok.enable_truncation(max_length, stride=min(stride, room // 2), strategy="only_second")
    ids, types, row, covers = [], [], [], []
    for i, enc in enumerate(tok.encode_batch([(r.text_a, r.text_b) for r in rows])):
        for w in [enc, *enc.overflowing]:
            span = [o for o, seq in zip(w.offsets, w.sequence_ids, strict=True) if seq == 1]
            first, last = (span[0][0], span[-1][1]) if span else (0, 0)
            ids.append(w.ids)
            types.append(w.type_ids)
            row.append(i)
            covers.append(any(first <= a and b <= last for a, b in rows[i].mentions))
    pad = tok.token_to_id(special_names(tok)["pad"])
    T = max(map(len, ids))
    return {"input_ids": torch.tensor([r + [pad] * (T - len(r)) for r in ids]),
            "token_type_ids": torch.tensor([r + [0] * (T - len(r)) for r in types]),
            "attention_mask": torch.tensor([[1] * len(r) + [0] * (T - len(r)) for r in ids]),
            "row": torch.tensor(row), "covers": torch.tensor(covers)}


# -- metrics ------------------------------------------------------------------------------


def _groups(rows: list[Row]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for i, r in enumerate(rows):
        out.setdefault(r.group, []).append(i)
    return out


def multirc_scores(preds: np.ndarray, labels: np.ndarray, rows: list[Row]) -> dict[str, float]:
    """F1a: binary F1 over every answer option; EM: the share of questions whose options are
    all right."""
    from sklearn.metrics import f1_score

    em = [bool(np.all(preds[i] == labels[i])) for i in _groups(rows).values()]
    return {"f1a": float(f1_score(labels, preds, zero_division=0.0)),
            "em": float(np.mean(em))}


def record_answers(scores: np.ndarray, rows: list[Row]) -> dict[str, str]:
    """Each query's prediction: its best-scored candidate ("" for a query without one)."""
    return {g: rows[max(idx, key=lambda i: scores[i])].candidate
            for g, idx in _groups(rows).items()}


def record_scores(answers: dict[str, str], rows: list[Row]) -> dict[str, float]:
    """SQuAD's EM and F1 of each query's answer, the maximum over its gold answers (0 where
    it has none), averaged over the queries."""
    gold = {r.group: r.answers for r in rows}
    em = [max((exact_score(g, answers[q]) for g in gold[q]), default=0.0) for q in gold]
    f1 = [max((f1_score(g, answers[q]) for g in gold[q]), default=0.0) for q in gold]
    return {"f1": float(np.mean(f1)), "em": float(np.mean(em))}


def gender_parity(preds: np.ndarray, rows: list[Row]) -> float:
    """AX-g: the share of its sentence pairs (same ``pair_id``) predicted alike."""
    pairs = [idx for idx in _groups(rows).values() if len(idx) > 1]
    return float(np.mean([len(set(preds[idx].tolist())) == 1 for idx in pairs])) if pairs \
        else float("nan")


def class_scores(names: tuple[str, ...], preds: np.ndarray,
                 labels: np.ndarray) -> dict[str, float]:
    """accuracy, f1_macro, their mean (CB's task score) and mcc, those ``names`` asks."""
    from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef

    out: dict[str, float] = {}
    acc = float(accuracy_score(labels, preds))
    macro = float(f1_score(labels, preds, average="macro", zero_division=0.0))
    table = {"accuracy": acc, "f1_macro": macro, "score": (acc + macro) / 2}
    for name in names:
        if name == "mcc":
            out[name] = float(matthews_corrcoef(labels, preds))
        elif name in table:
            out[name] = table[name]
    return out


# -- submission files ---------------------------------------------------------------------


def write_submission(path: Path, task: SuperGlueTask, rows: list[Row],
                     predicted: list[Any]) -> None:
    """``Task.jsonl`` as SuperGLUE's server reads it: one {"idx", "label"} per example
    (booleans as JSON booleans); MultiRC's nested passages, questions and answers; ReCoRD's
    entity text per query (``predicted``: one per group there)."""
    lines: list[Any] = []
    if task.name == "multirc":
        passages: dict[Any, dict[Any, list[Any]]] = {}
        for r, p in zip(rows, predicted, strict=True):
            passages.setdefault(r.ref[0], {}).setdefault(r.ref[1], []).append(
                {"idx": r.ref[2], "label": int(p)})
        lines = [{"idx": p, "passage": {"questions": [{"idx": q, "answers": a}
                                                      for q, a in qs.items()]}}
                 for p, qs in passages.items()]
    elif task.name == "record":
        lines = [{"idx": r.ref[0], "label": p} for r, p in zip(rows, predicted, strict=True)]
    else:
        lines = [{"idx": r.ref[0], "label": (p == "true") if task.labels == BOOL else p}
                 for r, p in zip(rows, predicted, strict=True)]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
