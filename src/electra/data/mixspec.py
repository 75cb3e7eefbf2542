"""What ``--data`` says, read without torch (the early checks read it too,
``electra.commands.checks``): each length phase's folders, their shares and names. The
mixture that draws rows from them is ``electra.data.mixture``.

    --data DATA                          one folder (as ever)
    --data web:0.7+books:0.3             a mixture: 70% of the rows from web, 30% from books
    --data web:0.7+books:0.3,long:1      per length phase (train.phases), comma-separated
    --data web+books                     no weights: equal ones

A folder's weight follows its last ``:`` where that is a number (``s3://...`` and other
colons stay in the path); the weights of a phase are scaled to sum to 1. Each source is named
by its folder's name (``web``, ``books``; a second folder of one name gets ``-2``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from electra.errors import UserError


@dataclass(frozen=True)
class Share:
    """One folder of a phase's mixture: where it is, its share of the rows, its name."""

    path: str
    weight: float
    name: str


def parse_data(text: str) -> list[list[Share]]:
    """``--data``: each comma-separated phase's sources (one, or a ``+``-joined mixture with
    ``:WEIGHT`` suffixes), weights scaled to sum to 1."""
    phases: list[list[Share]] = []
    names: set[str] = set()
    for group in (g.strip() for g in text.split(",")):
        if not group:
            continue
        parts = [p.strip() for p in group.split("+")]
        if any(not p for p in parts):
            raise UserError(f"--data {text}: {group!r} has an empty part; join folders with "
                            f"+, e.g. web:0.7+books:0.3")
        weighed = [_weight(p, text) for p in parts]
        given = [w for _, w in weighed if w is not None]
        if given and len(given) < len(weighed):
            raise UserError(f"--data {text}: give every folder of {group!r} a weight "
                            f"(FOLDER:WEIGHT), or none (equal shares)")
        total = sum(given) if given else float(len(weighed))
        sources = []
        for path, w in weighed:
            name = _name(path, names)
            names.add(name)
            sources.append(Share(path, (1.0 if w is None else w) / total, name))
        phases.append(sources)
    return phases


def _weight(part: str, text: str) -> tuple[str, float | None]:
    """``FOLDER:WEIGHT`` -> (FOLDER, WEIGHT); a folder without a numeric suffix -> None."""
    path, sep, tail = part.rpartition(":")
    if not sep or not path:
        return part, None
    try:
        weight = float(tail)
    except ValueError:
        return part, None  # a colon of the path itself (s3://bucket/data)
    if not 1e-9 <= weight <= 1e9:  # (shares, not counts: their sum must stay finite)
        raise UserError(f"--data {text}: the weight of {path} is {tail}; give a number from "
                        f"1e-9 to 1e9 (only the shares matter: 0.7 and 0.3, or 7 and 3)")
    return path, weight


def _name(path: str, taken: set[str]) -> str:
    base = Path(path.rstrip("/")).name or "data"
    name, k = base, 2
    while name in taken:
        name, k = f"{base}-{k}", k + 1
    return name


def describe(phases: list[list[Share]], lengths: list[int]) -> str:
    """The mix for a first line: ``web 70% + books 30%`` (by phase: ``128: ...; 512: ...``)."""
    parts = [" + ".join(f"{s.name} {s.weight:.0%}" for s in sources) for sources in phases]
    if len(parts) == 1:
        return parts[0]
    return "; ".join(f"{n}: {p}" for n, p in zip(lengths, parts, strict=True))
