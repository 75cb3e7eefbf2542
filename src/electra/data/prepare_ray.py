"""`electra prepare --engine ray`: reading, tokenizing, packing and writing on a Ray cluster,
in two Ray Data passes, the shards byte-identical to one process's.

1. **Read** (tasks): every input cut in pieces (:func:`~electra.data.text.plan_pieces`: byte
   ranges of a text or JSONL file, a Parquet file's row groups; a gzipped or Arrow file
   whole), each piece read by a task that returns its lines' lengths (4 bytes a line) and
   bad bytes, and a whole text file's checksum as it reads it (a file read in pieces, or a
   table, is read once more by a task of its own for its checksum).
2. **Plan** (here, streamed as the pieces come): where each chunk ends
   (:func:`~electra.data.text.chunk_ends`, from the lengths alone, vectorized), so the chunks,
   their indices and seeds are one process's; each chunk given to the piece it begins in.
3. **Pack** (actors, ``--workers`` of them, each with its tokenizer): a piece's task reads
   its chunks' lines again (on past its end for a chunk that runs on), packs them
   (:func:`~electra.data.packing.pack_chunk`) and returns each chunk's rows, the bytes of each
   shard file, through Ray's object store as it is packed (so no filesystem need be shared,
   and a whole gzipped file's rows are never held at once). A gzipped or Arrow file is one
   piece, so one actor packs it: many such files spread over the cluster.
4. **Write** (here): each piece's bytes appended to the split's shard files in the pieces'
   order, as soon as the piece is done (a copy, no decoding).
"""

from __future__ import annotations

import array
import contextlib
import json
import logging
import os
import pickle
import signal
import socket
import threading
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from electra.data.packing import init_worker, pack_chunk, shard_rows
from electra.data.text import (
    Piece,
    ReadStats,
    chunk_ends,
    chunk_lines,
    file_stats,
    hashed_as_read,
    piece_lines,
    plan_pieces,
)
from electra.errors import UserError
from electra.io import remote

HELD = {signal.SIGINT, signal.SIGTERM, signal.SIGUSR1}  # held back while ray.init runs
_HOLDING = False  # whether they are (read in a child just forked)


def _unhold_in_child() -> None:
    """In a process forked while ray.init held the signals (Ray starts its raylet, GCS and
    agents through subprocess, which runs this where a preexec_fn is given, as Ray's is): the
    process would keep them blocked for its whole life, and ray.shutdown's SIGTERM would not
    end it."""
    if _HOLDING:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, HELD)


os.register_at_fork(after_in_child=_unhold_in_child)


@contextlib.contextmanager
def _held() -> Iterator[None]:
    """SIGINT, SIGTERM and SIGUSR1 held while the block (ray.init) runs, then the first that
    came raised as the command's handler raises it (Ctrl-C's KeyboardInterrupt, SIGTERM's
    ``electra.errors.Stopped``), once the handlers are back.

    ray.init takes SIGTERM over twice: a Python handler that exits at once (15, no line, the
    cluster left up) and its C++ core worker's (a stack dump and an abort); a Ctrl-C in the
    middle of it leaves a half-made core worker that crashes the exit, or lands in a
    library's at-fork hook as it forks. So for the block the signals are blocked in this
    thread (the kernel keeps them pending; the threads Ray starts inherit it, and the
    processes it forks unblock them: :func:`_unhold_in_child`), recorded where another
    thread takes one, and Ray's own ``signal.signal`` for them is put off (as Ray's
    ``DeferSigint`` does), the command's handlers staying what they were."""
    global _HOLDING
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    came: list[int] = []
    handlers = {s: signal.getsignal(s) for s in HELD}
    real = signal.signal

    def record(signum: int, frame: Any) -> None:
        came.append(signum)

    def put_off(signum: Any, handler: Any) -> Any:  # signal.signal while the block runs
        if signum in HELD:
            return handlers[signum]
        return real(signum, handler)

    for s in HELD:
        real(s, record)
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, HELD)
    signal.signal, _HOLDING = put_off, True
    try:
        yield
    finally:
        signal.signal, _HOLDING = real, False
        for s, h in handlers.items():
            real(s, h if h is not None else signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)  # pending ones: to the handlers
    if came:
        handler = handlers[came[0]]
        if callable(handler):
            handler(came[0], None)  # the command's: raises Stopped or KeyboardInterrupt
        elif handler == signal.SIG_DFL:
            signal.raise_signal(came[0])


class RayEngine:
    """A Ray cluster for one `electra prepare` (``address``; None: a local one, started here
    and stopped at the end, however the command ends: every process it started, Ray's agents
    included, is gone when the command exits), running each split's passes
    (:meth:`run_split`). Ctrl-C and SIGTERM at any moment, ``ray.init`` included, end the
    command as they end every command (one line, exit 130 or 143)."""

    def __init__(self, workers: int, address: str | None) -> None:
        try:
            import ray
            import ray.data
        except ImportError:
            raise UserError("--engine ray needs Ray Data: pip install 'electra[ray]'") from None
        self.ray, self.workers, self.address = ray, workers, address
        self.started = False
        self.processes: list[Any] = []  # the local cluster's, seen when it started
        self.before: set[int] = set()

    def __enter__(self) -> RayEngine:
        ray = self.ray
        # Ray Data logs a line a pass, and a task's error (raised here as one line) at length;
        # a local cluster's token-authentication notice is Ray's to its own users (the
        # authentication itself stays as Ray sets it)
        logging.getLogger("ray.data").setLevel(logging.CRITICAL)
        logging.getLogger("ray._private.authentication").setLevel(logging.ERROR)
        if ray.is_initialized():
            self._configure()
            return self
        if self.address:
            _answers(self.address)
        self.before = {p.pid for p in _descendants()}  # not the caller's other children
        try:
            self.started = True
            with _held():  # a signal that came while ray.init ran is raised as it ends
                ray.init(address=self.address, include_dashboard=False, log_to_driver=False,
                         configure_logging=False,
                         runtime_env={"env_vars": {"TOKENIZERS_PARALLELISM": "false"}})
            self.processes = self._new() if self.address is None else []
            self._configure()
        except (ConnectionError, RuntimeError, ValueError) as err:
            self.__exit__()
            first = (str(err).strip().splitlines() or ["no answer"])[0][:160]
            raise UserError(f"--engine ray --address {self.address}: no Ray cluster there "
                            f"({first}); start one (ray start --head) or leave --address "
                            f"out for a local one") from None
        except BaseException:  # a stop while ray.init ran: what it started is stopped
            self.__exit__()
            raise
        return self

    def _configure(self) -> None:
        ctx = self.ray.data.DataContext.get_current()
        ctx.execution_options.preserve_order = True  # results in the pieces' order
        ctx.enable_progress_bars = False

    def __exit__(self, *exc: object) -> None:
        """The cluster this command started, stopped: Ray's shutdown, then every process it
        started that is still there (Ray's agents outlive their raylet by up to half a
        minute), asked to end and, after a few seconds, killed."""
        if not self.started:
            return
        self.started = False
        try:
            self.ray.shutdown()
        finally:
            if self.address is None:  # a cluster of this command's own
                _reap(self.processes + self._new())

    def _new(self) -> list[Any]:
        """The processes below this one that were not there before ray.init."""
        return [p for p in _descendants() if p.pid not in self.before]

    def run_split(self, files: list[str | Path], split_name: str, tokenizer_json: str,
                  settings: dict[str, Any], write: Callable[..., None],
                  stats: ReadStats, totals: dict[str, int],
                  text_field: str, chunk_bytes: int, split: str | None,
                  piece_bytes: int | None) -> None:
        """One split's inputs (``files``) read, packed and written (``write(target, arrays,
        counts)``, each chunk's rows in order), ``stats`` and ``totals`` counted, as the
        one-process path does."""
        pieces = plan_pieces(files, piece_bytes, self.workers)
        tasks = self._plan(files, pieces, stats, text_field, chunk_bytes, split)
        if not tasks:
            return
        # 3. Packed on the actors; 4. written here, in the chunks' order.
        with warnings.catch_warnings():  # Ray 2.60 warns of remote arguments given by name
            warnings.simplefilter("ignore")  # (max_restarts), which it will take otherwise
            packed = self._packed(tasks, tokenizer_json, settings, pieces, text_field,
                                  split, chunk_bytes, split_name)

        for row in self._rows(packed):
            done, rows = json.loads(row["done"]), pickle.loads(row["rows"])
            for target, counts in done["written"].items():
                write(target, rows[target], counts)
            for key, value in done["counts"].items():
                totals[key] = totals.get(key, 0) + value
            stats.docs += done["docs"]

    def _plan(self, files: list[str | Path], pieces: list[Piece], stats: ReadStats,
              text_field: str, chunk_bytes: int, split: str | None) -> list[dict[str, Any]]:
        """Passes 1 and 2: the pieces read (``stats``' files, bytes and bad bytes counted),
        the chunks' ends found, and the packing tasks made: each the chunks that begin in a
        piece."""
        ray = self.ray
        # 1. Read: the lines' lengths of each piece, each file's checksum (by the task that
        # reads a whole text file; a task of its own for a file read in pieces or a table).
        file_of = {str(f): i for i, f in enumerate(files)}
        alone = {file_of[p.path] for p in pieces if hashed_as_read(p)}
        items = ([{"kind": "piece", "i": i} for i in range(len(pieces))]
                 + [{"kind": "file", "i": i} for i in range(len(files)) if i not in alone])
        read = ray.data.from_items(items, override_num_blocks=len(items)).map(
            _read, fn_kwargs={"pieces": pieces, "files": [str(f) for f in files],
                              "text_field": text_field, "split": split}, num_cpus=1)
        found: dict[int, dict[str, Any]] = {}
        lines: list[int] = []  # each piece's count of lines
        rows = self._rows(read)

        def lengths() -> Iterator[np.ndarray]:  # streamed: a piece's lengths, then dropped
            for row in rows:
                if row["kind"] == "file":
                    found[row["i"]] = json.loads(row["stats"])
                    continue
                lines.append(len(row["lengths"]) // 4)
                stats.bad_bytes += int(row["bad"])
                if row["stats"]:  # a whole text file's checksum, taken as it was read
                    found[file_of[pieces[row["i"]].path]] = json.loads(row["stats"])
                yield np.frombuffer(row["lengths"], dtype=np.int32)

        # 2. Plan: every chunk's end, each chunk given to the piece it begins in.
        tasks: list[dict[str, Any]] = []
        start = (0, 0)
        for index, end in enumerate(chunk_ends(lengths(), chunk_bytes)):
            while start[1] >= lines[start[0]]:  # past a piece's last line
                start = (start[0] + 1, 0)
            if not tasks or tasks[-1]["piece"] != start[0]:
                tasks.append({"piece": start[0], "skip": start[1], "index": index,
                              "ends": []})
            tasks[-1]["ends"].append(end)
            start = (end[0], end[1] + 1)
        for i, f in enumerate(files):
            stats.files[str(f)] = found[i]
            stats.bytes += int(found[i].get("bytes", 0))
        return tasks

    def _packed(self, tasks: list[dict[str, Any]], tokenizer_json: str,
                settings: dict[str, Any], pieces: list[Piece], text_field: str,
                split: str | None, chunk_bytes: int, split_name: str) -> Any:
        """Pass 3's dataset: each task's chunks packed by an actor, their rows' bytes."""
        ray = self.ray
        return ray.data.from_items(
            [{"task": json.dumps(t)} for t in tasks], override_num_blocks=len(tasks)
        ).map_batches(
            _Packer, batch_size=1, num_cpus=1,
            compute=ray.data.ActorPoolStrategy(size=min(self.workers, len(tasks))),
            fn_constructor_kwargs={
                "tokenizer_json": tokenizer_json, "settings": settings, "pieces": pieces,
                "text_field": text_field, "split": split, "chunk_bytes": chunk_bytes,
                "split_name": split_name},
            max_restarts=0)  # an actor lost is one line (RayActorError), not a restart

    def _rows(self, dataset: Any) -> Iterator[dict[str, Any]]:
        """A dataset's rows in order; a task's error of the inputs (its row's ``error``)
        raised as a :class:`UserError`, an actor lost as one line."""
        ray = self.ray
        try:
            for row in dataset.iter_rows():
                if row["error"]:
                    raise UserError(row["error"])
                yield row
        except UserError:
            raise
        except Exception as err:  # Ray Data wraps an actor lost in kinds by version
            seen: list[BaseException] = [err]
            visited: set[int] = set()
            while seen:
                cause = seen.pop()
                if id(cause) in visited:
                    continue
                visited.add(id(cause))
                if isinstance(cause, ray.exceptions.RayActorError):
                    raise UserError(f"a Ray packing actor (--workers {self.workers}) died, "
                                    f"most likely out of memory; run again with fewer "
                                    f"--workers") from None
                seen += [c for c in (getattr(cause, "cause", None), cause.__cause__,
                                     cause.__context__) if isinstance(c, BaseException)]
            raise


def _descendants() -> list[Any]:
    """This process's children and theirs (psutil's processes): a local cluster's raylet,
    GCS, agents and workers; [] without psutil."""
    try:
        import psutil
    except ImportError:
        return []
    try:
        return psutil.Process().children(recursive=True)
    except psutil.Error:
        return []


def _reap(processes: list[Any], grace: float = 3.0) -> None:
    """``processes`` (those ray.shutdown left) asked to end, and those still running after
    ``grace`` seconds killed."""
    if not processes:
        return
    import psutil

    for p in processes:
        with contextlib.suppress(psutil.Error):
            p.terminate()
    _, alive = psutil.wait_procs(processes, timeout=grace)
    for p in alive:
        with contextlib.suppress(psutil.Error):
            p.kill()


def _answers(address: str) -> None:
    """Refuse an ``--address`` where nothing answers (ray.init retries one for minutes,
    logging as it goes): ``HOST:PORT`` or ``ray://HOST:PORT`` tried once, 5 s at most;
    ``auto`` and other forms left to Ray."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not (host and port.isdigit()):
        return
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
    except OSError as err:
        raise UserError(f"--engine ray --address {address}: nothing answers there "
                        f"({err.strerror or err}); start a cluster there (ray start --head), "
                        f"or leave --address out for a local one") from None


def _read(row: dict[str, Any], pieces: list[Piece], files: list[str], text_field: str,
          split: str | None) -> dict[str, Any]:
    """Pass 1, a task: a piece's lines' lengths (characters, 0 for a blank line) and bad
    bytes, or a file's checksum; an input's :class:`UserError` as the row's ``error``
    (raised again where the rows are read: Ray Data keeps only its text)."""
    try:
        return {**_read_one(row, pieces, files, text_field, split), "error": ""}
    except UserError as err:
        return {"error": str(err)}


def _read_one(row: dict[str, Any], pieces: list[Piece], files: list[str], text_field: str,
              split: str | None) -> dict[str, Any]:
    if row["kind"] == "file":
        with remote.reading(files[row["i"]], "--input"):
            return {**row, "lengths": b"", "bad": 0,
                    "stats": json.dumps(file_stats(files[row["i"]], split))}
    piece = pieces[row["i"]]
    lengths, bad = array.array("i"), 0  # 4 bytes a line
    stats = ReadStats() if hashed_as_read(piece) else None
    for line, b in _lines(piece, text_field, split, stats):
        lengths.append(len(line))
        bad += b
    return {**row, "lengths": lengths.tobytes(), "bad": bad,
            "stats": json.dumps(stats.files[piece.path]) if stats else ""}


def _lines(piece: Piece, text_field: str, split: str | None,
           stats: ReadStats | None = None) -> Iterator[tuple[str, int]]:
    """:func:`piece_lines`, a store's failure while reading them one line."""
    return remote.read_guarded(piece.path, "--input",
                               piece_lines(piece, text_field, split, stats))


class _Packer:
    """Pass 3, an actor with its own tokenizer: the chunks that begin in a piece, read and
    packed, each chunk's rows returned as a row of the dataset."""

    def __init__(self, tokenizer_json: str, settings: dict[str, Any], pieces: list[Piece],
                 text_field: str, split: str | None, chunk_bytes: int,
                 split_name: str) -> None:
        init_worker(tokenizer_json, settings)
        self.pieces, self.text_field, self.split = pieces, text_field, split
        self.chunk_bytes, self.split_name = chunk_bytes, split_name

    def __call__(self, batch: dict[str, Any]) -> Iterator[dict[str, list[Any]]]:
        """A row a chunk, as each is packed (so a whole gzipped file's rows are never held
        at once); an input's :class:`UserError` as a last row's ``error``."""
        try:
            for row in self._pack(json.loads(batch["task"][0])):
                yield {key: [value] for key, value in {**row, "error": ""}.items()}
        except UserError as err:
            yield {"done": [""], "rows": [b""], "error": [str(err)]}

    def _pack(self, task: dict[str, Any]) -> Iterator[dict[str, Any]]:
        for i, lines in enumerate(self._chunks(task)):
            chunks = list(chunk_lines(lines, self.chunk_bytes, index=task["index"] + i))
            if len(chunks) != 1:  # the plan and the lines disagree: a bug, not an input
                raise RuntimeError(f"chunk {task['index'] + i}: {len(chunks)} chunks where "
                                   f"the plan has 1")
            p = pack_chunk(chunks[0])
            arrays: dict[str, dict[str, bytes]] = {}
            written: dict[str, dict[str, int]] = {}
            for target, rows, counts in shard_rows(p, self.split_name):
                arrays[target] = {f: a.tobytes() for f, a in rows.items()}
                written[target] = counts
            yield {"done": json.dumps({"written": written, "counts": p.counts,
                                       "docs": chunks[0].n_docs}),
                   "rows": pickle.dumps(arrays)}

    def _chunks(self, task: dict[str, Any]) -> Iterator[list[tuple[str, int]]]:
        """The lines of each chunk of ``task``: from line ``skip`` of its piece to each of its
        ``ends`` in turn, reading on into the pieces after."""
        ends = [tuple(e) for e in task["ends"]]
        lines: list[tuple[str, int]] = []
        k = task["piece"]
        while ends:
            for j, item in enumerate(_lines(self.pieces[k], self.text_field, self.split)):
                if k == task["piece"] and j < task["skip"]:
                    continue
                lines.append(item)
                if (k, j) == ends[0]:
                    yield lines
                    lines = []
                    ends.pop(0)
                    if not ends:
                        return
            k += 1
