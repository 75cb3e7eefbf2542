"""The environment variables electra reads, each through one checked parser.

Every variable of :data:`SETTINGS` is read with :func:`get`: a value that does not parse or is
out of range (``ELECTRA_CACHE_GB=abc``, ``=nan``, ``=-1``; ``WORLD_SIZE=two``) is one line
naming the variable, its value and what it takes (a :class:`UserError`, exit 2), never a
traceback and never a silent default. An unset or empty variable is its default. The table
is the reference the docs print (docs/how-to/configuration.md).

Variables read by the libraries electra drives (``AWS_*``, ``HF_*``, ``MLFLOW_*``,
``WANDB_*``) are theirs to check.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any

from electra.errors import UserError


@dataclass(frozen=True)
class Setting:
    """One environment variable: its kind (``float``, ``int``, ``path``, ``one_of``), its
    default, its range or choices, and what it does (one line, for the docs)."""

    kind: str
    default: Any
    help: str
    low: float | None = None
    high: float | None = None
    choices: tuple[str, ...] = ()


SETTINGS: dict[str, Setting] = {
    "ELECTRA_CACHE": Setting(
        "path", None, "where store URLs are mirrored and streamed, by default "
        "~/.cache/electra/remote; electra removes only what it wrote there"),
    "ELECTRA_CACHE_GB": Setting(
        "float", 50.0, "the cache's bound in GB, shared by a node's processes", 1e-9, 1e6),
    "ELECTRA_PROGRESS_SECONDS": Setting(
        "float", 30.0, "how many seconds apart long work writes a progress line "
        "when its output is not a terminal", 1.0, 86400.0),
    "ELECTRA_MALLOC": Setting(
        "one_of", "", "system to leave glibc's malloc as it is; by default electra keeps "
        "freed memory for reuse", choices=("", "system")),
    "ELECTRA_PROCESS_GROUP": Setting(
        "one_of", "0", "1 to run even one torchrun process in a process group, DDP or FSDP on "
        "one device", choices=("0", "1")),
    "RANK": Setting("int", 0, "this process's rank, set by torchrun", 0, 1 << 20),
    "LOCAL_RANK": Setting("int", 0, "this process's rank on its node, set by torchrun", 0,
                          1 << 20),
    "WORLD_SIZE": Setting("int", 1, "how many processes, set by torchrun", 1, 1 << 20),
    "LOCAL_WORLD_SIZE": Setting("int", 1, "how many processes on this node, set by torchrun", 1,
                                1 << 20),
}


def _num(x: float) -> str:
    return f"{x:,.0f}" if x == int(x) and x >= 1 else f"{x:g}"


def _what(s: Setting) -> str:
    if s.kind == "path":
        return "a folder path"
    if s.kind == "one_of":
        return "one of " + ", ".join(repr(c) if c else "unset" for c in s.choices)
    number = "a whole number" if s.kind == "int" else "a number"
    if s.low is not None and s.high is not None:
        return f"{number} from {_num(s.low)} to {_num(s.high)}"
    return number


def get(name: str) -> Any:
    """The value of ``name`` (a key of :data:`SETTINGS`), parsed and checked; its default
    where it is unset or empty."""
    s = SETTINGS[name]
    raw = os.environ.get(name, "").strip()
    if not raw:
        return s.default
    if s.kind == "path":
        return raw
    if s.kind == "one_of":
        if raw not in s.choices:
            raise UserError(f"{name}={raw!r}: give {_what(s)}; {name} is {s.help}")
        return raw
    try:
        value: float = int(raw) if s.kind == "int" else float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or (s.low is not None and value < s.low) or (
            s.high is not None and value > s.high):
        raise UserError(f"{name}={raw!r}: give {_what(s)}, or unset it for the default, "
                        f"{_num(s.default)}; {name} is {s.help}")
    return value


def check() -> None:
    """Every variable of :data:`SETTINGS` parsed once (the CLI's first step): a bad one is
    its line before any work, and the later reads cannot fail."""
    for name in SETTINGS:
        get(name)


def reference() -> str:
    """The table of :data:`SETTINGS` in Markdown (docs/how-to/configuration.md)."""
    rows = ["| variable | takes | default | what it does |", "|---|---|---|---|"]
    for name, s in SETTINGS.items():
        default = "unset" if s.default in (None, "") else f"`{s.default}`"
        rows.append(f"| `{name}` | {_what(s)} | {default} | {s.help} |")
    return "\n".join(rows)
