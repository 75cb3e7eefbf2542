"""WordPiece tokenizers (the `tokenizers` library) and the special-token ids, in one place."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from electra.errors import UserError

if TYPE_CHECKING:
    from tokenizers import Tokenizer

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")


@dataclass(frozen=True)
class SpecialTokens:
    """Ids of the tokens the objective and the data packing treat specially."""

    pad: int
    unk: int
    cls: int
    sep: int
    mask: int

    @classmethod
    def from_vocab(cls, vocab: Mapping[str, int]) -> SpecialTokens:
        """Look the five special tokens up in ``vocab`` (token -> id).

        Raises:
            UserError: when any of them is missing, naming which.
        """
        missing = [t for t in SPECIAL_TOKENS if t not in vocab]
        if missing:
            raise UserError(
                f"the vocabulary lacks {', '.join(missing)}; ELECTRA needs all of "
                f"{', '.join(SPECIAL_TOKENS)} (train one with `electra tokenizer train`)"
            )
        return cls(pad=vocab["[PAD]"], unk=vocab["[UNK]"], cls=vocab["[CLS]"],
                   sep=vocab["[SEP]"], mask=vocab["[MASK]"])

    def ids(self) -> list[int]:
        return [self.pad, self.unk, self.cls, self.sep, self.mask]

    def to_dict(self) -> dict[str, int]:
        return {"pad": self.pad, "unk": self.unk, "cls": self.cls, "sep": self.sep,
                "mask": self.mask}


def _bert_pipeline(tok, lowercase: bool) -> None:
    """BERT's normalisation, pre-tokenisation, decoder and [CLS] A [SEP] B [SEP] template."""
    from tokenizers import decoders, normalizers, pre_tokenizers, processors

    tok.normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=lowercase,
        lowercase=lowercase)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece(prefix="##")
    vocab = tok.get_vocab()
    if "[CLS]" in vocab and "[SEP]" in vocab:
        tok.post_processor = processors.TemplateProcessing(
            single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
            special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])])


def load_tokenizer(path: str | Path) -> Tokenizer:
    """A tokenizer from a folder, a ``tokenizer.json`` or a WordPiece ``vocab.txt``.

    For a bare ``vocab.txt`` the case is inferred: a vocabulary with no upper-case word is
    treated as uncased (lowercase + strip accents), like bert-base-uncased.

    Raises:
        UserError: a path that holds no tokenizer, or a vocabulary without ELECTRA's
            special tokens.
    """
    from tokenizers import Tokenizer
    from tokenizers.models import WordPiece

    p = Path(path)
    if p.is_dir():
        if (p / "tokenizer.json").is_file():
            p = p / "tokenizer.json"
        elif (p / "vocab.txt").is_file():
            p = p / "vocab.txt"
        else:
            raise UserError(f"--tokenizer {path}: the folder has neither tokenizer.json nor "
                            f"vocab.txt; train one with `electra tokenizer train`")
    if not p.is_file():
        raise UserError(f"--tokenizer {path}: no such file or folder")
    try:
        if p.suffix == ".json":
            tok = Tokenizer.from_file(str(p))
        else:
            vocab = {}
            with open(p, encoding="utf-8") as f:
                for i, line in enumerate(f):
                    token = line.rstrip("\n")
                    if token:
                        vocab.setdefault(token, i)
            if not vocab:
                raise UserError(f"--tokenizer {path}: the vocabulary file is empty")
            tok = Tokenizer(WordPiece(vocab, unk_token="[UNK]", max_input_chars_per_word=100))
            cased = any(any(c.isupper() for c in t) for t in vocab if not t.startswith("["))
            _bert_pipeline(tok, lowercase=not cased)
    except UserError:
        raise
    except Exception as err:  # tokenizers raises plain Exceptions on malformed files
        raise UserError(f"--tokenizer {path}: not a tokenizer file ({err})") from None
    SpecialTokens.from_vocab(tok.get_vocab())
    return tok


def tokenizer_checksum(tok: Tokenizer) -> str:
    """sha256 of the tokenizer's canonical JSON: equal iff it tokenizes the same way."""
    canon = json.dumps(json.loads(tok.to_str()), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canon.encode()).hexdigest()


def save_tokenizer(tok: Tokenizer, out: Path) -> None:
    """Write ``tokenizer.json`` and ``vocab.txt`` (ids in order) into folder ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    tok.save(str(out / "tokenizer.json"))
    by_id = sorted(tok.get_vocab().items(), key=lambda kv: kv[1])
    (out / "vocab.txt").write_text("".join(t + "\n" for t, _ in by_id), encoding="utf-8")


def train_tokenizer(inputs: list[str], vocab_size: int, out: str | Path,
                    lowercase: bool = True, overwrite: bool = False,
                    min_frequency: int = 2) -> Tokenizer:
    """Train BERT-style WordPiece on raw text and write it to ``out``.

    The special tokens come first: [PAD]=0 [UNK]=1 [CLS]=2 [SEP]=3 [MASK]=4.
    """
    from tokenizers import Tokenizer, trainers
    from tokenizers.models import WordPiece

    from electra.data.text import expand_inputs, read_chunks
    from electra.files import check_out, staged

    if not 64 <= vocab_size <= 1 << 20:
        raise UserError(f"--vocab-size {vocab_size} is out of range; use 64 to 1048576 "
                        f"(BERT uses 30522)")
    out = check_out(out, overwrite)
    files = expand_inputs(inputs)
    tok = Tokenizer(WordPiece(unk_token="[UNK]", max_input_chars_per_word=100))
    _bert_pipeline(tok, lowercase)
    trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, min_frequency=min_frequency,
                                        special_tokens=list(SPECIAL_TOKENS),
                                        continuing_subword_prefix="##",
                                        show_progress=False)

    def lines() -> Iterator[list[str]]:
        for chunk in read_chunks(files):
            yield [line for line in chunk.lines if line]

    tok.train_from_iterator(lines(), trainer=trainer)
    _bert_pipeline(tok, lowercase)  # the template needs the trained [CLS]/[SEP] ids
    if tok.get_vocab_size() <= len(SPECIAL_TOKENS):
        raise UserError(f"--input {' '.join(inputs)}: no text to train on (the files are "
                        f"empty)")
    with staged(out) as tmp:
        save_tokenizer(tok, tmp)
    print(f"wrote {out}/tokenizer.json and vocab.txt ({tok.get_vocab_size()} tokens, "
          f"{'uncased' if lowercase else 'cased'})")
    return tok
