"""Token tagging data (NER, POS): CoNLL-U, CoNLL and JSONL files, encoding, metrics.

    .conllu   Universal Dependencies: ten tab-separated columns; the tag is UPOS (or XPOS,
              --tag-column xpos); multiword-token lines (3-4) and empty nodes (8.1) are not
              words; comments (#) are skipped
    .jsonl    one sentence per line: {"tokens": [...], "tags": [...]}
    other     CoNLL: a word per line, its columns separated by tabs or spaces, the tag in the
              last column (or --tag-column N, counted from 1); sentences end at a blank line
              or a line of whitespace alone (WNUT-17's train has lone tabs); -DOCSTART-
              lines are skipped

Each word's label sits on its first piece (the others, the special tokens and padding get
-100, which the loss ignores); a word cut off by ``max_length`` is predicted as ``O`` (or
the first tag, where there is no ``O``). Tags of the BIO or BIOES schemes are scored by entity
(precision, recall, F1, with ``seqeval``; BIOES strictly), any other tag set by word accuracy.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from electra.data.labels import Spellings
from electra.data.tokenizer import special_names
from electra.errors import UserError
from electra.io.files import jsonl, read_text

if TYPE_CHECKING:
    from tokenizers import Tokenizer  # (the types only: the readers stay light)

IGNORE = -100
_BIO = re.compile(r"^(O|[BIES]-.+)$")
UD_COLUMNS = {"upos": 3, "xpos": 4}


@dataclass
class Sentence:
    words: list[str]
    tags: list[str] | None  # None: unlabelled


def read_tagged(path: str | Path, tag_column: str | None = None) -> list[Sentence]:
    """The sentences of a CoNLL-U, CoNLL or JSONL file (format by extension).

    Raises:
        UserError: a missing or empty file, a line with the wrong number of columns (naming
            it), tokens and tags of different lengths, a tag column the file does not have.
    """
    path = Path(path)
    if path.suffix.lower() in (".csv", ".tsv", ".tab", ".json", ".parquet"):
        raise UserError(f"{path}: tagging reads CoNLL-U (.conllu), CoNLL (a word and its tag "
                        f"per line, a blank line between sentences) or JSONL (.jsonl, "
                        f"{{\"tokens\": [...], \"tags\": [...]}} a line); convert the file to "
                        f"one of these")
    text = read_text(path)
    if path.suffix == ".jsonl":
        sentences = _jsonl(path, text)
    elif path.suffix == ".conllu":
        sentences = _conllu(path, text, tag_column or "upos")
    else:
        sentences = _conll(path, text, tag_column)
    if not sentences:
        raise UserError(f"{path}: no sentences")
    return sentences


def _jsonl(path: Path, text: str) -> list[Sentence]:
    out, spellings = [], Spellings()
    for n, r in jsonl(path, text.splitlines()):
        words, tags = (r.get("tokens"), r.get("tags")) if isinstance(r, dict) else (None, None)
        if not isinstance(words, list) or not words or not all(isinstance(w, str)
                                                               for w in words):
            raise UserError(f'{path}:{n}: expected {{"tokens": [words], "tags": [tags]}}')
        if tags is not None and len(tags) != len(words):
            raise UserError(f"{path}:{n}: {len(words)} tokens but {len(tags)} tags")
        if tags is not None and any(not isinstance(t, str | int) or str(t).strip() != str(t)
                                    or not str(t) for t in tags):
            raise UserError(f"{path}:{n}: a tag is empty, not a string, or has spaces around "
                            f"it ({tags!r}); give one tag per token, e.g. \"B-PER\"")
        out.append(Sentence(words, None if tags is None else [
            spellings.read(t, f"{path}:{n}", "tag") for t in tags]))
    spellings.note(path, "tags")
    return out


def _conllu(path: Path, text: str, tag_column: str) -> list[Sentence]:
    if tag_column not in UD_COLUMNS:
        raise UserError(f"--tag-column {tag_column}: a CoNLL-U file has the tag columns "
                        f"{', '.join(UD_COLUMNS)}")
    col = UD_COLUMNS[tag_column]
    read = _Sentences(path)
    for n, line in enumerate(text.splitlines(), 1):
        if line.startswith("#"):
            continue
        if not line.strip():
            read.end()
            continue
        fields = line.split("\t")
        if len(fields) != 10:
            raise UserError(f"{path}:{n}: {len(fields)} tab-separated columns, CoNLL-U has 10")
        if "-" in fields[0] or "." in fields[0]:
            continue  # a multiword token's range, or an empty node: not words
        read.word(fields[1], fields[col], n)
    return read.done()


def _conll(path: Path, text: str, tag_column: str | None) -> list[Sentence]:
    read = _Sentences(path)
    width = None
    for n, line in enumerate(text.splitlines(), 1):
        fields = line.split()
        if not fields:  # a blank line, or one of whitespace alone: the sentence ends
            read.end()
            continue
        if fields[0] == "-DOCSTART-":
            continue
        width = width or len(fields)
        if len(fields) != width or width < 2:
            raise UserError(f"{path}:{n}: {len(fields)} column(s) where the file's first word "
                            f"line has {width}; a CoNLL line is a word and its tag (tab- or "
                            f"space-separated)")
        read.word(fields[0], fields[_column(tag_column, width, path)], n)
    return read.done()


class _Sentences:
    """The sentences of a CoNLL or CoNLL-U file as its lines are read: a word and its tag
    at a time, a sentence at each blank line; the tags' spellings noted at the end."""

    def __init__(self, path: Path) -> None:
        self.path, self.spellings = path, Spellings()
        self.out: list[Sentence] = []
        self.words: list[str] = []
        self.tags: list[str] = []

    def word(self, word: str, tag: str, n: int) -> None:
        self.words.append(word)
        self.tags.append(self.spellings.read(tag, f"{self.path}:{n}", "tag"))

    def end(self) -> None:
        if self.words:
            self.out.append(Sentence(self.words, self.tags))
        self.words, self.tags = [], []

    def done(self) -> list[Sentence]:
        self.end()
        self.spellings.note(self.path, "tags")
        return self.out


def _column(tag_column: str | None, width: int, path: Path) -> int:
    if tag_column is None:
        return width - 1
    if not tag_column.isdigit() or not 2 <= int(tag_column) <= width:
        raise UserError(f"--tag-column {tag_column}: {path} has {width} columns; give a column "
                        f"number from 2 to {width} (the tag's, counted from 1)")
    return int(tag_column) - 1


def tag_map(train: list[Sentence], dev: list[Sentence] | None = None) -> dict[str, int]:
    """Tags -> ids (sorted); dev tags unseen in training are refused, naming them."""
    tags = sorted({t for s in train for t in s.tags or []})
    if dev is not None:
        unseen = sorted({t for s in dev for t in s.tags or []} - set(tags))
        if unseen:
            raise UserError(f"dev tags {', '.join(map(repr, unseen[:5]))} never occur in the "
                            f"training file (its tags: {', '.join(map(repr, tags[:20]))}); "
                            f"a tagger cannot predict them")
    if len(tags) < 2:
        raise UserError(f"the training file has {len(tags)} distinct tag(s); a tagger needs at "
                        f"least two")
    return {t: i for i, t in enumerate(tags)}


def is_entity_scheme(tags: list[str] | dict[str, int]) -> bool:
    """BIO/BIOES tags (O, B-X, I-X, E-X, S-X) with at least one B- or S-."""
    return all(_BIO.match(t) for t in tags) and any(t[:2] in ("B-", "S-") for t in tags)


def tagging_metrics(tags: list[str] | dict[str, int]) -> tuple[str, ...]:
    return ("f1", "precision", "recall", "accuracy") if is_entity_scheme(tags) else (
        "accuracy",)


def encode_tagged(tok: Tokenizer, sentences: list[Sentence], max_length: int,
                  labels: dict[str, int]) -> dict[str, Any]:
    """Tokenize each sentence's words ([CLS] pieces [SEP]), truncate, pad to the longest.
    ``labels`` (B, T): the word's tag id on its first piece, -100 elsewhere; ``first``
    (B, W): where each word's first piece is (-1: cut off by max_length)."""
    import torch


    tok.enable_truncation(max_length)
    pad = special_names(tok)["pad"]
    tok.enable_padding(pad_id=tok.token_to_id(pad), pad_token=pad)
    encs = tok.encode_batch([s.words for s in sentences], is_pretokenized=True)
    W = max(len(s.words) for s in sentences)
    first = torch.full((len(sentences), W), -1, dtype=torch.long)
    for r, e in enumerate(encs):
        seen = set()
        for i, w in enumerate(e.word_ids):
            if w is not None and w not in seen:
                seen.add(w)
                first[r, w] = i
    out = {"input_ids": torch.tensor([e.ids for e in encs]),
           "token_type_ids": torch.tensor([e.type_ids for e in encs]),
           "attention_mask": torch.tensor([e.attention_mask for e in encs]), "first": first}
    if all(s.tags is not None for s in sentences):
        lab = torch.full_like(out["input_ids"], IGNORE)
        for r, s in enumerate(sentences):
            for w, tag in enumerate(s.tags or []):
                if first[r, w] >= 0:
                    lab[r, first[r, w]] = labels[tag]
        out["labels"] = lab
    return out


def word_predictions(logits: Any, first: Any, lengths: list[int], fallback: int) -> list[list[int]]:
    """Each sentence's tag id per word, read at its first piece (``fallback`` for a word cut
    off by max_length)."""
    pred = logits.argmax(-1)  # (B, T)
    out = []
    for r, n in enumerate(lengths):
        at = first[r, :n]
        ids = pred[r].gather(0, at.clamp(min=0))
        out.append(ids.masked_fill(at < 0, fallback).tolist())
    return out


def score(names: tuple[str, ...], pred: list[list[str]], gold: list[list[str]]
          ) -> dict[str, float]:
    """Entity precision/recall/F1 (seqeval: conlleval's rules for BIO, strict for BIOES)
    and word accuracy, as named."""
    from seqeval.metrics import accuracy_score, f1_score, precision_score, recall_score
    from seqeval.scheme import IOBES

    bioes = any(t[:2] in ("E-", "S-") for s in gold for t in s)
    kw: dict[str, Any] = {"mode": "strict", "scheme": IOBES} if bioes else {}
    fns = {"f1": lambda: f1_score(gold, pred, zero_division=0, **kw),
           "precision": lambda: precision_score(gold, pred, zero_division=0, **kw),
           "recall": lambda: recall_score(gold, pred, zero_division=0, **kw),
           "accuracy": lambda: accuracy_score(gold, pred)}
    return {n: float(fns[n]()) for n in names}
