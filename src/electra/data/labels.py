"""One rule for reading a class label (or a tag), the same in every reader: custom CSV, TSV
and JSONL files, GLUE, SuperGLUE and tagging files.

1. Surrounding spaces are removed: ``" 1"`` is ``1``.
2. Booleans have one form, ``true``/``false``: a JSON ``true``, ``"true"``, ``"True"`` and
   ``"TRUE"`` are one class (a JSON boolean and its string were two, or four).
3. Integral numbers have one form, the integer: ``1``, ``1.0``, ``"1.0"``, ``"1e0"`` are
   ``1`` (pandas writes an integer column with gaps as ``1.0``). Other numbers and all other
   text stay as written.
4. A label holding a control character (``"1\\x07"``), or a value that is no text, number or
   boolean (a list, an object, null), is refused naming the row.

A file that spells one class several ways gets one note saying which spellings were read as
one (:class:`Spellings`).
"""

from __future__ import annotations

import math
import re
import sys
import unicodedata
from typing import Any

from electra.errors import UserError

_NUMBER = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?")


def canonical_label(value: Any, where: str, what: str = "label") -> str:
    """``value`` (from a file: text, a JSON number or boolean) as its one class name.

    Raises:
        UserError: a value of another type, an empty one, or one with a control character,
            naming ``where`` (the file and row).
    """
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        text = repr(value)
    elif isinstance(value, str):
        text = value.strip()
    else:
        raise UserError(f"{where}: {what} {_short(value)} is {type(value).__name__}, not "
                        f"text, a number or a boolean")
    if not text:
        raise UserError(f"{where}: the {what} is empty; give every row one, or drop the row")
    bad = next((c for c in text if unicodedata.category(c) in ("Cc", "Cf", "Cs", "Co", "Cn")
                ), None)
    if bad is not None:
        raise UserError(f"{where}: {what} {_short(text)} holds the control character "
                        f"U+{ord(bad):04X}; remove it from the file")
    low = text.lower()
    if low in ("true", "false"):
        return low
    if _NUMBER.fullmatch(text):
        number = float(text)
        if math.isfinite(number) and number == int(number) and abs(number) < 2**63:
            return str(int(number))
    return text


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


class Spellings:
    """The spellings each class was read from in one file; :meth:`note` says (once) where a
    file wrote one class several ways, e.g. ``1`` and ``1.0``."""

    def __init__(self) -> None:
        self.seen: dict[str, set[str]] = {}
        self.known: dict[tuple[type, Any], str] = {}  # a file repeats its few spellings

    def read(self, value: Any, where: str, what: str = "label") -> str:
        key = (type(value), value)
        try:
            return self.known[key]
        except (KeyError, TypeError):  # new, or unhashable (a list: refused below)
            pass
        name = canonical_label(value, where, what)
        self.seen.setdefault(name, set()).add(repr(value))
        self.known[key] = name
        return name

    def note(self, path: Any, what: str = "labels") -> None:
        mixed = {k: v for k, v in self.seen.items() if len(v) > 1}
        if not mixed:
            return
        said = "; ".join(f"{' and '.join(sorted(v))} as {k!r}" for k, v in
                         sorted(mixed.items())[:4])
        more = f" (and {len(mixed) - 4} more)" if len(mixed) > 4 else ""
        print(f"electra: note: {path}: {what} written several ways are read as one class: "
              f"{said}{more}", file=sys.stderr)
