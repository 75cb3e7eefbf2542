"""How the user started this command, so that advice names a command that works from where
they stand: ``make demo ARGS="--out runs/d --resume"`` after ``make demo``, ``python -m
electra ...`` after ``python -m electra``, ``.venv/bin/electra`` where ``electra`` is not on
the PATH, and the same arguments, quoted for a shell, with the flags that continue it."""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

_argv: list[str] | None = None  # the arguments the CLI parsed (electra.cli.main)
_program: str | None = None  # how it was started, when that is this process's own argv


def record(argv: Sequence[str] | None) -> None:
    """Remember the CLI's arguments (None: this process's ``sys.argv``, whose program is
    then how the user started it)."""
    global _argv, _program
    _argv = list(sys.argv[1:] if argv is None else argv)
    _program = _started_as(sys.argv[0]) if argv is None else None


def _started_as(argv0: str) -> str:
    if Path(argv0).name == "__main__.py":  # python -m electra
        return "python -m electra"
    found = shutil.which("electra")
    try:
        if found and os.path.samefile(found, argv0):
            return "electra"
    except OSError:
        pass
    path = Path(argv0)
    try:  # as typed from here: .venv/bin/electra
        rel = path.resolve().relative_to(Path.cwd().resolve())
        return shlex.quote(str(rel) if "/" in str(rel) else f"./{rel}")
    except ValueError:
        return shlex.quote(str(path))


def command(*, add: Sequence[str] = (), drop: Sequence[str] = (),
            drop_with_value: Sequence[str] = (), fallback: Sequence[str] = ()) -> str:
    """The command the user ran, in backquotes, with the flags in ``drop`` (and
    ``drop_with_value``, which take a value) left out and ``add`` appended; ``fallback`` (its
    arguments) when the CLI did not run (a library call)."""
    args = list(fallback) if _argv is None else list(_argv)
    kept: list[str] = []
    skip = False
    for a in args:
        if skip:
            skip = False
            continue
        if a in drop:
            continue
        if a in drop_with_value:
            skip = True
            continue
        if any(a.startswith(f"{d}=") for d in drop_with_value):
            continue
        kept.append(a)
    kept += [a for a in add if a not in kept]
    if kept[:1] == ["demo"] and os.environ.get("MAKELEVEL") and _program is not None:
        rest = shlex.join(kept[1:])  # `make demo` runs `electra demo $(ARGS)`
        line = f'make demo ARGS="{rest}"' if rest else "make demo"
    else:
        line = f"{_program or 'electra'} {shlex.join(kept)}"
    if "TORCHELASTIC_RUN_ID" in os.environ:  # under torchrun: its own options are not ours
        return f"`torchrun ... -m electra {shlex.join(kept)}` (torchrun's options as before)"
    return f"`{line}`"
