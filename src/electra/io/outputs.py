"""Who owns an ``--out``: the one rule every command follows before it writes anything.

1. Every folder a command writes carries a mark, ``.electra.json`` ({"kind", "command"}):
   what it is (a tokenizer, prepared data, a run, a fine-tune, an export, a comparison, a
   demo) and which command made it. Folders from before the mark are recognised by their
   files (:func:`what_is`).
2. A command writes only into a new or empty folder, or (``--overwrite``; ``--resume`` to
   continue) into one of its own kind made by the same command. Anything else (a run, a
   data folder, a model, a folder of files electra did not write) is refused with one line
   naming what the folder holds; nothing is changed.
3. No output goes over, inside or around any of the command's inputs (real paths compared,
   symbolic links resolved): ``prepare --input in --out in/data`` and ``export RUN --out
   RUN`` are refused; so is a folder inside another command's output (whose ``--overwrite``
   would delete it), except the parts compare and demo write inside their own. A symbolic
   link as ``--out`` (or its ``.partial``) is refused too.
4. One writer per ``--out``: an exclusive ``fcntl`` lock on ``OUT.electra-lock`` beside it
   (electra's signature, the holder's pid, host, command and start time; written and locked
   before the file appears), taken before anything is written and released (the file
   removed) when the command ends, however it ends. A second command on the same ``--out``
   exits 2 naming the holder. A lock left by a process that was killed is not held (the
   kernel releases it); it is taken over with a note if it carries the signature. A file
   at that path without it is never touched: the command is refused. Under torchrun only rank
   0 takes it. On a network filesystem this is as good as its ``fcntl`` locks (NFSv4 and
   lockd-backed NFSv3 honour them; a filesystem without locks gets a note, no lock).
5. A single-file output (``predict --out``, ``plot --out``, ``detect --html``) replaces an
   existing file only if this command wrote it (:func:`owns_file` recognises its format),
   and never an input.

    with claim_out(out, "run", "pretrain", overwrite=..., resume=..., inputs=...) as claim:
        ...                 # claim.state: "new" (absent or empty), "same" (ours, to
        claim.mark(folder)  # continue or replace); mark a folder as this command's output
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import shutil
import socket
import stat
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from electra.errors import UserError
from electra.io import remote
from electra.io.files import disk_errors, new_file_mode
from electra.io.remote import is_url

MARK = ".electra.json"

# kind -> how a message names it
OUTPUTS = {"tokenizer": "a tokenizer", "data": "prepared data", "run": "a pretraining run",
         "finetune": "a fine-tuning output", "export": "a transformers export",
         "comparison": "a comparison", "demo": "a demo"}

# Outputs whose unfinished staging folder can be continued (--resume): a rerun without
# --resume or --overwrite is refused rather than starting over (and deleting it).
RESUMABLE = {("finetune", "finetune")}

_HELD: set[str] = set()  # lock files this process holds (fcntl locks do not conflict within
# one process, so a second claim of the same --out in this process is caught here)


def describe(kind: str, command: str) -> str:
    if kind == "run" and command == "import":
        return "an imported run (electra import)"
    return f"{OUTPUTS.get(kind, kind)} (electra {command})"


def _json_dict(path: Path) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as f:
            obj = json.loads(f.read(1 << 20))
    except (OSError, ValueError, RecursionError):
        return {}
    return obj if isinstance(obj, dict) else {}


def what_is(folder: Path, strict: bool = False) -> tuple[str, str] | None:
    """(kind, command) of an existing non-empty folder electra wrote; None when it holds files
    electra did not write. ``strict``: only the mark (for the folders above an --out, where
    a loose guess from file names would refuse outputs under a user's own folders)."""
    mark = _json_dict(folder / MARK)
    if isinstance(mark.get("kind"), str) and isinstance(mark.get("command"), str):
        return mark["kind"], mark["command"]
    if strict:
        return None
    # Folders written before the mark, by their files.
    if (folder / "compare.json").is_file():
        return "comparison", "compare"
    if (folder / "meta.json").is_file() and (folder / "train").is_dir():
        return "data", "prepare"
    if (folder / "summary.json").is_file() or all(
            (folder / d).is_dir() for d in ("corpus", "tokenizer", "data")):
        return "demo", "demo"
    if any((folder / f).is_file() for f in ("results.json", "finetune.json")) or any(
            folder.glob("seed-*/config.json")):
        return "finetune", "finetune"
    top = _json_dict(folder / "config.json")
    if "architectures" in top or "architectures" in _json_dict(
            folder / "discriminator" / "config.json"):
        return "export", "export"
    if "train" in top or (folder / "checkpoints").is_dir() or (folder / "metrics.jsonl"
                                                                ).is_file():
        return "run", "pretrain"
    if (folder / "discriminator" / "config.json").is_file():
        return "run", "import"
    names = {p.name for p in folder.iterdir()}
    if "tokenizer.json" in names and names <= {"tokenizer.json", "vocab.txt",
                                               "special_tokens_map.json"}:
        return "tokenizer", "tokenizer train"
    return None


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


# What electra puts beside an output: OUT.electra-lock.XXXXXXXX while it takes the lock.
_BESIDE = len(".electra-lock.") + 8


def check_name(out: Path, flag: str = "--out") -> None:
    """Refuse a name the filesystem cannot hold with electra's lock file beside it (most
    allow 255 bytes a name)."""
    place = out.parent
    while not place.exists() and place != place.parent:
        place = place.parent
    try:
        limit = os.pathconf(place, "PC_NAME_MAX")
    except (OSError, ValueError):
        limit = 255
    size = len(os.fsencode(out.name))
    if size + _BESIDE > limit:
        raise UserError(f"{flag} {str(out)[:60]}...: its last part is {size} bytes, more than "
                        f"the {limit - _BESIDE} this filesystem leaves for it ({limit} a name, "
                        f"less electra's lock file beside it); choose a shorter name")


def _real(path: Path) -> Path:
    return Path(os.path.realpath(path))


def _url_path(url: str) -> str:
    """A store URL as the outputs rule compares it: the protocol's one name (``s3a`` is
    ``s3``), no trailing ``/``, a pattern cut to the folder before its first wildcard."""
    protocol, _, rest = url.partition("://")
    protocol = {"s3a": "s3", "gcs": "gs", "abfs": "az", "abfss": "az"}.get(protocol, protocol)
    parts = rest.rstrip("/").split("/")
    for k, part in enumerate(parts):
        if any(c in part for c in "*?["):
            parts = parts[:k]
            break
    return f"{protocol}://{'/'.join(parts)}"


def _check_urls(out: str, value: str, in_flag: str, flag: str) -> None:
    """The outputs rule between a store URL output and a store URL input."""
    target, src = _url_path(out), _url_path(value)
    if target == src:
        raise UserError(f"{flag} {out} is {in_flag} {value} itself, an input of this "
                        f"command; write the output somewhere else")
    if target.startswith(src + "/"):
        raise UserError(f"{flag} {out} is inside {in_flag} {value}, an input of this "
                        f"command; choose a URL outside it")
    if src.startswith(target + "/"):
        raise UserError(f"{flag} {out} holds {in_flag} {value}, an input of this command; "
                        f"choose a URL that does not contain it")


def through_store(out: str, overwrite: bool, mark: tuple[str, str], last: str,
                  write: Callable[[str], Any], quiet: bool = False, flag: str = "--out"
                  ) -> Any | None:
    """An output URL written through a local folder of the cache: ``write(local)`` makes it
    (returning the command's result), then it is uploaded with ``last`` (the file that makes
    it whole: a prepared folder's meta.json) last, one writer at a time
    (``electra.io.remote.writing``). A URL that holds something already is refused unless
    ``overwrite``, and then only this command's kind of output is written over: a folder
    with its ``last``, or the upload of one that was interrupted (its ``MARK`` naming
    ``mark``, (kind, command), which goes up first, without the ``last`` that goes up last).
    None where ``out`` is a local path (the caller writes it)."""
    if not is_url(out):
        return None
    url = out.rstrip("/")
    with remote.writing(url, flag):
        there = remote.listing(url, flag)
        found = remote.read_json(f"{url}/{MARK}", flag) if MARK in there else None
        ours = last in there or (isinstance(found, dict) and (
            found.get("kind"), found.get("command")) == mark)
        if there and not overwrite:
            what = (f"the upload of an interrupted `electra {mark[1]}`" if ours and
                    last not in there else "something")
            raise UserError(f"{flag} {url} already holds {what}; pass --overwrite to write "
                            f"over it, or choose another URL")
        if there and not ours:  # only what this command writes
            raise UserError(f"{flag} {url} holds files `electra {mark[1]}` did not write (no "
                            f"{last}): nothing was changed; choose another URL")
        staging = remote.cache_root() / "outgoing" / hashlib.sha1(url.encode()).hexdigest()[:16]
        result = write(str(staging / url.rpartition("/")[2]))
        remote.upload(staging / url.rpartition("/")[2], url, flag, last)
        shutil.rmtree(staging, ignore_errors=True)
    if not quiet:
        print(f"uploaded to {url}")
    return result


def check_inputs(out: str | Path, inputs: Iterable[tuple[str, Any]],
                 flag: str = "--out") -> None:
    """Refuse ``out`` over, inside or around an input (``(flag, path)`` pairs; None skipped),
    local paths and store URLs alike (a URL and a local path never overlap)."""
    for in_flag, value in inputs:
        if value in (None, ""):
            continue
        if is_url(out) or is_url(value):
            if is_url(out) and is_url(value):
                _check_urls(str(out), str(value), in_flag, flag)
            continue
        target = _real(Path(out))
        src = _real(Path(value))
        if not src.exists():
            continue
        if target == src:
            raise UserError(f"{flag} {out} is {in_flag} {value} itself, an input of this "
                            f"command; write the output somewhere else")
        if src.is_dir() and src in target.parents:
            raise UserError(f"{flag} {out} is inside {in_flag} {value}, an input of this "
                            f"command; choose a path outside it")
        if target in src.parents:
            raise UserError(f"{flag} {out} holds {in_flag} {value}, an input of this command; "
                            f"choose a folder that does not contain it")


def check_nesting(out: Path, flag: str = "--out") -> None:
    """Refuse a folder output inside another command's output (its --overwrite would delete
    this one), unless this process holds that folder (compare and demo nest their parts)."""
    for above in _real(out).parents:
        if not above.is_dir():
            continue
        found = what_is(above, strict=True)
        held = _lock_key(above) in _HELD
        if found is not None and not held:
            raise UserError(f"{flag} {out} is inside {above}, which holds {describe(*found)}; "
                            f"choose a folder outside it")


def _no_link(path: Path, flag: str, out: Path) -> None:
    if path.is_symlink():
        what = " is" if path == out else f": {path} is"
        raise UserError(f"{flag} {out}{what} a symbolic link (to {os.readlink(path)}); give "
                        f"the real path, or remove the link")


_PLAIN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,63}")


def plain_name(name: str, what: str) -> str:
    """A name that becomes a file or folder name (a task's name, an id): letters, digits and
    ``._+-``, at most 64 characters, not starting with a dot; anything else (``/abs/path``,
    ``..``, ``a/b``) is a UserError naming ``what``."""
    if not _PLAIN_NAME.fullmatch(name) or ".." in name:
        raise UserError(f"{what}={name!r}: a name becomes a folder name, so give letters, "
                        f"digits, '.', '_', '+' or '-' (at most 64, no '..'), e.g. reviews")
    return name


def inside(out: str | Path, *parts: str) -> Path:
    """``out/parts...``, checked to stay under ``out`` once symbolic links and ``..`` are
    resolved: a path made from data or flags never leaves the command's --out."""
    path = Path(out).joinpath(*parts)
    root = _real(Path(out))
    real = _real(path)
    if real != root and root not in real.parents:
        raise UserError(f"{path}: resolves to {real}, outside {out}; a name from the input "
                        f"may not lead out of the output folder")
    return path


# -- the lock ---------------------------------------------------------------------------

LOCK_SUFFIX = ".electra-lock"
_SIGNATURE = "electra_lock"  # the key every lock file electra writes starts with


def lock_path(out: Path) -> Path:
    """Where OUT's lock lives: ``OUT.electra-lock`` beside it."""
    return out.with_name(out.name + LOCK_SUFFIX)


def _lock_key(out: Path) -> str:
    """The real path of OUT's lock file (how this process remembers what it holds)."""
    return os.path.join(os.path.realpath(out.parent), out.name + LOCK_SUFFIX)


@dataclass
class Lock:
    path: Path
    fd: int
    key: str

    def release(self) -> None:
        """Remove the lock file if it is still the one this process holds, then unlock."""
        with contextlib.suppress(OSError):
            if os.path.samestat(os.fstat(self.fd), os.stat(self.path, follow_symlinks=False)):
                os.unlink(self.path)
        os.close(self.fd)
        _HELD.discard(self.key)


def _signed(text: str) -> dict[str, Any] | None:
    """A lock file's holder when the text is one electra wrote (its signature), else None."""
    try:
        h = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return h if isinstance(h, dict) and h.get(_SIGNATURE) == 1 else None


def _holder(text: str) -> str:
    h = _signed(text) or {}
    if all(k in h for k in ("pid", "host", "command", "started")):
        return (f"pid {h['pid']} on {h['host']}, electra {h['command']}, since "
                f"{h['started']}")
    return "another process"


def _info(command: str) -> bytes:
    return json.dumps({_SIGNATURE: 1, "pid": os.getpid(), "host": socket.gethostname(),
                       "command": command, "started": time.strftime("%Y-%m-%d %H:%M:%S")}
                      ).encode()


def _create_locked(path: Path, info: bytes, replacing: int | None = None) -> int | None:
    """A new lock file at ``path``, signed and locked before it appears there (written and
    locked under a temporary name, then hard-linked: no other process ever sees it empty,
    half-written or unlocked); None when ``path`` exists. ``replacing``: the descriptor of a
    stale lock of electra's at ``path`` that this process holds locked: the new file is
    renamed over it (atomic: the path never holds anything but a whole, signed lock; a
    process killed at any moment leaves one). Where hard links are not supported, O_EXCL."""
    import fcntl

    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", dir=path.parent)
    try:
        os.write(fd, info)
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a new inode: only ENOLCK can fail
        if replacing is not None:
            os.rename(tmp, path)
            return fd
        try:
            os.link(tmp, path)
        except FileExistsError:
            os.close(fd)
            return None
        except OSError as err:
            if err.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK):
                raise
            os.close(fd)
            return _create_exclusive(path, info)
        return fd
    except BaseException:
        with contextlib.suppress(OSError):
            os.close(fd)
        raise
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if replacing is not None:
            os.close(replacing)


def _create_exclusive(path: Path, info: bytes) -> int | None:
    import fcntl

    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    except FileExistsError:
        return None
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.write(fd, info)
    except BaseException:  # the file this call made goes again (no empty lock left behind)
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(path)
        raise
    return fd


class _NoLocks(Exception):
    """The filesystem has no fcntl locks (ENOLCK)."""


def take_lock(out: Path, command: str, flag: str = "--out") -> Lock | None:
    """The exclusive lock on ``OUT.electra-lock``; a UserError naming the holder when another
    process holds it. None (with a note) where the filesystem has no locks.

    A lock file is electra's only if it carries electra's signature: a stale one (its holder
    was killed) is taken over; any other file at that path is never truncated, rewritten or
    deleted (one line asks the user to move it)."""
    path = lock_path(out)
    _no_link(path, flag, out)
    key = _lock_key(out)
    if key in _HELD:
        raise UserError(f"{flag} {out} is being written by this same process already; give "
                        f"each output its own folder")
    info = _info(command)
    try:
        for attempt in range(50):
            try:
                fd = _create_locked(path, info)
                if fd is None:  # it exists: held by a running command, stale, or not ours
                    stale = _stale(path, out, flag, patient=attempt < 40)
                    fd = None if stale is None else _create_locked(path, info, stale)
            except OSError as err:
                if err.errno == errno.ENOLCK:
                    raise _NoLocks from None
                raise UserError(f"{flag} {out}: cannot create the lock file {path} "
                                f"({err.strerror}); choose a writable folder") from None
            if fd is not None:
                _HELD.add(key)
                return Lock(path, fd, key)
    except _NoLocks:
        print(f"electra: note: {path.parent} has no file locks; nothing stops another "
              f"command from writing {out} at the same time", file=sys.stderr)
        return None
    raise UserError(f"{flag} {out}: could not take {path} (it keeps being replaced); run the "
                    f"command again")


def _stale(path: Path, out: Path, flag: str, patient: bool) -> int | None:
    """The existing lock file at ``path``, locked (to be replaced, never rewritten in place),
    if it is a stale one of electra's (a note says so); None to try again (it was just
    removed or replaced, or is still empty in O_EXCL's moment when ``patient``). A UserError
    when a running command holds it or electra did not write it."""
    import fcntl

    try:
        fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise OSError(errno.EINVAL, "not a regular file")
    except FileNotFoundError:
        return None  # its holder just removed it
    except OSError as err:
        raise UserError(f"{flag} {out}: {path} exists and is not a lock electra wrote "
                        f"({err.strerror}; nothing was changed); it is where this command "
                        f"keeps its lock: move it away or choose another {flag}") from None
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as err:
        text = os.pread(fd, 4096, 0).decode("utf-8", "replace")
        os.close(fd)
        if err.errno == errno.ENOLCK:
            raise _NoLocks from None
        raise UserError(f"{flag} {out} is being written by another electra command "
                        f"({_holder(text)}); wait for it to end, or choose another "
                        f"folder") from None
    try:  # the file may have been removed by the holder we raced: then try again
        same = os.path.samestat(os.fstat(fd), os.stat(path, follow_symlinks=False))
    except FileNotFoundError:
        same = False
    text = os.pread(fd, 1 << 16, 0).decode("utf-8", "replace") if same else ""
    if not same or (not text and patient):
        os.close(fd)
        if same:
            time.sleep(0.025)
        return None
    if _signed(text) is None:
        os.close(fd)
        raise UserError(f"{flag} {out}: {path} exists and was not written by electra "
                        f"(nothing was changed); it is where this command keeps its "
                        f"lock: move that file away or choose another {flag}")
    print(f"electra: note: {path} was left by a command that no longer runs "
          f"({_holder(text)}); taking it over", file=sys.stderr)
    return fd


# -- the claim ---------------------------------------------------------------------------


@dataclass
class Claim:
    """What :func:`claim_out` found and holds: ``state`` is "new" or "same"."""

    path: Path
    kind: str
    command: str
    state: str = "new"
    lock: Lock | None = None
    made: list[Path] = field(default_factory=list)  # parent folders this claim created

    def mark(self, folder: Path) -> None:
        """Mark ``folder`` (the output, or its staging copy) as this command's."""
        folder.mkdir(parents=True, exist_ok=True)
        (folder / MARK).write_text(json.dumps({"kind": self.kind, "command": self.command,
                                               "format_version": 1}) + "\n")


def _inspect(claim: Claim, overwrite: bool, resume: bool, flag: str) -> None:
    out = claim.path
    _no_link(out, flag, out)
    for suffix in (".partial", ".old"):
        _no_link(out.with_name(out.name + suffix), flag, out)
    part = out.with_name(out.name + ".partial")
    if part.is_dir() and any(part.iterdir()):
        left = what_is(part)
        if left is None:
            raise UserError(f"{flag} {out}: {part} holds files electra did not write (it "
                            f"would be the staging folder); move it away or choose another "
                            f"--out")
        if left != (claim.kind, claim.command):
            raise UserError(f"{flag} {out}: {part} is the unfinished output of another "
                            f"command ({describe(*left)}); rerun that command to finish it, "
                            f"or remove it")
        if left in RESUMABLE and not (overwrite or resume):
            raise UserError(f"{flag} {out}: {part} holds what an interrupted electra "
                            f"{left[1]} did (nothing was changed); pass --resume to continue "
                            f"it, or --overwrite to discard it and start again")
    if out.exists() and not out.is_dir():
        raise UserError(f"{flag} {out} is a file, not a folder; choose a folder path")
    if not out.is_dir() or not any(out.iterdir()):
        return
    found = what_is(out)
    mine = describe(claim.kind, claim.command)
    if found is None:
        raise UserError(f"{flag} {out} holds files electra did not write; refusing to write "
                        f"there (nothing was changed): choose a new or empty folder")
    if found != (claim.kind, claim.command):
        raise UserError(f"{flag} {out} holds {describe(*found)}, not {mine}; this command "
                        f"replaces only its own kind of output (nothing was changed): choose "
                        f"another folder")
    claim.state = "same"
    if not (overwrite or resume):
        done = claim.kind == "finetune" and (out / "results.json").is_file()
        again = ("pass --resume to continue it or --overwrite to start again"
                 if claim.kind in ("run", "finetune") and claim.command != "import" and not done
                 else "pass --overwrite to replace it or choose another folder")
        raise UserError(f"{flag} {out} already holds {describe(*found)}; {again}")


def claim(out: str | Path, kind: str, command: str, *, overwrite: bool = False,
          resume: bool = False, inputs: Iterable[tuple[str, Any]] = (),
          flag: str = "--out") -> Claim:
    """Check ``out`` for this command and take its lock (see the module's docstring); the
    caller releases it with :func:`release`. Nothing is written but the lock file (and the
    missing folders above ``out``, removed again on release if still empty)."""
    out = Path(out)
    c = Claim(out, kind, command)
    check_name(out, flag)
    _no_link(out, flag, out)
    here = _real(Path.cwd())
    if _real(out) == here or _real(out) in here.parents:
        raise UserError(f"{flag} {out} is the current folder or holds it; give a folder by "
                        f"its own name (e.g. runs/{kind})")
    check_inputs(out, inputs, flag)
    check_nesting(out, flag)
    check_writable(out, flag)
    parent = out.parent
    while not parent.exists():
        c.made.insert(0, parent)
        parent = parent.parent
    try:
        for d in c.made:
            d.mkdir()
    except OSError as err:
        release(c)
        raise UserError(f"{flag} {out}: cannot make the folder {err.filename} "
                        f"({err.strerror}); choose another path") from None
    try:
        c.lock = take_lock(out, command, flag)
        _inspect(c, overwrite, resume, flag)
    except BaseException:
        release(c)
        raise
    return c


def release(c: Claim) -> None:
    """Give the lock back; remove the folders the claim made that stayed empty."""
    if c.lock is not None:
        c.lock.release()
        c.lock = None
    for d in reversed(c.made):
        with contextlib.suppress(OSError):
            d.rmdir()
    c.made = []


@contextlib.contextmanager
def claim_out(out: str | Path, kind: str, command: str, *, overwrite: bool = False,
              resume: bool = False, inputs: Iterable[tuple[str, Any]] = (),
              flag: str = "--out", rt: Any = None) -> Iterator[Claim]:
    """:func:`claim` for the length of the block. With a runtime ``rt`` (torchrun), rank 0
    claims and every rank gets its verdict (a UserError stops them all)."""
    held: list[Claim] = []

    def take() -> str:
        held.append(claim(out, kind, command, overwrite=overwrite, resume=resume,
                          inputs=inputs, flag=flag))
        return held[0].state

    state = rt.on_main(take, "checking --out") if rt is not None else take()
    c = held[0] if held else Claim(Path(out), kind, command, state)
    try:
        yield c
    finally:
        release(c)


# -- single-file outputs -------------------------------------------------------------------

PNG_SOFTWARE = "electra plot"
HTML_GENERATOR = '<meta name="generator" content="electra detect">'
PREDICTION_KEYS = {"label", "probs", "score", "tokens", "tags", "id", "answer",
                   "no_answer_minus_best"}


def owns_file(path: Path, command: str) -> bool:
    """Whether an existing file is one ``command`` writes (its format recognised); a device
    or pipe (``/dev/stdout``) is written into, never replaced, so it counts as writable."""
    if path.exists() and not path.is_file():
        return True
    try:
        with open(path, "rb") as f:
            head = f.read(1 << 16)
    except OSError:
        return False
    if not head:
        return True  # an empty file holds nothing to lose
    if command == "plot":
        return head.startswith(b"\x89PNG") and (PNG_SOFTWARE.encode() in head
                                                 or path.name == "curves.png")
    if command == "detect":
        return HTML_GENERATOR.encode() in head
    if command == "predict":
        try:
            first = json.loads(head.split(b"\n", 1)[0])
        except ValueError:
            return False
        return isinstance(first, dict) and bool(first) and set(first) <= PREDICTION_KEYS
    return False


def check_file_out(out: str | Path, command: str, inputs: Iterable[tuple[str, Any]] = (),
                   flag: str = "--out", suffix: str = "") -> Path:
    """Refuse a single-file output that would destroy something (see the module's
    docstring); call before any work. Returns ``out`` as a Path."""
    path = Path(out)
    check_name(path, flag)
    if path.exists() and not path.is_file() and not path.is_dir():
        return path  # a device or pipe (/dev/stdout, /dev/null; a link to one): written into
    _no_link(path, flag, path)
    if path.is_dir():
        raise UserError(f"{flag} {out} is a folder; give a file path"
                        + (f", e.g. out{suffix}" if suffix else ""))
    check_inputs(path, inputs, flag)
    check_writable(path.parent if path.exists() else path, flag)
    if path.exists() and not owns_file(path, command):
        raise UserError(f"{flag} {out} exists and was not written by electra {command}; "
                        f"refusing to replace it (nothing was changed): choose another path")
    return path


def write_file(path: Path, write: Callable[[Path], None], command: str,
               flag: str = "--out") -> None:
    """Write a single-file output atomically under its lock: ``write(part)`` fills a part
    file, renamed over ``path`` at the end (missing folders above it made; on any error the
    part file is removed and ``path`` untouched)."""
    if path.exists() and not path.is_file():  # /dev/stdout, /dev/null, a pipe: write into it
        with disk_errors(path):
            write(path)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = take_lock(path, command, flag)
    try:  # a part file of our own: a user's PATH.partial is never written or removed
        fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".partial",
                                    dir=path.parent)
        os.close(fd)
        os.chmod(name, new_file_mode())  # the mode open() gives a new file (mkstemp: 0600)
    except OSError as err:
        if lock is not None:
            lock.release()
        raise UserError(f"{flag} {path}: cannot write in {path.parent} ({err.strerror}); "
                        f"choose a writable folder") from None
    part = Path(name)
    try:
        if path.exists() and not owns_file(path, command):  # appeared while we worked
            raise UserError(f"{flag} {path} was created by something else while this command "
                            f"ran; refusing to replace it: choose another path")
        with disk_errors(path):
            write(part)
            os.replace(part, path)
    finally:
        with contextlib.suppress(OSError):
            part.unlink()
        if lock is not None:
            lock.release()
