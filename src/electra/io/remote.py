"""Data where teams keep it: fsspec URLs (``s3://``, ``gs://``, ``az://``, ``hf://``, ...)
wherever electra reads data (``prepare --input``, ``pretrain --data``, the fine-tuning
files) and as ``prepare --out``.

Reading: a URL's file or folder is mirrored into a local cache (``ELECTRA_CACHE``, else
``~/.cache/electra/remote``), one folder per URL, each file fetched to ``NAME.part`` and
renamed when whole, so an interrupted fetch resumes where it stopped and a file whose
store copy has not changed (size and ETag or modification time) is never fetched again; a
prepared folder's mirror is then opened as a local one is (its files' sizes and a sample of
rows checked against its meta.json). The cache is bounded (``ELECTRA_CACHE_GB``, 50 by
default): before a fetch, the mirrors electra made there (their stamps beside them) used
longest ago are removed until the new one fits; nothing else in the folder is.
Processes that mirror the same URL at once (torchrun's ranks) take turns on a lock; the
first fetches, the others find it whole. (Pretraining under ``train.shuffle=blocks`` streams a
prepared folder in blocks instead, each process fetching the blocks its rows are in:
``electra.data.stream``.) Writing: ``prepare --out URL`` prepares into a
local folder, then uploads it, meta.json last (a folder without one is not prepared data).

Credentials and endpoints come from the usual environment of each store (``AWS_PROFILE``,
``AWS_ACCESS_KEY_ID``, ``AWS_ENDPOINT_URL`` for S3-compatible servers, ...); the protocols
need their fsspec packages (``pip install 'electra[remote]'``: s3fs). Every failure is one
line naming the URL and the fix.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import io
import json
import os
import re
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO, cast

from electra import environ
from electra.errors import UserError
from electra.io.files import parse_json

PACKAGES = {"s3": "s3fs", "s3a": "s3fs", "gs": "gcsfs", "gcs": "gcsfs", "az": "adlfs",
            "abfs": "adlfs", "abfss": "adlfs"}


def is_url(path: str | Path | None) -> bool:
    """Whether ``path`` names a store by URL (``file://`` and plain paths are local)."""
    text = str(path or "")
    return "://" in text and not text.startswith("file://")


def open_bytes(path: str | Path, unpack: bool = True) -> BinaryIO:
    """A file's bytes (a gzipped one's unpacked, unless not ``unpack``), from a local path or
    a store's URL (what ``--engine ray``'s tasks read on their nodes)."""
    gz = unpack and str(path).endswith(".gz")
    if is_url(path):
        import fsspec

        f = fsspec.open(str(path), "rb", compression="gzip" if gz else None).open()
        return cast(BinaryIO, f if gz else io.BufferedReader(f, 1 << 20))  # lines split in C
    return cast(BinaryIO, gzip.open(path, "rb") if gz else open(path, "rb"))


def size(path: str | Path) -> int:
    """A local file's or a store's file's size in bytes."""
    if is_url(path):
        fs, inside = filesystem(str(path))
        return int(fs.size(inside))
    return Path(path).stat().st_size


def table_file(path: str | Path, mapped: bool = False) -> Any:
    """What pyarrow opens a Parquet or Arrow file from: a local path (memory-mapped where
    ``mapped``: Arrow's IPC files), a store's file opened for reading."""
    if is_url(path):
        return open_bytes(path, unpack=False)
    if mapped:
        import pyarrow as pa

        return pa.memory_map(str(path))
    return path


def reading(path: str | Path, flag: str) -> contextlib.AbstractContextManager[None]:
    """A store's failure while ``path`` is read, as one line (:func:`reached`); nothing for
    a local path."""
    return reached(str(path), flag) if is_url(path) else contextlib.nullcontext()


def read_guarded(path: str | Path, flag: str, items: Iterator[Any]) -> Iterator[Any]:
    """``items`` (what reading ``path`` yields), each taken under :func:`reading`: a store's
    failure while they are read is one line (only the reading's: what the caller does
    between items is not the store's)."""
    if not is_url(path):
        yield from items
        return
    while True:
        with reached(str(path), flag):
            item = next(items, None)
        if item is None:
            return
        yield item


def check_url(url: str, flag: str) -> None:
    """Refuse a URL whose path has a ``..``, ``.`` or empty part (``s3://b/x/../y``,
    ``s3://b//y``): a store takes them as literal key parts, so such a URL would write keys
    no path can name, or read another folder than it seems to."""
    rest = url.partition("://")[2].rstrip("/")
    if not rest or any(part in ("", ".", "..") for part in rest.split("/")):
        raise UserError(f"{flag} {url}: a store's URL may not have '..', '.' or empty parts "
                        f"('//'): a store would take them as part of the keys; give the "
                        f"folder's own URL, e.g. s3://bucket/corpus")


def check_key(rel: str, url: str, flag: str) -> tuple[str, ...]:
    """The parts of a key found under ``url`` (relative to it), refused in one line where
    they would lead out of the folder it is mirrored to (``..``, ``.``, an empty part, a
    leading ``/``, a NUL)."""
    parts = tuple(rel.split("/"))
    if not rel or "\0" in rel or any(p in ("", ".", "..") for p in parts):
        raise UserError(f"{flag} {url}: the store holds an object whose key {rel!r} has "
                        f"'..', '.' or empty parts, which would be written outside the "
                        f"cache's folder for this URL (nothing was fetched); remove or rename "
                        f"that object in the store")
    return parts


def cache_root() -> Path:
    return Path(environ.get("ELECTRA_CACHE") or Path.home() / ".cache/electra/remote")


@contextlib.contextmanager
def reached(url: str, flag: str) -> Iterator[None]:
    """A store's failures as one line naming ``url`` and the fix (the first of
    :data:`ADVICE` that fits; the stores' own client errors, botocore's and aiohttp's, as a
    failure to retry); a URL with ``..``, ``.`` or empty parts refused first
    (:func:`check_url`)."""
    check_url(url, flag)
    try:
        yield
    except UserError:
        raise
    except Exception as err:
        protocol = url.split("://", 1)[0]
        first = (str(err).strip().splitlines() or [type(err).__name__])[0][:160]
        advice = next((say for kind, say in ADVICE if isinstance(err, kind)), None)
        text = (advice.format(protocol=protocol, package=PACKAGES.get(protocol, "fsspec"))
                if advice else f"the store failed ({type(err).__name__}: {first}); check "
                f"{ENDPOINTS.get(protocol, 'the endpoint')} and the network, then run the "
                f"command again: what was fetched is kept")
        raise UserError(f"{flag} {url}: {text}") from None


# What a store's failure means to the user, by the exception fsspec raises for it.
ADVICE: list[tuple[type[BaseException], str]] = [
    (ImportError, "reading {protocol}:// needs `pip install {package}` (electra[remote])"),
    (FileNotFoundError, "not found (no such bucket, container or object); check the URL"),
    (PermissionError, "access denied; check the store's credentials (AWS_PROFILE, "
                      "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY for s3://)")]


# Where each store's endpoint is set, for a failure to reach it.
ENDPOINTS = {"s3": "the endpoint (AWS_ENDPOINT_URL)", "s3a": "the endpoint (AWS_ENDPOINT_URL)",
             "hf": "the hub's endpoint (HF_ENDPOINT) and HF_HUB_OFFLINE",
             "gs": "the endpoint (STORAGE_EMULATOR_HOST, or Google's)",
             "gcs": "the endpoint (STORAGE_EMULATOR_HOST, or Google's)"}


def filesystem(url: str) -> tuple[Any, str]:
    """fsspec's filesystem for ``url`` and the path inside it."""
    import fsspec

    fs, path = fsspec.core.url_to_fs(url)
    return fs, path


def local(path: str | Path, flag: str) -> Path:
    """``path`` itself, or a URL's file or folder mirrored into the cache. A file is fetched
    again when the store's copy changed (its size or its stamp: ETag, else modification
    time), so a URL prepared anew is not read stale."""
    if not is_url(path):
        return Path(path)
    url = str(path).rstrip("/")
    with reached(url, flag):
        fs, inside = filesystem(url)
        folder = fs.isdir(inside)
        if folder:
            files = fs.find(inside, detail=True)
        elif fs.isfile(inside):
            files = {inside: fs.info(inside)}
        else:
            raise FileNotFoundError(url)
        base = inside if folder else inside.rpartition("/")[0]
        name = inside.rstrip("/").rpartition("/")[2] or "data"
        mirror = cache_root() / f"{hashlib.sha1(url.encode()).hexdigest()[:16]}-{name}"
        keys = {remote: check_key(remote[len(base):].removeprefix("/"), url, flag)
                for remote in files}  # every key checked before anything is fetched
        with _lock(mirror):
            _make_room(mirror, sum(info["size"] for info in files.values()), flag, url)
            stamps_file = _stamps_file(mirror)
            stamps = _read_stamps(stamps_file)
            if not stamps:  # new or damaged: a mirror of electra's from now on
                stamps_file.write_text(json.dumps(stamps))
            for remote, info in sorted(files.items()):
                rel = "/".join(keys[remote])
                target, stamp_now = mirror.joinpath(*keys[remote]), stamp(info)
                if (target.is_file() and target.stat().st_size == info["size"]
                        and stamps.get(rel) == stamp_now):
                    continue  # whole, and the store's copy unchanged: fetched before
                target.parent.mkdir(parents=True, exist_ok=True)
                part = target.with_name(target.name + ".part")
                fs.get_file(remote, str(part))
                part.replace(target)
                stamps[rel] = stamp_now
                stamps_file.write_text(json.dumps(stamps))  # after each: a rerun resumes
            os.utime(mirror)  # the mirror's last use, for the cache's bound
    return mirror if folder else mirror / name


def _stamps_file(mirror: Path) -> Path:
    """``NAME.stamps.json`` beside a mirror: what was fetched, and the mark that says the
    folder is a mirror electra made (the only folders the cache's bound removes)."""
    return mirror.with_name(mirror.name + ".stamps.json")


def _read_stamps(path: Path) -> dict[str, str]:
    """A mirror's stamps; none (every file compared with the store anew) where the file is
    missing or damaged."""
    try:
        found = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return {}
    if not isinstance(found, dict):
        return {}
    return {k: v for k, v in found.items() if isinstance(k, str) and isinstance(v, str)}


def stamp(info: dict[str, Any]) -> str:
    """What says a store's file changed: its ETag, else its modification time, and size."""
    for key in ("ETag", "etag", "LastModified", "mtime", "last_modified"):
        if info.get(key) is not None:
            return f"{info[key]}:{info['size']}"
    return str(info["size"])


def upload(folder: Path, url: str, flag: str, last: str = "meta.json") -> None:
    """A local folder's files to ``url``, ``last`` last (its presence marks a whole one)."""
    url = url.rstrip("/")
    with reached(url, flag):
        fs, inside = filesystem(url)
        files = sorted(p for p in folder.rglob("*") if p.is_file())
        files.sort(key=lambda p: p.name == last)
        for f in files:
            fs.put_file(str(f), f"{inside}/{f.relative_to(folder).as_posix()}")


WRITING = ".electra-writing"  # the object a writer of a URL holds while it writes there


@contextlib.contextmanager
def writing(url: str, flag: str) -> Iterator[None]:
    """One writer per ``url``: ``URL/.electra-writing`` created only where there is none (the
    store's conditional write, fsspec's exclusive mode; a store without one: a check, then
    the write), removed when the writer is done, whether it succeeded or not. Another
    writer's is one line naming it, unless that writer ran on this machine and its process
    is gone (killed): then it is taken over with a note, as a local lock is."""
    import socket
    import time

    url = url.rstrip("/")
    host = socket.gethostname()
    held = json.dumps({"host": host, "pid": os.getpid(),
                       "since": time.strftime("%Y-%m-%d %H:%M:%S %Z")}).encode()
    with reached(url, flag):
        fs, inside = filesystem(f"{url}/{WRITING}")
        for attempt in range(2):
            try:
                _create(fs, inside, held)
                break
            except FileExistsError:
                other = _writer(fs, inside)
                who = (f" (since {other['since']}, {other['host']} process {other['pid']})"
                       if other else "")
                if attempt == 0 and other and other["host"] == host and not _alive(
                        other["pid"]):
                    print(f"electra: note: {url}/{WRITING} was left by a command that no "
                          f"longer runs{who}; taking it over", file=sys.stderr)
                    fs.rm_file(inside)
                    continue
                raise UserError(f"{flag} {url}: another `electra` is writing there{who}; "
                                f"wait for it to end, or, if it is not running any more, "
                                f"delete {url}/{WRITING} and run the command again") from None
    try:
        yield
    finally:
        with reached(url, flag):
            fs.rm_file(inside)


def _create(fs: Any, inside: str, data: bytes) -> None:
    """``inside`` written only where there is none (FileExistsError otherwise)."""
    try:
        with fs.open(inside, "xb") as f:
            f.write(data)
    except (ValueError, NotImplementedError):  # no exclusive mode: check, then write
        if fs.exists(inside):
            raise FileExistsError(inside) from None
        fs.pipe_file(inside, data)


def _writer(fs: Any, inside: str) -> dict[str, Any] | None:
    """Who holds a URL's writer mark (host, pid, since), None where it does not say."""
    try:
        other = json.loads(fs.cat_file(inside)[:1 << 16])
    except Exception:
        return None
    ok = isinstance(other, dict) and isinstance(other.get("host"), str) and isinstance(
        other.get("pid"), int) and "since" in other
    return other if ok else None


def _alive(pid: int) -> bool:
    """Whether a process ``pid`` runs on this machine."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def listing(url: str, flag: str) -> list[str]:
    """The names of the files under ``url`` (relative to it), a writer's object aside."""
    url = url.rstrip("/")
    with reached(url, flag):
        fs, inside = filesystem(url)
        if not fs.isdir(inside):
            return [inside.rpartition("/")[2]] if fs.exists(inside) else []
        return sorted(p[len(inside):].lstrip("/") for p in fs.find(inside)
                      if not p.endswith(f"/{WRITING}"))


def read_json(url: str, flag: str) -> Any:
    """A small JSON object of the store (a folder's mark), or None where it is missing or
    not JSON."""
    with reached(url, flag):
        fs, inside = filesystem(url)
        try:
            return parse_json(fs.cat_file(inside)[:1 << 20].decode("utf-8", "replace"), url)
        except (FileNotFoundError, UserError):
            return None


@contextlib.contextmanager
def _lock(mirror: Path) -> Iterator[None]:
    from filelock import FileLock

    mirror.mkdir(parents=True, exist_ok=True)
    with FileLock(str(mirror) + ".lock"):
        yield


def _make_room(mirror: Path, need: int, flag: str, url: str) -> None:
    """Remove the mirrors used longest ago until ``need`` more bytes fit the bound."""
    bound = environ.get("ELECTRA_CACHE_GB") * 1e9
    if need > bound:
        raise UserError(f"{flag} {url}: {need / 1e9:.1f} GB is more than the cache's bound "
                        f"(ELECTRA_CACHE_GB={bound / 1e9:g}); raise it (pretraining on a "
                        f"prepared folder: or --set train.shuffle=blocks, which streams it in "
                        f"blocks instead of mirroring it whole)")

    def size(folder: Path) -> int:
        return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())

    others = sorted((p for p in mirrors() if p != mirror), key=lambda p: p.stat().st_mtime)
    sizes = {p: size(p) for p in others}
    used = sum(sizes.values())  # the others; this mirror's own files are replaced in place
    from filelock import FileLock, Timeout

    while others and used + need > bound:
        old = others.pop(0)
        held = FileLock(str(old) + ".lock")
        try:
            held.acquire(timeout=0)  # one another process is fetching or reading is kept
        except Timeout:
            continue
        try:
            _stamps_file(old).unlink(missing_ok=True)  # first: no longer a mirror, even if
            shutil.rmtree(old, ignore_errors=True)  # the removal is cut short
        finally:
            held.release()
        used -= sizes[old]


MIRROR_NAME = re.compile(r"[0-9a-f]{16}-.+")


def mirrors() -> list[Path]:
    """The mirrors electra made in the cache: folders named ``HASH-NAME`` with their
    ``.stamps.json`` beside them. Nothing else there (a user's folder, the stream's blocks,
    prepare's staging) is ever removed to make room."""
    root = cache_root()
    if not root.is_dir():
        return []
    return [p for p in root.iterdir() if MIRROR_NAME.fullmatch(p.name) and p.is_dir()
            and not p.is_symlink() and _stamps_file(p).is_file()]
