"""Writing outputs so that nothing a user has is ever half-replaced, and reading JSON safely.

    check_out(out, overwrite)  # before any work: refuse an existing output, a file in the
                               # way, a place that cannot be written
    with staged(out) as tmp:   # a fresh OUT.partial/, renamed to OUT at the end of the block
        ... write into tmp ...  # (an old OUT removed only then); on any error it is removed
    write_json(path, obj)      # path.tmp, fsync, rename: readers see the old file or the new
    read_json(path, what)      # a missing or damaged file is one UserError naming the path
    for n, obj in jsonl(path, lines): ...  # a JSONL file's objects; a bad line is named
    with disk_errors(path): ...  # a full disk or read-only filesystem: one UserError

Nothing loads from ``*.partial``, so an interrupted writer (even one killed with -9) leaves
nothing that looks complete, and an existing output survives every failure before ``publish``.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator
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
    check_writable(out, flag)
    return out


def check_writable(out: Path, flag: str = "--out") -> None:
    """Refuse an output that cannot be written (read-only filesystem, no permission, a file
    where a folder must go): the nearest existing folder at or above ``out`` must take a new
    file (a probe, removed at once)."""
    place = out
    while not place.exists() and place != place.parent:
        place = place.parent
    if not place.is_dir():
        where = f"{flag} {out} is" if place == out else f"{flag} {out}: {place} is"
        raise UserError(f"{where} a file, not a folder; choose another path")
    try:
        fd, probe = tempfile.mkstemp(prefix=".electra-probe-", dir=place)
        os.close(fd)
        os.unlink(probe)
    except OSError as err:
        raise UserError(f"{flag} {out}: cannot write under {place} ({err.strerror or err}); "
                        f"choose a writable folder") from None


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


@contextlib.contextmanager
def staged(out: Path, hint: str | None = None) -> Iterator[Path]:
    """Write folder ``out`` whole or not at all: the block writes into a fresh ``OUT.partial``,
    which replaces ``out`` when the block ends; on any error (or Ctrl-C) it is removed and
    ``out`` is untouched. A full disk or read-only filesystem becomes one UserError (ending
    with ``hint``, what to do)."""
    tmp = staging_dir(out)
    try:
        with disk_errors(out, hint):
            yield tmp
            publish(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


_DISK = {e: os.strerror(e) for e in (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES,
                                     errno.EPERM)}  # "No space left on device", ...


def disk_problem(err: BaseException, path: Path) -> str | None:
    """What an error raised while writing under ``path`` says about the disk, in words; None
    when it is not about the disk (then it is a bug and keeps its traceback)."""
    if isinstance(err, OSError) and err.errno in _DISK:
        return _DISK[err.errno]
    text = str(err)
    if "os error 28" in text or "No space left" in text:  # safetensors, and others
        return _DISK[errno.ENOSPC]
    if isinstance(err, RuntimeError) and ("inline_container" in text or "write" in text):
        # torch.save on a full disk says only "unexpected pos ..." or "file write failed"
        place = path
        while not place.exists() and place != place.parent:
            place = place.parent
        if shutil.disk_usage(place).free < 64 << 20:
            return _DISK[errno.ENOSPC]
    return None


@contextlib.contextmanager
def disk_errors(path: Path, hint: str | None = None) -> Iterator[None]:
    """Turn a full disk, a quota, a read-only filesystem or a permission error while writing
    under ``path`` into one UserError naming it; anything else goes on as it is."""
    try:
        yield
    except UserError:
        raise
    except Exception as err:  # safetensors' own error type is a bare Exception
        problem = disk_problem(err, path)
        if problem is None:
            raise
        hint = hint or "free some space (or choose another --out) and run it again"
        raise UserError(f"{problem} while writing {path}; {hint}") from None


def write_json(path: Path, obj: Any) -> None:
    """Write ``obj`` as indented JSON atomically (a crash leaves the old file or the new)."""
    part = path.with_name(path.name + ".tmp")
    with open(part, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2)
        f.flush()
        os.fsync(f.fileno())
    part.replace(path)


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def read_text(path: Path, flag: str = "") -> str:
    """A UTF-8 text file (a byte-order mark dropped); a missing file or other bytes are a
    UserError naming it."""
    where = f"{flag} {path}" if flag else str(path)
    if not path.is_file():
        raise UserError(f"{where}: no such file")
    try:
        return path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as err:
        raise UserError(f"{where}: not UTF-8 text (byte {err.start}: {err.reason}); save it "
                        f"as UTF-8") from None


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


def jsonl(path: Path, lines: Iterable[str]) -> Iterator[tuple[int, Any]]:
    """(line number, object) for each non-blank line of a JSONL file; a line that is not
    JSON is a UserError naming it."""
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as err:
            raise UserError(f"{path}:{n}: not valid JSON ({err.msg}); JSONL needs one object "
                            f"per line") from None
        yield n, obj
