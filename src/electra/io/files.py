"""Writing outputs so that nothing a user has is ever half-replaced, and reading JSON safely.

    (who may write an --out, and when: electra.io.outputs)
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
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from electra.errors import UserError


def staging_dir(out: Path) -> Path:
    """A fresh, empty ``OUT.partial`` beside ``out`` (any leftover from a crash removed)."""
    tmp = out.with_name(out.name + ".partial")
    if tmp.is_symlink():
        raise UserError(f"{tmp} is a symbolic link, not a folder electra left; remove it")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    return tmp


def publish(tmp: Path, out: Path) -> None:
    """Replace ``out`` with ``tmp``: the old folder is moved aside first (to a name nothing
    holds: a user's ``OUT.old`` is never touched), deleted last."""
    if out.exists():
        old = out.with_name(out.name + ".old")
        n = 0
        while old.exists() or old.is_symlink():
            n += 1
            old = out.with_name(f"{out.name}.old-{n}")
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
    with ``hint``, what to do). Every file gets the mode a plain ``open`` gives under the
    user's umask (libraries that write through a temporary file, as transformers' weights
    are, leave 0600 beside 0644)."""
    tmp = staging_dir(out)
    try:
        with disk_errors(out, hint):
            yield tmp
            usual_modes(tmp)
            publish(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def new_file_mode() -> int:
    """The mode ``open`` gives a new file: 0o666 less the umask."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def usual_modes(folder: Path) -> None:
    """Every file under ``folder`` given the mode ``open`` gives a new file where a writer
    left it otherwise (mkstemp and transformers' weights: 0600)."""
    mode = new_file_mode()
    for f in folder.rglob("*"):
        if f.is_file() and not f.is_symlink() and (f.stat().st_mode & 0o777) != mode:
            os.chmod(f, mode)


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


def read_text(path: str | Path, flag: str = "") -> str:
    """A UTF-8 text file, as every reader of ours reads one: a byte-order mark dropped
    (whatever the format), a missing file or bytes that are not UTF-8 a UserError naming the
    file and the line (e.g. latin-1 text: save it as UTF-8)."""
    path = Path(path)
    where = f"{flag} {path}" if flag else str(path)
    if not path.is_file():
        raise UserError(f"{where}: no such file")
    try:
        data = path.read_bytes()
    except OSError as err:
        raise UserError(f"{where}: cannot be read ({err.strerror or err})") from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        raise UserError(f"{where}:{line}: not UTF-8 text (byte {err.start}: {err.reason}); "
                        f"save the file as UTF-8") from None


MAX_JSON_BYTES = 1 << 30  # 1 GiB: SQuAD's train file is 30 MB, a large tokenizer.json 20
MAX_DEPTH = 64  # no file of ours (or SQuAD, GLUE, transformers) nests half as deep


def parse_json(text: str, where: str, what: str = "",
               fix: str = "the file is damaged or truncated") -> Any:
    """``json.loads`` with a nesting limit: bad JSON, or JSON nested deeper than MAX_DEPTH
    (which would overflow the recursion of any code walking it), is one UserError naming
    ``where`` (and ending with ``fix``)."""
    hint = f" ({what})" if what else ""
    try:
        obj, deep = _loads(text)
    except json.JSONDecodeError as err:
        at = f" at line {err.lineno}" if "\n" in text.strip() else ""
        raise UserError(f"{where}: not valid JSON{hint} ({err.msg}{at}); {fix}") from None
    if deep:
        raise UserError(f"{where}: JSON nested more than {MAX_DEPTH} levels deep{hint}; not "
                        f"something electra reads")
    return obj


def _loads(text: str) -> tuple[Any, bool]:
    """``json.loads``, and whether the result nests deeper than MAX_DEPTH (json's own
    RecursionError on deeper input counts as that)."""
    try:
        obj = json.loads(text)
    except RecursionError:
        return None, True
    return obj, _depth(obj) > MAX_DEPTH


def _depth(obj: Any) -> int:
    """How deeply ``obj`` nests (iteratively: a deep object cannot overflow this)."""
    deepest, stack = 0, [(obj, 1)]
    while stack:
        o, d = stack.pop()
        if isinstance(o, (dict, list)):
            deepest = max(deepest, d)
            if d > MAX_DEPTH:
                return d
            stack.extend((v, d + 1) for v in (o.values() if isinstance(o, dict) else o))
    return deepest


def read_json(path: Path, what: str = "", max_bytes: int = MAX_JSON_BYTES) -> Any:
    """The JSON in ``path``; a missing, unreadable, oversized, damaged or absurdly nested
    file is one UserError.

    ``what`` says what the file should be, for the message (e.g. "a model folder's config").
    """
    hint = f" ({what})" if what else ""
    try:
        if path.is_dir():
            raise UserError(f"{path}: a folder, not a JSON file{hint}")
        size = path.stat().st_size
        if size > max_bytes:
            raise UserError(f"{path}: {size:,} bytes, more than the {max_bytes:,} a JSON file "
                            f"may have here{hint}")
        data = path.read_bytes()
    except FileNotFoundError:
        raise UserError(f"{path}: no such file{hint}") from None
    except OSError as err:
        raise UserError(f"{path}: cannot be read{hint}: {err}") from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        raise UserError(f"{path}:{line}: not UTF-8 text (byte {err.start}: {err.reason})"
                        f"{hint}") from None
    return parse_json(text, str(path), what)


def maybe_json(path: Path) -> Any:
    """The JSON in ``path`` as :func:`read_json` reads it, or None where the file is missing,
    unreadable, oversized or not JSON (a file that may be absent, or another program's)."""
    try:
        return read_json(path)
    except UserError:
        return None


MAX_TOML_BYTES = 1 << 20  # a config file; ours are under 2 kB


def read_toml(path: Path, flag: str) -> dict[str, Any]:
    """A TOML config file as a dict; a missing, oversized, binary, damaged or absurdly nested
    file is one UserError naming ``flag`` and the file."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]
    where = f"{flag} {path}"
    if path.is_dir():
        raise UserError(f"{where}: a folder, not a TOML file; give the config file's path")
    if not path.is_file():
        raise UserError(f"{where}: no such file")
    size = path.stat().st_size
    if size > MAX_TOML_BYTES:
        raise UserError(f"{where}: {size:,} bytes, too large for a config file "
                        f"(at most {MAX_TOML_BYTES:,}); give the TOML config")
    try:
        d = tomllib.loads(path.read_bytes().decode("utf-8-sig"))
    except UnicodeDecodeError as err:
        raise UserError(f"{where}: not a text file (byte {err.start} is not UTF-8); give a "
                        f"TOML config") from None
    except tomllib.TOMLDecodeError as err:
        raise UserError(f"{where}: not valid TOML ({err})") from None
    except (RecursionError, OSError) as err:
        why = "nested too deeply" if isinstance(err, RecursionError) else err.strerror
        raise UserError(f"{where}: cannot be read ({why}); give a TOML config") from None
    if _depth(d) > MAX_DEPTH:
        raise UserError(f"{where}: nested more than {MAX_DEPTH} levels deep; not a config")
    return d


def jsonl(path: Path, lines: Iterable[str]) -> Iterator[tuple[int, Any]]:
    """(line number, object) for each non-blank line of a JSONL file; a line that is not
    JSON is a UserError naming it."""
    for n, line in enumerate(lines, 1):
        if line.strip():
            yield n, json_line(line, f"{path}:{n}")


def json_line(line: str, where: str) -> Any:
    """One JSONL line's object; bad or absurdly nested JSON is a UserError naming ``where``
    (``path:line``)."""
    return parse_json(line, where, fix="JSONL needs one object per line")


def pickle_refusal(err: BaseException) -> str:
    """What torch's weights_only refusal found (e.g. "unsupported GLOBAL posix.system"),
    without its advice to load the file with weights_only=False: electra never tells a user
    to run an untrusted pickle."""
    import re

    text = str(err)
    found = re.search(r"(unsupported (?:GLOBAL|global|operand|class)[^\n.]*)", text)
    return found.group(1).strip() if found else "objects other than tensors"

