"""Data where teams keep it: fsspec URLs (``s3://``, ``gs://``, ``az://``, ``hf://``, ...)
wherever electra reads data (``prepare --input``, ``pretrain --data``, the fine-tuning
files) and as ``prepare --out``.

Reading: a URL's file or folder is mirrored into a local cache (``ELECTRA_CACHE``, else
``~/.cache/electra/remote``), one folder per URL, each file fetched to ``NAME.part`` and
renamed when whole, so an interrupted fetch resumes where it stopped and a file whose
store copy has not changed (size and ETag or modification time) is never fetched again; a
prepared folder's mirror is then opened as a local one is (its files' sizes and a sample of
rows checked against its meta.json). The cache is bounded (``ELECTRA_CACHE_GB``, 50 by
default): before a fetch, the mirrors used longest ago are removed until the new one fits.
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
import hashlib
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from electra.errors import UserError

PACKAGES = {"s3": "s3fs", "s3a": "s3fs", "gs": "gcsfs", "gcs": "gcsfs", "az": "adlfs",
            "abfs": "adlfs", "abfss": "adlfs"}


def is_url(path: str | Path | None) -> bool:
    """Whether ``path`` names a store by URL (``file://`` and plain paths are local)."""
    text = str(path or "")
    return "://" in text and not text.startswith("file://")


def cache_root() -> Path:
    return Path(os.environ.get("ELECTRA_CACHE") or Path.home() / ".cache/electra/remote")


@contextlib.contextmanager
def reached(url: str, flag: str) -> Iterator[None]:
    """A store's failures as one line naming ``url`` and the fix (the first of
    :data:`ADVICE` that fits; the stores' own client errors, botocore's and aiohttp's, as a
    failure to retry)."""
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
        with _lock(mirror):
            _make_room(mirror, sum(info["size"] for info in files.values()), flag, url)
            stamps_file = mirror.with_name(mirror.name + ".stamps.json")  # beside it
            stamps = json.loads(stamps_file.read_text()) if stamps_file.is_file() else {}
            for remote, info in sorted(files.items()):
                rel = remote[len(base):].lstrip("/")
                target, stamp_now = mirror / rel, stamp(info)
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


def stamp(info: dict[str, Any]) -> str:
    """What says a store's file changed: its ETag, else its modification time, and size."""
    for key in ("ETag", "etag", "LastModified", "mtime", "last_modified"):
        if info.get(key) is not None:
            return f"{info[key]}:{info['size']}"
    return str(info["size"])


def upload(folder: Path, url: str, flag: str) -> None:
    """A local folder's files to ``url``, meta.json last (its presence marks a whole one)."""
    url = url.rstrip("/")
    with reached(url, flag):
        fs, inside = filesystem(url)
        files = sorted(p for p in folder.rglob("*") if p.is_file())
        files.sort(key=lambda p: p.name == "meta.json")
        for f in files:
            fs.put_file(str(f), f"{inside}/{f.relative_to(folder).as_posix()}")


WRITING = ".electra-writing"  # the object a writer of a URL holds while it writes there


@contextlib.contextmanager
def writing(url: str, flag: str) -> Iterator[None]:
    """One writer per ``url``: ``URL/.electra-writing`` created only where there is none (the
    store's conditional write, fsspec's exclusive mode; a store without one: a check, then
    the write), removed when the writer is done, whether it succeeded or not. Another
    writer's (or one killed before it could remove it) is one line naming it."""
    import socket
    import time

    url = url.rstrip("/")
    held = json.dumps({"host": socket.gethostname(), "pid": os.getpid(),
                       "since": time.strftime("%Y-%m-%d %H:%M:%S %Z")}).encode()
    with reached(url, flag):
        fs, inside = filesystem(f"{url}/{WRITING}")
        try:
            try:
                with fs.open(inside, "xb") as f:
                    f.write(held)
            except (ValueError, NotImplementedError):  # no exclusive mode: check, then write
                if fs.exists(inside):
                    raise FileExistsError(inside) from None
                fs.pipe_file(inside, held)
        except FileExistsError:
            try:
                other = json.loads(fs.cat_file(inside))
                who = f" (since {other['since']}, {other['host']} process {other['pid']})"
            except Exception:
                who = ""
            raise UserError(f"{flag} {url}: another `electra` is writing there{who}; wait for "
                            f"it to end, or, if it is not running any more, delete "
                            f"{url}/{WRITING} and run the command again") from None
    try:
        yield
    finally:
        with reached(url, flag):
            fs.rm_file(inside)


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
            return json.loads(fs.cat_file(inside)[:1 << 20])
        except (FileNotFoundError, ValueError):
            return None


@contextlib.contextmanager
def _lock(mirror: Path) -> Iterator[None]:
    from filelock import FileLock

    mirror.mkdir(parents=True, exist_ok=True)
    with FileLock(str(mirror) + ".lock"):
        yield


def _make_room(mirror: Path, need: int, flag: str, url: str) -> None:
    """Remove the mirrors used longest ago until ``need`` more bytes fit the bound."""
    bound = float(os.environ.get("ELECTRA_CACHE_GB", "50")) * 1e9
    if need > bound:
        raise UserError(f"{flag} {url}: {need / 1e9:.1f} GB is more than the cache's bound "
                        f"(ELECTRA_CACHE_GB={bound / 1e9:g}); raise it (pretraining on a "
                        f"prepared folder: or --set train.shuffle=blocks, which streams it in "
                        f"blocks instead of mirroring it whole)")

    def size(folder: Path) -> int:
        return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())

    others = sorted((p for p in cache_root().iterdir()
                     if p.is_dir() and p not in (mirror, cache_root() / "outgoing")),
                    key=lambda p: p.stat().st_mtime)
    sizes = {p: size(p) for p in others}
    used = sum(sizes.values())  # the others; this mirror's own files are replaced in place
    while others and used + need > bound:
        old = others.pop(0)
        shutil.rmtree(old, ignore_errors=True)
        used -= sizes[old]
