"""WordPiece tokenizers (the `tokenizers` library) and the special-token ids, in one place."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from electra.errors import UserError

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
