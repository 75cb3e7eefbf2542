"""Writing a folder so that readers see either the old one or the complete new one.

    tmp = staging_dir(out)     # a fresh OUT.partial/
    ... write into tmp ...
    publish(tmp, out)          # OUT.partial -> OUT; an old OUT is removed only afterwards

Nothing loads from ``*.partial``, so an interrupted writer leaves nothing that looks complete,
and an existing output survives every failure before ``publish``.
"""

from __future__ import annotations

import shutil
from pathlib import Path


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
