"""Text -> packed ``[CLS] A [SEP] B [SEP]`` examples -> memory-mapped token shards.

Packing follows the original ELECTRA ``ExampleBuilder`` (build_pretraining_dataset.py):
sentences of one document accumulate until they reach the target length, then split at a
sentence boundary into segment A (about half, or all of it 10% of the time) and segment B;
5% of examples get a random shorter target length. Unlike the original, a sentence longer
than an example is cut into pieces instead of losing its tail, the last partial example of a
document is kept, sentences never move from B back into A (so both segments are contiguous
text), and tokens beyond the length at the split are counted and reported, or with
``--overflow carry`` start the next example so that none is lost.

On disk (``OUT/``)::

    meta.json            written last: what, from what, how many (format_version 1)
    tokenizer.json       the tokenizer used, so the shards describe themselves
    train/ids.bin        (N, seq_len) uint16 or uint32, [PAD]-filled
    train/segments.bin   (N, 2) uint16: end of segment A (after its [SEP]), total length
    train/word_starts.bin  (N, seq_len / 8) bits: the tokens that begin a word (from the
                         tokenizer's own word ids, any tokenizer algorithm), for whole-word masking
    val/...              the same for the validation split, if any

Work is split into chunks of whole documents whose boundaries depend only on the text, and
each chunk is packed with its own seeded RNG, so the output is identical for any --workers,
and for ``--engine ray`` (:mod:`electra.data.prepare_ray`, the same chunks found on a cluster).
A run writes into ``OUT.partial/`` and renames it at the end: an interrupted run leaves
nothing that loads as complete, and an existing ``OUT`` is replaced only then.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import sys
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from electra.config import MAX_SEED
from electra.data.packing import Packed, init_worker, pack_chunk, shard_rows, token_dtype
from electra.data.prepare_ray import RayEngine
from electra.data.sources import input_files, local_path
from electra.data.text import Chunk, ReadStats, read_chunks
from electra.data.tokenizer import (
    SpecialTokens,
    load_tokenizer,
    save_tokenizer,
    special_names,
    tokenizer_checksum,
)
from electra.errors import UserError
from electra.io import hub
from electra.io.files import sha256_file, staged, write_json
from electra.io.outputs import check_inputs, claim_out, through_store
from electra.io.progress import advance, reporting

if TYPE_CHECKING:
    from tokenizers import Tokenizer  # (the types only: the readers stay light)

MAX_SEQ_LEN = 8192  # ModernBERT's context (the BERT presets hold 512 positions)
OVERFLOW = ("drop", "carry")


@dataclass
class PrepareOptions:
    """What `electra prepare` takes (see its --help)."""

    inputs: list[str]
    tokenizer: str
    out: str
    seq_len: int = 128
    workers: int = 1
    seed: int = 12345
    engine: str = "local"  # local (processes on this machine) | ray (a Ray cluster: Ray Data)
    address: str | None = None  # ray: an existing cluster's address; None: a local one
    piece_bytes: int | None = None  # ray: pieces of inputs (None: about 4 a worker, 1-256 MiB)
    val_inputs: list[str] | None = None
    val_fraction: float | None = None
    overwrite: bool = False
    text_field: str = "text"
    chunk_bytes: int = 1 << 20
    quiet: bool = False
    special_tokens: str | None = None  # cls=<s>,sep=</s>,... (else from the tokenizer)
    overflow: str = "drop"  # tokens past an example at a split: "drop" (the original) or "carry"
    split: str | None = None  # of a datasets folder or a hub dataset
    pack: bool = False  # rows hold several examples side by side (format 2)


# --- the worker side -------------------------------------------------------------------

def _worker(conn: Any, tokenizer_json: str, settings: dict[str, Any]) -> None:
    """A worker process: packs the chunks that arrive on ``conn`` and sends back each
    :class:`Packed` (or the exception that stopped it), in order, until the pipe ends. A
    thread takes the chunks off the pipe as they come, so the parent's send never waits on
    this process's packing while this process waits to send a result (the two multi-MB
    writes would otherwise block each other). Ctrl-C is the parent's to handle (it kills the
    workers), so the workers ignore it instead of each printing a traceback."""
    import queue
    import signal
    import threading

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # (started ignoring it: see _sigint_held)
    init_worker(tokenizer_json, settings)
    inbox: queue.SimpleQueue[Chunk | None] = queue.SimpleQueue()

    def receive() -> None:
        while True:
            try:
                chunk = conn.recv()
            except (EOFError, OSError):
                chunk = None
            inbox.put(chunk)
            if chunk is None:
                return

    threading.Thread(target=receive, daemon=True).start()
    while (chunk := inbox.get()) is not None:
        try:
            result: Any = pack_chunk(chunk)
        except Exception as err:  # the parent raises it (as itself where it pickles)
            import pickle

            try:
                pickle.dumps(err)
                result = _Failed(err)
            except Exception:
                result = _Failed(RuntimeError(f"packing a chunk failed: {err!r}"))
        try:
            conn.send(result)
        except OSError:
            return  # the parent is gone or stopped the workers


@dataclass
class _Failed:
    """What a worker sends back in place of a chunk's :class:`Packed`: the error it raised."""

    error: BaseException


class _Workers:
    """``n`` spawned packing processes, each with its own pipe, run from the main thread.

    The chunks go round-robin, at most ``2 n`` in flight, and come back in their order, so the
    output is the same as one process's. Nothing here runs in a thread of this process: on
    Ctrl-C (or any error) :meth:`close` kills the workers and closes the pipes, and no write
    can be left blocked on a pipe that nobody reads any more (``multiprocessing.Pool`` hung
    there, in ``terminate()``, joining its task thread stuck sending a chunk to killed
    workers). A worker that dies (the kernel's OOM killer) is one line naming it, not a hang."""

    def __init__(self, n: int, tokenizer_json: str, settings: dict[str, Any]) -> None:
        ctx = mp.get_context("spawn")
        self.procs: list[Any] = []
        self.conns: list[Any] = []
        self.pending: deque[int] = deque()
        self.sent = 0
        try:
            with _sigint_held():  # the workers start ignoring Ctrl-C (see _sigint_held)
                for _ in range(n):
                    parent, child = ctx.Pipe()
                    self.conns.append(parent)
                    proc = ctx.Process(target=_worker, args=(child, tokenizer_json, settings),
                                       daemon=True, name="electra-prepare")
                    try:
                        proc.start()
                    finally:
                        child.close()
                    self.procs.append(proc)
        except BaseException:  # the Ctrl-C held back above is raised on leaving it
            self.close()
            raise

    def submit(self, chunk: Chunk) -> None:
        w = self.sent % len(self.procs)
        self.sent += 1
        self._guard(w, lambda: self.conns[w].send(chunk))
        self.pending.append(w)

    def full(self) -> bool:
        return len(self.pending) >= 2 * len(self.procs)

    def next_result(self) -> Packed:
        w = self.pending.popleft()
        result = self._guard(w, self.conns[w].recv)
        if isinstance(result, _Failed):
            raise result.error
        return result

    def _guard(self, w: int, io: Any) -> Any:
        try:
            return io()
        except (EOFError, BrokenPipeError, ConnectionResetError):
            proc = self.procs[w]
            proc.join(5)
            code = proc.exitcode
            how = (f"was killed by signal {-code}, most likely out of memory (the kernel's "
                   f"OOM killer)") if code is not None and code < 0 else (
                f"exited with code {code} (its error, if it printed one, is above)")
            raise UserError(f"a packing worker (--workers {len(self.procs)}) {how}; run again "
                            f"with fewer --workers") from None

    def close(self) -> None:
        for proc in self.procs:
            if proc.is_alive():
                proc.kill()
        for conn in self.conns:
            conn.close()
        for proc in self.procs:
            proc.join()


@contextlib.contextmanager
def _sigint_held() -> Iterator[None]:
    """Ctrl-C held back while the worker processes are started (``Pool()``, which started
    them before, returned in 29 ms for 2 workers, 46 ms for 8, on the 2-core AMD EPYC Zen 4).
    They start with it ignored, which a process started that way keeps, so a Ctrl-C that
    reaches the whole process group while they import (before :func:`_worker` runs) cannot
    print a traceback from each. Here it is blocked as well as ignored: Linux keeps a blocked
    signal pending even while it is ignored, so it is raised once the handler is back, not
    lost."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT}) if hasattr(
        signal, "pthread_sigmask") else None
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)
        if mask is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)


# --- the driver ------------------------------------------------------------------------

class _Writer:
    """Appends one split's arrays to its files and counts what it wrote."""

    def __init__(self, folder: Path, files: tuple[str, ...]) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.folder = folder
        self.files = {name: open(folder / name, "wb") for name in files}  # noqa: SIM115
        self.examples = 0
        self.tokens = 0
        self.sequences = 0

    def write(self, arrays: dict[str, Any], counts: dict[str, int]) -> None:
        """Rows (each shard file's array or bytes, by name, and what they ``counts``)
        appended to this split's files."""
        for name, f in self.files.items():
            f.write(arrays[name])
        self.examples += counts["examples"]
        self.tokens += counts["tokens"]
        self.sequences += counts["sequences"]

    def close(self) -> None:
        for f in self.files.values():
            f.flush()
            os.fsync(f.fileno())
            f.close()


def _prepare_to_store(opt: PrepareOptions) -> dict[str, Any] | None:
    """``--out URL``: prepared into a local folder of the cache, then uploaded, meta.json
    last (``electra.io.outputs.through_store``); None for a local ``--out``."""
    return through_store(opt.out, opt.overwrite, ("data", "prepare"), "meta.json",
                         lambda local: prepare(replace(opt, out=local, overwrite=True)),
                         opt.quiet)


def _check_options(opt: PrepareOptions) -> None:
    if not 8 <= opt.seq_len <= MAX_SEQ_LEN:
        raise UserError(f"--seq-len {opt.seq_len} is out of range; use 8 to {MAX_SEQ_LEN} "
                        f"(ELECTRA uses 128 or 512, the BERT presets' limit; the ModernBERT "
                        f"presets go to {MAX_SEQ_LEN})")
    if opt.overflow not in OVERFLOW:
        raise UserError(f"--overflow {opt.overflow!r}: use one of {', '.join(OVERFLOW)} (drop "
                        f"is the original packing; carry starts the next example with them)")
    if opt.address and opt.engine != "ray":
        raise UserError(f"--address {opt.address} names a Ray cluster: add --engine ray")
    most = 4 * (os.cpu_count() or 1) if opt.engine == "local" else 4096
    if not 1 <= opt.workers <= most:
        raise UserError(f"--workers {opt.workers} must be from 1 to {most} (4 per core of this "
                        f"machine); the output is the same for any count")
    if opt.val_fraction is not None and not 0.0 < opt.val_fraction < 1.0:
        raise UserError(f"--val-fraction {opt.val_fraction} must be between 0 and 1 "
                        f"(for example 0.01)")
    if not 0 <= opt.seed <= MAX_SEED:
        raise UserError(f"--seed {opt.seed} must be from 0 to 2**32-1 (default 12345)")


def _run_split(files: list[Path], split_name: str, opt: PrepareOptions, tok_json: str,
               settings: dict[str, Any], tmp: Path, writers: dict[str, _Writer],
               stats: ReadStats, totals: dict[str, int], engine: Any = None) -> None:
    from electra.data.loader import shard_files  # torch: not in the spawned workers

    settings = {**settings, "split_name": split_name,
                "val_fraction": opt.val_fraction if split_name == "train" else None}

    def write(target: str, arrays: dict[str, Any], counts: dict[str, int]) -> None:
        if target not in writers:
            writers[target] = _Writer(tmp / target, shard_files(opt.pack))
        writers[target].write(arrays, counts)
        advance(counts.get("tokens", 0))  # the command's bar (prepare())

    if engine is not None:  # --engine ray (electra.data.prepare_ray)
        engine.run_split(files, split_name, tok_json, settings, write, stats, totals,
                         opt.text_field, opt.chunk_bytes, opt.split, opt.piece_bytes)
        return
    chunks = read_chunks(files, opt.text_field, opt.chunk_bytes, stats, opt.split)

    def consume(p: Packed) -> None:
        for target, arrays, counts in shard_rows(p, split_name):
            write(target, arrays, counts)
        for key, value in p.counts.items():
            totals[key] = totals.get(key, 0) + value

    if opt.workers == 1:
        init_worker(tok_json, settings)
        for chunk in chunks:
            consume(pack_chunk(chunk))
        return
    # Spawned workers, one tokenizer thread each; at most 2 chunks in flight per worker so
    # memory stays bounded however large the corpus.
    env_before = os.environ.get("TOKENIZERS_PARALLELISM")
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    try:
        _run_chunks(chunks, consume, lambda: _Workers(opt.workers, tok_json, settings))
    finally:
        if env_before is None:
            os.environ.pop("TOKENIZERS_PARALLELISM", None)
        else:
            os.environ["TOKENIZERS_PARALLELISM"] = env_before


def _run_chunks(chunks: Iterator[Chunk], consume: Callable[[Packed], None],
                start: Callable[[], Any]) -> None:
    """Every chunk through the workers ``start()`` makes (:class:`_Workers`), at most 2 in
    flight a worker, the results consumed in the chunks'
    order (so the output is one process's); the workers stopped however it ends."""
    workers = None
    try:
        workers = start()
        for chunk in chunks:
            if workers.full():
                consume(workers.next_result())
            workers.submit(chunk)
        while workers.pending:
            consume(workers.next_result())
    finally:
        if workers is not None:  # done, or a Ctrl-C or an error: stop the workers
            workers.close()


def main(inputs: list[str] | None = None, tokenizer: str | None = None, out: str | None = None,
         seq_len: int = 128, workers: int = 1, seed: int = 12345,
         val_inputs: list[str] | None = None, val_fraction: float | None = None,
         text_field: str = "text", overwrite: bool = False, verify: str | None = None,
         special_tokens: str | None = None, overflow: str = "drop",
         split: str | None = None, pack: bool = False, engine: str = "local",
         address: str | None = None) -> None:
    """`electra prepare` (or `electra prepare --verify DATA`)."""
    if verify is not None:
        verify_data(verify)
        return
    if not (inputs and tokenizer and out):
        raise UserError("electra prepare needs --input, --tokenizer and --out (or --verify "
                        "DATA to check a prepared folder)")
    prepare(PrepareOptions(inputs=inputs, tokenizer=tokenizer, out=out, seq_len=seq_len,
                           workers=workers, seed=seed, val_inputs=val_inputs,
                           val_fraction=val_fraction, text_field=text_field,
                           overwrite=overwrite, special_tokens=special_tokens,
                           overflow=overflow, split=split, pack=pack, engine=engine,
                           address=address))


def prepare(opt: PrepareOptions) -> dict[str, Any]:
    """Run the whole preparation; returns the ``meta.json`` contents. ``opt.tokenizer`` may
    be a hub id (``electra.io.hub``); inputs and ``opt.out`` URLs (``electra.io.remote``):
    the inputs are mirrored into the local cache, a URL's output is prepared locally, then
    uploaded, meta.json last."""
    if opt.tokenizer:
        opt = replace(opt, tokenizer=hub.resolve(opt.tokenizer, "--tokenizer"))
    _check_options(opt)
    check_inputs(opt.out, [*(("--input", i) for i in opt.inputs),
                           *(("--val-input", i) for i in opt.val_inputs or [])])
    if opt.engine == "local":  # Ray's tasks read a store's files themselves, on their nodes
        opt = replace(opt, inputs=[local_path(i, "--input") for i in opt.inputs],
                      val_inputs=[local_path(i, "--val-input") for i in opt.val_inputs]
                      if opt.val_inputs else opt.val_inputs)
    uploaded = _prepare_to_store(opt)
    if uploaded is not None:
        return uploaded
    files = input_files(opt.inputs, "--input", opt.split)
    val_files = input_files(opt.val_inputs, "--val-input", opt.split) if opt.val_inputs else []
    tok = load_tokenizer(opt.tokenizer, opt.special_tokens)
    out = Path(opt.out)
    settings = {"seq_len": opt.seq_len, "special": SpecialTokens.of(tok),
                "dtype": token_dtype(tok.get_vocab_size()).str,
                "seed": opt.seed, "overflow": opt.overflow, "pack": opt.pack}
    inputs = [("--input", p) for p in [*opt.inputs, *files]] + [
        ("--val-input", p) for p in [*(opt.val_inputs or []), *val_files]] + [
        ("--tokenizer", opt.tokenizer)]
    with claim_out(out, "data", "prepare", overwrite=opt.overwrite, inputs=inputs) as claim, \
            staged(out) as tmp:  # OUT.partial, renamed to OUT only when complete
        claim.mark(tmp)
        t0 = time.perf_counter()
        stats = ReadStats()
        writers: dict[str, _Writer] = {}
        totals: dict[str, int] = {}
        try:
            with contextlib.ExitStack() as stack:
                engine = None
                if opt.engine == "ray":
                    engine = stack.enter_context(RayEngine(opt.workers, opt.address))
                stack.enter_context(reporting(None, "prepare: tokens packed", "token",
                                              not opt.quiet))
                _run_split(files, "train", opt, tok.to_str(), settings, tmp, writers, stats,
                           totals, engine)
                if val_files:
                    _run_split(val_files, "val", opt, tok.to_str(), settings, tmp, writers,
                               stats, totals, engine)
        finally:
            for w in writers.values():
                w.close()
        seconds = time.perf_counter() - t0
        if "train" not in writers:
            raise UserError(f"--input {' '.join(opt.inputs)}: no text found (the files are "
                            f"empty or hold only blank lines)")
        meta = _meta(opt, tok, writers, stats, totals, tmp, seconds)
        save_tokenizer(tok, tmp)
        write_json(tmp / "meta.json", meta)
    if not opt.quiet:
        _report(meta, out)
    return meta


def _meta(opt: PrepareOptions, tok: Tokenizer, writers: dict[str, _Writer], stats: ReadStats,
          totals: dict[str, int], tmp: Path, seconds: float) -> dict[str, Any]:
    """``meta.json``: the format, the tokenizer, the splits, each file's checksum, and what
    was read."""
    from electra.data.loader import FORMAT_VERSION, PACKED_FORMAT, shard_files  # (torch)

    vocab_size = tok.get_vocab_size()
    return {
        "format_version": PACKED_FORMAT if opt.pack else FORMAT_VERSION,
        "packed": opt.pack,
        "seq_len": opt.seq_len,
        "dtype": token_dtype(vocab_size).name,
        "vocab_size": vocab_size,
        "tokenizer_sha256": tokenizer_checksum(tok),
        "special_tokens": SpecialTokens.of(tok).to_dict(),
        "special_token_names": special_names(tok),
        "seed": opt.seed,
        "overflow": opt.overflow,
        "splits": {name: {"examples": w.examples, "tokens": w.tokens,
                          "sequences": w.sequences} for name, w in sorted(writers.items())},
        "files": {f"{name}/{file}": {"bytes": (tmp / name / file).stat().st_size,
                                     "sha256": sha256_file(tmp / name / file)}
                  for name in sorted(writers) for file in shard_files(opt.pack)},
        "word_starts": True,
        "inputs": stats.files,
        "documents": stats.docs,
        "bytes": stats.bytes,
        "bad_bytes_replaced": stats.bad_bytes,
        "val_fraction": opt.val_fraction,
        **totals,
        "seconds": round(seconds, 2),
    }


def verify_data(folder: str) -> dict[str, Any]:
    """Check every row of every split, the token counts and the files' checksums against
    meta.json, and the tokenizer against its checksum; print a summary."""
    from electra.data.loader import ShardDataset  # torch: not in the spawned workers

    meta = ShardDataset(folder, "train").meta
    found = {split: ShardDataset(folder, split).verify() for split in meta["splits"]}
    tok = load_tokenizer(Path(folder) / "tokenizer.json")
    if tokenizer_checksum(tok) != meta["tokenizer_sha256"]:
        raise UserError(f"--verify {folder}: tokenizer.json does not match the checksum in "
                        f"meta.json (damaged or replaced); prepare the data again")
    splits = "; ".join(f"{name}: {v['examples']:,} examples, {v['tokens']:,} tokens"
                       for name, v in found.items())
    sums = ("file checksums match" if "files" in meta
            else "no file checksums (prepared by an older electra)")
    print(f"{folder}: ok. {splits}; every token id inside the vocabulary of "
          f"{meta['vocab_size']}, every segment inside its example, {sums}")
    return found


SMALL_VALIDATION = 100  # examples (12,800 tokens at 128): fewer gets a note; the demo has 199


def _report(meta: dict[str, Any], out: Path) -> None:
    mb = meta["bytes"] / 1e6
    s = max(meta["seconds"], 1e-9)
    parts = [f"{name}: " + (f"{v['examples']:,} rows holding {v['sequences']:,} examples"
                            if meta.get("packed") else f"{v['examples']:,} examples")
             + f", {v['tokens']:,} tokens ("
             f"{1 - v['tokens'] / max(1, v['examples'] * meta['seq_len']):.1%} padding)"
             for name, v in meta["splits"].items()]
    print(f"wrote {out}: {'; '.join(parts)} ({mb:.1f} MB in {s:.1f}s, {mb / s:.2f} MB/s, "
          f"{meta['tokens_in'] / s:,.0f} tokens/s)")
    notes = []
    if meta["bad_bytes_replaced"]:
        notes.append(f"{meta['bad_bytes_replaced']:,} bytes that are not UTF-8 were replaced "
                     f"by U+FFFD")
    if meta["long_lines_cut"]:
        notes.append(f"{meta['long_lines_cut']:,} lines longer than an example were cut into "
                     f"pieces")
    if meta["tokens_dropped"]:
        pct = 100 * meta["tokens_dropped"] / max(1, meta["tokens_in"])
        notes.append(f"{meta['tokens_dropped']:,} tokens ({pct:.1f}%) fell beyond the length "
                     f"where examples split, as in the original packing (--overflow carry "
                     f"keeps them)")
    val = meta["splits"].get("val")
    if val and val["examples"] < SMALL_VALIDATION:
        notes.append(f"the validation split holds only {val['examples']:,} examples "
                     f"({val['tokens']:,} tokens): its accuracy is noisy; a larger "
                     f"--val-fraction, or --val-input FILE, gives a steadier one")
    for n in notes:
        print(f"note: {n}", file=sys.stderr)
