"""Tokenizers (the `tokenizers` library: WordPiece, BPE, Unigram) and their five special
roles (pad, unk, cls, sep, mask), resolved once, in one place."""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from electra.data.text import expand_inputs, read_chunks
from electra.errors import UserError
from electra.io.files import read_json, staged
from electra.io.outputs import claim_out
from electra.io.progress import advance, reporting

if TYPE_CHECKING:
    from tokenizers import Tokenizer

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")  # BERT's, for WordPiece
ROLES = ("pad", "unk", "cls", "sep", "mask")
# Names tried for a role the tokenizer does not state itself (BERT, RoBERTa, SentencePiece,
# GPT-style), in this order.
_CANDIDATES = {
    "pad": ("[PAD]", "<pad>", "<|pad|>", "[pad]"),
    "unk": ("[UNK]", "<unk>", "<|unk|>", "[unk]"),
    "cls": ("[CLS]", "<s>", "<cls>", "<|cls|>", "[cls]", "<bos>"),
    "sep": ("[SEP]", "</s>", "<sep>", "<|sep|>", "[sep]", "<eos>"),
    "mask": ("[MASK]", "<mask>", "<|mask|>", "[mask]"),
}
SIDECAR = "special_tokens_map.json"  # transformers' file: {"cls_token": "<s>", ...}
_FLAG = "--special-tokens"


@dataclass(frozen=True)
class SpecialTokens:
    """Ids of the tokens the objective and the data packing treat specially."""

    pad: int
    unk: int
    cls: int
    sep: int
    mask: int

    @classmethod
    def from_vocab(cls, vocab: Mapping[str, int],
                   names: Mapping[str, str] | None = None) -> SpecialTokens:
        """Look the five roles up in ``vocab`` (token -> id), by ``names`` (role -> token;
        BERT's by default).

        Raises:
            UserError: when any of them is missing, naming which.
        """
        names = names or dict(zip(ROLES, SPECIAL_TOKENS, strict=True))
        missing = [f"{r}={names[r]}" for r in ROLES if names[r] not in vocab]
        if missing:
            raise UserError(
                f"the vocabulary lacks {', '.join(missing)}; ELECTRA needs the five roles "
                f"{', '.join(ROLES)} (name the tokens with {_FLAG} cls=...,sep=..., or train "
                f"a tokenizer with `electra tokenizer train`)")
        return cls(**{r: vocab[names[r]] for r in ROLES})

    @classmethod
    def of(cls, tok: Tokenizer) -> SpecialTokens:
        """The ids of the roles :func:`load_tokenizer` resolved for ``tok``."""
        return cls.from_vocab(tok.get_vocab(), special_names(tok))

    def ids(self) -> list[int]:
        return [self.pad, self.unk, self.cls, self.sep, self.mask]

    def to_dict(self) -> dict[str, int]:
        return {"pad": self.pad, "unk": self.unk, "cls": self.cls, "sep": self.sep,
                "mask": self.mask}


def parse_special_tokens(text: str) -> dict[str, str]:
    """``cls=<s>,sep=</s>`` -> {"cls": "<s>", "sep": "</s>"}; unknown roles refused."""
    out: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        role, eq, name = part.partition("=")
        role = role.strip().lower()
        if not eq or not name.strip() or role not in ROLES:
            raise UserError(f"{_FLAG} {text!r}: {part!r} is not ROLE=TOKEN with ROLE one of "
                            f"{', '.join(ROLES)} (e.g. {_FLAG} cls=<s>,sep=</s>,pad=<pad>,"
                            f"mask=<mask>,unk=<unk>)")
        out[role] = name.strip()
    return out


def _stated_roles(tok: Tokenizer) -> dict[str, str]:
    """Roles the tokenizer states itself: [CLS]/[SEP] from its post-processor (a template,
    BERT's or RoBERTa's), unk from its model."""
    spec = json.loads(tok.to_str())
    out: dict[str, str] = {}
    model = spec.get("model") or {}
    if isinstance(model.get("unk_token"), str):
        out["unk"] = model["unk_token"]
    elif isinstance(model.get("unk_id"), int) and model.get("vocab"):
        out["unk"] = model["vocab"][model["unk_id"]][0]
    post = spec.get("post_processor") or {}
    posts = post.get("processors", [post]) if post.get("type") == "Sequence" else [post]
    for p in posts:
        if p.get("type") in ("BertProcessing", "RobertaProcessing"):
            out["cls"], out["sep"] = p["cls"][0], p["sep"][0]
        elif p.get("type") == "TemplateProcessing":
            pieces = [x["SpecialToken"]["id"] for x in p.get("single", [])
                      if "SpecialToken" in x]
            if len(pieces) >= 2:
                out["cls"], out["sep"] = pieces[0], pieces[-1]
    return out


def _read_sidecar(folder: Path) -> dict[str, str]:
    """Role names from a ``special_tokens_map.json`` (ours or transformers')."""
    path = folder / SIDECAR
    if not path.is_file():
        return {}

    raw = read_json(path, f"the tokens' roles: fix or delete it, or name them with {_FLAG}",
                    max_bytes=1 << 20)
    out = {}
    for role in ROLES:
        value = raw.get(f"{role}_token") if isinstance(raw, dict) else None
        if isinstance(value, dict):
            value = value.get("content")
        if isinstance(value, str):
            out[role] = value
    return out


def resolve_roles(tok: Tokenizer, given: Mapping[str, str] | None = None,
                  folder: Path | None = None, where: str = "--tokenizer") -> dict[str, str]:
    """Role -> token name for the five roles: ``given`` (--special-tokens) first, then the
    folder's special_tokens_map.json, then what the tokenizer states (post-processor, unk),
    then common names among its tokens.

    Raises:
        UserError: a role with no token (naming the role and the flag), a named token the
            vocabulary lacks, or two roles on one token.
    """
    vocab = tok.get_vocab()
    found = {**_stated_roles(tok), **(_read_sidecar(folder) if folder else {}),
             **(given or {})}
    for role in ROLES:
        if role not in found:
            found[role] = next((c for c in _CANDIDATES[role] if c in vocab), "")
    for role in ROLES:
        name = found[role]
        if not name:
            raise UserError(f"{where}: the tokenizer has no {role} token (looked for "
                            f"{', '.join(_CANDIDATES[role])}); name it with {_FLAG} "
                            f"{role}=TOKEN")
        if name not in vocab:
            raise UserError(f"{where}: the {role} token {name!r} is not in the vocabulary; "
                            f"name another with {_FLAG} {role}=TOKEN")
    names = {r: found[r] for r in ROLES}
    for i, a in enumerate(ROLES):
        for b in ROLES[i + 1:]:
            if names[a] == names[b]:
                raise UserError(f"{where}: roles {a} and {b} both name {names[a]!r}; ELECTRA "
                                f"needs five distinct tokens (add one and name it with "
                                f"{_FLAG} {b}=TOKEN)")
    return names


def special_names(tok: Tokenizer) -> dict[str, str]:
    """Role -> token name, as :func:`load_tokenizer` resolved them (else resolved now)."""
    names = getattr(tok, "electra_roles", None)
    return dict(names) if names else resolve_roles(tok)


def _electra_template(tok: Tokenizer, names: Mapping[str, str]) -> None:
    """The [CLS] A [SEP] B [SEP] template with the tokenizer's own names: pretraining packs
    examples this way, so fine-tuning must encode this way too, whatever the tokenizer
    brought (RoBERTa's <s> A </s></s> B </s>, or none)."""
    from tokenizers import processors

    cls, sep = names["cls"], names["sep"]
    tok.post_processor = processors.TemplateProcessing(
        single=f"{cls} $A {sep}", pair=f"{cls} $A {sep} $B:1 {sep}:1",
        special_tokens=[(cls, tok.token_to_id(cls)), (sep, tok.token_to_id(sep))])


def _bert_pipeline(tok, lowercase: bool) -> None:
    """BERT's normalisation, pre-tokenisation and decoder (the pair template comes with the
    roles, from :func:`_electra_template`)."""
    from tokenizers import decoders, normalizers, pre_tokenizers

    tok.normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=lowercase,
        lowercase=lowercase)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece(prefix="##")


def _stated_lowercase(folder: Path) -> bool | None:
    """``do_lower_case`` of a transformers ``tokenizer_config.json`` in ``folder``, if it
    states one."""
    file = folder / "tokenizer_config.json"
    if not file.is_file():
        return None
    stated = read_json(file, "a transformers tokenizer's settings")
    value = stated.get("do_lower_case") if isinstance(stated, dict) else None
    return value if isinstance(value, bool) else None


def load_tokenizer(path: str | Path, special_tokens: str | Mapping[str, str] | None = None
                   ) -> Tokenizer:
    """A tokenizer from a folder, a ``tokenizer.json`` (WordPiece, BPE, Unigram), a
    SentencePiece ``spm.model`` (DeBERTa-V3's; :func:`_from_sentencepiece`) or a WordPiece
    ``vocab.txt``, with its five special roles resolved (:func:`resolve_roles`;
    ``special_tokens`` as ``cls=<s>,sep=</s>,...``) and ELECTRA's pair template installed.

    A ``vocab.txt``'s case is what a ``tokenizer_config.json`` beside it says
    (``do_lower_case``, as transformers' checkpoints do); without one it is inferred: a
    vocabulary with no word that lowercasing changes is uncased (lowercase + strip accents),
    like bert-base-uncased (whose upper-case 'ℝ' has no lower case).

    Raises:
        UserError: a path that holds no tokenizer, or a tokenizer without the five roles.
    """
    from tokenizers import Tokenizer
    from tokenizers.models import WordPiece

    p = Path(path)
    if p.is_dir():
        found = next((p / n for n in ("tokenizer.json", SPM_MODEL, "vocab.txt")
                      if (p / n).is_file()), None)
        if found is None:
            raise UserError(f"--tokenizer {path}: the folder has no tokenizer.json, "
                            f"{SPM_MODEL} or vocab.txt; train one with `electra tokenizer "
                            f"train`")
        p = found
    if not p.is_file():
        raise UserError(f"--tokenizer {path}: no such file or folder")
    given = (parse_special_tokens(special_tokens) if isinstance(special_tokens, str)
             else dict(special_tokens or {}))
    try:
        if p.suffix == ".json":
            tok = Tokenizer.from_file(str(p))
        elif p.suffix == ".model":
            tok = _from_sentencepiece(p, str(path))
        else:
            vocab = {}
            with open(p, encoding="utf-8") as f:
                for i, line in enumerate(f):
                    token = line.rstrip("\n")
                    if token:
                        vocab.setdefault(token, i)
            if not vocab:
                raise UserError(f"--tokenizer {path}: the vocabulary file is empty")
            unk = given.get("unk", "[UNK]")
            tok = Tokenizer(WordPiece(vocab, unk_token=unk, max_input_chars_per_word=100))
            lowercase = _stated_lowercase(p.parent)
            if lowercase is None:
                lowercase = not any(t.lower() != t for t in vocab
                                    if not (t.startswith("[") or t.startswith("<")))
            _bert_pipeline(tok, lowercase=lowercase)
    except UserError:
        raise
    except Exception as err:  # tokenizers raises plain Exceptions on malformed files
        raise UserError(f"--tokenizer {path}: not a tokenizer file ({err})") from None
    names = resolve_roles(tok, given, p.parent, f"--tokenizer {path}")
    _electra_template(tok, names)
    tok.electra_roles = names  # type: ignore[attr-defined]
    return tok


SPM_MODEL = "spm.model"  # DeBERTa-V3's SentencePiece model, as its released folders name it
SPM_EXTRA = "pip install 'electra[spm]'"


def _from_sentencepiece(p: Path, given: str) -> Tokenizer:
    """A SentencePiece model (``spm.model``, DeBERTa-V3's 128k vocabulary) as transformers
    converts it for its fast tokenizer (sentencepiece reads the model): the same ids as
    sentencepiece's own encoder, [CLS] A [SEP] around them, and DeBERTa's [MASK] after the
    pieces. The folder's ``tokenizer_config.json`` where it has one (its tokenizer class and
    case), else DeBERTa-V2's, cased."""
    import importlib.util
    import shutil
    import tempfile

    missing = [m for m in ("transformers", "sentencepiece", "google.protobuf")
               if importlib.util.find_spec(m.split(".")[0]) is None]
    if missing:
        raise UserError(f"--tokenizer {given}: a SentencePiece model needs "
                        f"{', '.join(missing)}; {SPM_EXTRA}")
    import sentencepiece
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer

    try:
        sentencepiece.SentencePieceProcessor(model_file=str(p))
    except (RuntimeError, OSError) as err:
        raise UserError(f"--tokenizer {given}: not a SentencePiece model ({str(err)[:120]})"
                        ) from None
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copyfile(p, Path(tmp) / SPM_MODEL)
        config = p.parent / "tokenizer_config.json"
        if config.is_file():
            shutil.copyfile(config, Path(tmp) / config.name)
        else:
            (Path(tmp) / config.name).write_text(json.dumps(
                {"tokenizer_class": "DebertaV2Tokenizer", "do_lower_case": False}))
        hf = AutoTokenizer.from_pretrained(tmp)
    return Tokenizer.from_str(hf.backend_tokenizer.to_str())


def tokenizer_checksum(tok: Tokenizer) -> str:
    """sha256 of the tokenizer's canonical JSON: equal iff it tokenizes the same way."""
    canon = json.dumps(json.loads(tok.to_str()), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canon.encode()).hexdigest()


def save_tokenizer(tok: Tokenizer, out: Path) -> None:
    """Write ``tokenizer.json``, ``vocab.txt`` (ids in order) and the roles'
    ``special_tokens_map.json`` into folder ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    tok.save(str(out / "tokenizer.json"))
    by_id = sorted(tok.get_vocab().items(), key=lambda kv: kv[1])
    (out / "vocab.txt").write_text("".join(t + "\n" for t, _ in by_id), encoding="utf-8")
    (out / SIDECAR).write_text(json.dumps({f"{r}_token": n for r, n in
                                           special_names(tok).items()}, indent=2) + "\n")


ALGORITHMS = ("wordpiece", "bpe", "unigram")
# Each algorithm's special tokens, in id order: BERT's for WordPiece, RoBERTa's for byte-level
# BPE, ALBERT's (SentencePiece) for Unigram.
ALGORITHM_SPECIALS = {
    "wordpiece": dict(zip(ROLES, SPECIAL_TOKENS, strict=True)),
    "bpe": {"cls": "<s>", "pad": "<pad>", "sep": "</s>", "unk": "<unk>", "mask": "<mask>"},
    "unigram": {"pad": "<pad>", "unk": "<unk>", "cls": "[CLS]", "sep": "[SEP]",
                "mask": "[MASK]"},
}


def _new_tokenizer(algorithm: str, vocab_size: int, min_frequency: int, lowercase: bool,
                   extra_specials: list[str] | None = None) -> tuple[Tokenizer, Any]:
    """An untrained tokenizer of ``algorithm`` and its trainer."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    specials = list(ALGORITHM_SPECIALS[algorithm].values()) + (extra_specials or [])
    if algorithm == "wordpiece":
        tok = Tokenizer(models.WordPiece(unk_token="[UNK]", max_input_chars_per_word=100))
        _bert_pipeline(tok, lowercase)
        return tok, trainers.WordPieceTrainer(
            vocab_size=vocab_size, min_frequency=min_frequency, special_tokens=specials,
            continuing_subword_prefix="##", show_progress=False)
    norm = [normalizers.NFKC()] + ([normalizers.Lowercase()] if lowercase else [])
    if algorithm == "bpe":
        tok = Tokenizer(models.BPE(unk_token="<unk>"))
        tok.normalizer = normalizers.Sequence(norm)
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
        tok.decoder = decoders.ByteLevel()
        return tok, trainers.BpeTrainer(
            vocab_size=vocab_size, min_frequency=min_frequency, special_tokens=specials,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok = Tokenizer(models.Unigram())
    tok.normalizer = normalizers.Sequence(norm)
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    return tok, trainers.UnigramTrainer(vocab_size=vocab_size, special_tokens=specials,
                                        unk_token="<unk>", show_progress=False)


def _train(model: str, vocab_size: int, min_frequency: int, lowercase: bool,
           lines: Callable[[], Iterator[list[str]]]) -> Tokenizer:
    """Train a tokenizer of algorithm ``model`` on ``lines()``, the same one on every run.

    The WordPiece trainer of tokenizers numbers the continuing pieces (``##e``) in a hash
    order that changes from process to process, and breaks ties between equally frequent
    merges by those numbers, so two runs on one file gave vocabularies that differed in a few
    tokens. A first pass (no merges) finds the alphabet; the second then gets every ``##c``
    with a fixed number, and the result is the same in every run. Unigram training (EM over
    a suffix array, in threads) cannot be made repeatable from here: said when it runs.
    """
    from tokenizers import Tokenizer, models

    if model == "unigram":
        print("note: the Unigram trainer of the tokenizers library is not deterministic: two "
              "runs on the same input can differ in a few pieces (WordPiece and BPE are "
              "repeatable)", file=sys.stderr)
    if model != "wordpiece":
        tok, trainer = _new_tokenizer(model, vocab_size, min_frequency, lowercase)
        tok.train_from_iterator(lines(), trainer=trainer)
        return tok
    specials = list(ALGORITHM_SPECIALS["wordpiece"].values())
    tok, trainer = _new_tokenizer(model, len(specials), min_frequency, lowercase)
    tok.train_from_iterator(lines(), trainer=trainer)  # the alphabet alone
    pieces = sorted(t for t in tok.get_vocab() if t.startswith("##") and len(t) > 2)
    tok, trainer = _new_tokenizer(model, vocab_size, min_frequency, lowercase,
                                  extra_specials=pieces)
    tok.train_from_iterator(lines(), trainer=trainer)
    # The pieces were passed as special tokens only to fix their ids: a plain WordPiece model
    # over the same vocabulary, with only the five roles special.
    vocab = tok.get_vocab()
    plain = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]", max_input_chars_per_word=100))
    _bert_pipeline(plain, lowercase)
    plain.add_special_tokens(specials)
    return plain


def train_tokenizer(inputs: list[str], vocab_size: int, out: str | Path,
                    lowercase: bool = True, overwrite: bool = False,
                    min_frequency: int = 2, model: str = "wordpiece", text_field: str = "text",
                    split: str | None = None) -> Tokenizer:
    """Train a tokenizer of algorithm ``model`` (wordpiece, bpe, unigram) on raw text and write it
    to ``out``. The special tokens come first (ids 0-4), named as in ``ALGORITHM_SPECIALS``."""
    if model not in ALGORITHMS:
        raise UserError(f"--model {model!r} is not a tokenizer algorithm; use one of "
                        f"{', '.join(ALGORITHMS)}")
    if not 64 <= vocab_size <= 1 << 20:
        raise UserError(f"--vocab-size {vocab_size} is out of range; use 64 to 1048576 "
                        f"(BERT uses 30522)")
    files = expand_inputs(inputs, split=split)
    out = Path(out)
    with claim_out(out, "tokenizer", "tokenizer train", overwrite=overwrite,
                   inputs=[("--input", f) for f in [*inputs, *files]]) as claim:

        def lines() -> Iterator[list[str]]:
            for chunk in read_chunks(files, text_field):
                advance(len(chunk.lines))  # (a line every ELECTRA_PROGRESS_SECONDS in a log)
                yield [line for line in chunk.lines if line]

        passes = "two passes" if model == "wordpiece" else "one pass"
        with reporting(None, f"tokenizer train: lines read ({passes})", "line"):
            tok = _train(model, vocab_size, min_frequency, lowercase, lines)
        if tok.get_vocab_size() <= len(ROLES):
            raise UserError(f"--input {' '.join(inputs)}: no text to train on (the files are "
                            f"empty)")
        names = ALGORITHM_SPECIALS[model]
        _electra_template(tok, names)
        tok.electra_roles = dict(names)  # type: ignore[attr-defined]
        with staged(out) as tmp:
            claim.mark(tmp)
            save_tokenizer(tok, tmp)
    print(f"wrote {out}/tokenizer.json and vocab.txt ({model}, {tok.get_vocab_size():,} "
          f"tokens, {'uncased' if lowercase else 'cased'})")
    if tok.get_vocab_size() < vocab_size:
        print(f"note: the text holds only {tok.get_vocab_size():,} tokens seen at least "
              f"{min_frequency} times (--vocab-size asked for {vocab_size:,}); the vocabulary "
              f"is that size and models take their size from it; more text gives more",
              file=sys.stderr)
    return tok
