"""Multiple-choice examples: SuperGLUE's COPA as distributed, and any N-choice JSONL file.

    COPA      {"premise", "choice1", "choice2", "question": "cause"|"effect", "label": 0|1,
               "idx"}: the premise and its question ("What was the cause?", "What happened
               as a result?") paired with each choice
    choice    {"context", "choices": [...], "label": index, "idx" (optional)}: SWAG- or
              HellaSwag-style files; every row of a file has the same number of choices

Each choice is encoded as ``[CLS] context [SEP] choice [SEP]``: (examples, choices, T).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from electra.data.tokenizer import special_names
from electra.errors import UserError
from electra.io.files import jsonl, read_text

if TYPE_CHECKING:
    from tokenizers import Tokenizer  # (the types only: the readers stay light)

QUESTIONS = {"cause": "What was the cause?", "effect": "What happened as a result?"}


@dataclass
class ChoiceExample:
    context: str
    choices: list[str]
    label: int | None  # the right choice's index; None on a test set
    idx: Any = None


def _need(row: Any, name: str, where: str) -> Any:
    if not isinstance(row, dict) or row.get(name) is None:
        raise UserError(f"{where}: no field {name!r}")
    return row[name]


def _text(row: Any, name: str, where: str) -> str:
    value = _need(row, name, where)
    if not isinstance(value, str):
        raise UserError(f"{where}: field {name!r} is {str(value)[:40]!r}, not text")
    return value


def _copa(row: Any, where: str, labelled: bool) -> ChoiceExample:
    question = _need(row, "question", where)
    if not isinstance(question, str) or question not in QUESTIONS:
        raise UserError(f"{where}: question {str(question)[:40]!r} is not 'cause' or "
                        f"'effect'")
    choices = [_text(row, f"choice{i}", f"{where} (COPA has choice1 and choice2)")
               for i in (1, 2)]
    return ChoiceExample(f"{_text(row, 'premise', where)} {QUESTIONS[question]}", choices,
                         _index(row, where, 2) if labelled else None, row.get("idx"))


def _generic(row: Any, where: str, labelled: bool) -> ChoiceExample:
    choices = _need(row, "choices", where)
    if not isinstance(choices, list) or len(choices) < 2 or any(
            not isinstance(c, str) or not c.strip() for c in choices):
        raise UserError(f"{where}: 'choices' must be a list of at least two texts, got "
                        f"{str(choices)[:60]}")
    return ChoiceExample(_text(row, "context", where), choices,
                         _index(row, where, len(choices)) if labelled and "label" in row
                         else None, row.get("idx"))


def _index(row: Any, where: str, n: int) -> int:
    label = _need(row, "label", where)
    if isinstance(label, bool) or not isinstance(label, int) or not 0 <= label < n:
        raise UserError(f"{where}: label {label!r} is not a choice index (0 to {n - 1})")
    return label


def read_choices(path: str | Path, copa: bool, labelled: bool = True) -> list[ChoiceExample]:
    """Every row of a COPA or generic choice file; a file whose rows have different numbers
    of choices is refused (one shape per batch)."""
    path = Path(path)
    out = [(_copa if copa else _generic)(row, f"{path}:{n}", labelled)
           for n, row in jsonl(path, read_text(path).splitlines())]
    if not out:
        raise UserError(f"{path}: no rows")
    counts = {len(e.choices) for e in out}
    if len(counts) > 1:
        first = len(out[0].choices)
        n = next(i for i, e in enumerate(out) if len(e.choices) != first)
        raise UserError(f"{path}: row {n + 1} has {len(out[n].choices)} choices, row 1 has "
                        f"{first}; every row of a file needs the same number")
    return out


def encode_choices(tok: Tokenizer, examples: list[ChoiceExample],
                   max_length: int) -> dict[str, torch.Tensor]:
    """(examples, choices, T) input_ids, token_type_ids, attention_mask, padded to the
    longest pair; ``labels`` (examples,) when every example has one."""
    tok.enable_truncation(max_length)
    pad = special_names(tok)["pad"]
    tok.enable_padding(pad_id=tok.token_to_id(pad), pad_token=pad)
    C = len(examples[0].choices)
    encs = tok.encode_batch([(e.context, c) for e in examples for c in e.choices])
    out = {k: torch.tensor([getattr(x, attr) for x in encs]).view(len(examples), C, -1)
           for k, attr in (("input_ids", "ids"), ("token_type_ids", "type_ids"),
                           ("attention_mask", "attention_mask"))}
    if all(e.label is not None for e in examples):
        out["labels"] = torch.tensor([e.label for e in examples])
    return out
