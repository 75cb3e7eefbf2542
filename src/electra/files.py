"""Writing outputs so that nothing a user has is ever half-replaced, and reading JSON safely.

    check_out(out, overwrite)  # before any work: refuse an existing output, a file in the way
    tmp = staging_dir(out)     # a fresh OUT.partial/
    ... write into tmp ...
    publish(tmp, out)          # OUT.partial -> OUT; an old OUT is removed only afterwards
    write_json(path, obj)      # path.tmp, fsync, rename: readers see the old file or the new
    read_json(path, what)      # a missing or damaged file is one UserError naming the path

Nothing loads from ``*.partial``, so an interrupted writer leaves nothing that looks complete,
and an existing output survives every failure before ``publish``.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from electra.errors import UserError


def check_out(out: str | Path, overwrite: bool = False, flag: str = "--out") -> Path:
    """Refuse an output that would destroy something: an existing non-empty folder (unless
    ``overwrite``), or a file where the folder goes. Call before any work starts.

    Returns:
        ``out`` as a Path.
    """
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise UserError(f"{flag} {out} is a file, not a folder; choose a folder path")
    if out.is_dir() and any(out.iterdir()) and not overwrite:
        raise UserError(f"{flag} {out} already exists and is not empty; pass --overwrite to "
                        f"replace it or choose another folder")
    return out


def staging_dir(out: Path) -> Path:
    """A fresh, empty ``OUT.partial`` beside ``out`` (any leftover from a crash removed)."""
    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    return tmp


def publish(tmp: Path, out: Path) -> None:
    """Replace ``out`` with ``tmp``: the old folder is moved aside first, deleted last."""
    if out.exists():
        old = out.with_name(out.name + ".old")
        shutil.rmtree(old, ignore_errors=True)
        out.rename(old)
        tmp.rename(out)
        shutil.rmtree(old)
    else:
        tmp.rename(out)


def write_json(path: Path, obj: Any) -> None:
    """Write ``obj`` as indented JSON atomically (a crash leaves the old file or the new)."""
    part = path.with_name(path.name + ".tmp")
    with open(part, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2)
        f.flush()
        os.fsync(f.fileno())
    part.replace(path)


def read_json(path: Path, what: str = "") -> Any:
    """The JSON in ``path``; a missing, unreadable or damaged file is one UserError.

    ``what`` says what the file should be, for the message (e.g. "a model folder's config").
    """
    hint = f" ({what})" if what else ""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserError(f"{path}: no such file{hint}") from None
    except (OSError, UnicodeDecodeError) as err:
        raise UserError(f"{path}: cannot be read{hint}: {err}") from None
    except json.JSONDecodeError as err:
        raise UserError(f"{path}: not valid JSON{hint} ({err.msg} at line {err.lineno}); "
                        f"the file is damaged or truncated") from None
