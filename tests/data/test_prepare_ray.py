"""`electra prepare --engine ray` (issue 61): reading, tokenizing, packing and writing on a Ray
cluster (a local one here) in Ray Data passes, the shards byte-identical to the one-process
path's for the same inputs and seed, whatever the pieces the inputs are read in.

The parts it rests on are checked without Ray first: a file's pieces give its lines, and the
chunk ends found from the lines' lengths alone are the one-process chunking's."""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import random
import signal
from pathlib import Path

import numpy as np
import pytest
from helpers import cli_error, default_sigint, sha, write_corpus

from electra.cli import main
from electra.data import prepare_ray
from electra.data.prepare import PrepareOptions, prepare
from electra.data.text import (
    ReadStats,
    chunk_ends,
    chunk_lines,
    iter_lines,
    piece_lines,
    plan_pieces,
)
from electra.errors import UserError


def _messy_text(rng: random.Random, n: int) -> bytes:
    """Lines of every kind a reader meets: blank runs, spaces (ASCII's, Unicode's, the
    separators str.strip() strips), CRLF, characters of 2 to 4 bytes, bad UTF-8, long lines,
    and no newline at the end."""
    out = []
    for _ in range(n):
        kind = rng.random()
        if kind < 0.2:
            out.append(b"")
        elif kind < 0.25:
            out.append(" \t \x0b\x0c\x1c\x1f\u00a0\u2003\u3000".encode())
        elif kind < 0.3:
            out.append(rng.choice(["\u2003caf\u00e9 \u4e2d\U0001f600 \x1e\r".encode(),
                                   b"caf\xc3\xa9 \xff\xfe bad bytes\r"]))
        elif kind < 0.35:
            out.append(b"x" * rng.randint(200, 900))
        else:
            out.append(" ".join("ab" * rng.randint(1, 4) for _ in range(rng.randint(1, 12)))
                       .encode())
    return b"\n".join(out)  # no newline at the end


@pytest.mark.parametrize("kind", ["text", "jsonl", "parquet"])
def test_a_files_pieces_hold_its_lines(tmp_path, kind):
    rng = random.Random(3)
    path = tmp_path / f"c.{'txt' if kind == 'text' else kind}"
    if kind == "text":
        path.write_bytes(_messy_text(rng, 400))
    elif kind == "parquet":  # row groups of 7 records, some empty or None
        import pyarrow as pa
        import pyarrow.parquet as pq

        texts = [None if rng.random() < 0.1 else "\n".join(
            "w" * rng.randint(0, 30) for _ in range(rng.randint(1, 5))) for _ in range(150)]
        pq.write_table(pa.table({"text": texts}), path, row_group_size=7)
    else:
        path.write_text("".join(json.dumps({"text": "\n".join(
            "w" * rng.randint(0, 30) for _ in range(rng.randint(1, 5)))}) + "\n" + (
            "\n" if rng.random() < 0.1 else "") for _ in range(150)))
    whole = list(iter_lines(path, "text", ReadStats()))
    for size in (1, 7, 64, 300, 5000, 10**9):
        pieces = plan_pieces([path], size)
        assert (len(pieces) > 1) == (size < (path.stat().st_size if kind != "parquet" else 7000))
        got = [item for p in pieces for item in piece_lines(p)]
        assert got == whole, size


def test_an_error_in_a_piece_names_the_files_line(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text('{"text": "a"}\n' * 50 + "{not json\n" + '{"text": "b"}\n' * 5)
    with pytest.raises(UserError) as whole:
        list(iter_lines(path, "text", ReadStats()))
    with pytest.raises(UserError) as piece:
        for p in plan_pieces([path], 64):
            list(piece_lines(p))
    assert str(piece.value) == str(whole.value) and f"{path}:51" in str(whole.value)


def _reference_ends(pieces: list[np.ndarray], chunk_bytes: int) -> list[tuple[int, int]]:
    """Where chunk_lines ends its chunks, found by running it on the lines after each end:
    the shortest run of lines it makes one whole chunk of (and as many chunks as it makes of
    all of them)."""
    where = [(k, j) for k, c in enumerate(pieces) for j in range(len(c))]
    lines = [("x" * int(n), 0) for c in pieces for n in c]
    ends, start = [], 0
    for _ in chunk_lines(lines, chunk_bytes):
        end = next(e for e in range(start + 1, len(lines) + 1)
                   if len(list(chunk_lines(lines[start:e] + [("x", 0)] * (e < len(lines)),
                                           chunk_bytes))) == 2 or e == len(lines))
        ends.append(where[end - 1])
        start = end
    return ends


def test_chunk_ends_are_the_chunkings(tmp_path):
    """Random line lengths (blank runs, documents longer than 8 chunks), random pieces
    (empty ones too): the vectorized ends equal the line-by-line chunking's, chunk for
    chunk, and each chunk's lines re-chunked alone give one chunk."""
    rng = np.random.default_rng(0)
    for trial in range(300):
        n = int(rng.integers(0, 300))
        lengths = rng.integers(1, 40, n) * (rng.random(n) > rng.choice([0.05, 0.3, 0.7]))
        cuts = np.sort(rng.integers(0, n + 1, int(rng.integers(0, 6))))
        pieces = np.split(lengths.astype(np.int32), cuts)
        chunk_bytes = int(rng.choice([1, 5, 30, 100, 400]))
        got = list(chunk_ends(pieces, chunk_bytes))
        assert got == _reference_ends(pieces, chunk_bytes), trial
        flat = [("x" * int(v), 0) for v in lengths]
        offsets = np.cumsum([0, *map(len, pieces)])
        start = 0
        for k, j in got:
            end = int(offsets[k]) + j + 1
            assert len(list(chunk_lines(flat[start:end], chunk_bytes))) == 1
            start = end
        assert not any(line for line, _ in flat[start:])


@pytest.mark.slow
def test_prepare_on_ray_writes_the_one_process_shards(s3, tmp_path, capsys, monkeypatch,
                                                      request):
    """Text, gzipped text, JSONL and Parquet inputs, a validation split by fraction and one by file,
    packed rows, a document longer than 8 chunks: on 2 actors, the inputs read in pieces of
    3 kB (a chunk running on into the next piece and the next file) and in the default
    pieces, every shard and meta.json's every count and checksum are the one process's; read
    from an S3 server by the tasks themselves (byte ranges), the same shards. A SIGTERM and an
    input's error end it in one line, nothing written."""
    ray = pytest.importorskip("ray")  # (the tests above need no Ray)
    fsspec = pytest.importorskip("fsspec")
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")  # a local cluster of this test's own
    write_corpus(tmp_path / "c.txt", n_docs=120)
    docs = write_corpus(tmp_path / "d.txt", n_docs=60, seed=1)
    with gzip.open(tmp_path / "d.txt.gz", "wt") as f:
        f.write((tmp_path / "d.txt").read_text())
    (tmp_path / "e.jsonl").write_text("".join(
        json.dumps({"text": "\n".join(d)}) + "\n" for d in docs[:30])
        + json.dumps({"text": " ".join(["abab"] * 5000)}) + "\n")  # 25 kB: 8 chunks
    import pyarrow as pa
    import pyarrow.parquet as pq

    more = write_corpus(tmp_path / "f.txt", n_docs=25, seed=3)
    pq.write_table(pa.table({"text": ["\n".join(d) for d in more]}), tmp_path / "f.parquet",
                   row_group_size=10)
    write_corpus(tmp_path / "v.txt", n_docs=20, seed=2)
    assert main(["tokenizer", "train", "--input", str(tmp_path / "c.txt"), "--vocab-size",
                 "120", "--out", str(tmp_path / "tok")]) == 0
    # SIGTERM (SLURM's, a container's) while the chunks are planned, Ray started by the
    # command: it ends as Ctrl-C does (Ray's own handler, a stack dump, is not left in place).
    def planned(*args):
        os.kill(os.getpid(), signal.SIGTERM)
        yield from real(*args)

    real = prepare_ray.chunk_ends
    monkeypatch.setattr(prepare_ray, "chunk_ends", planned)
    assert main(["prepare", "--input", str(tmp_path / "c.txt"), "--tokenizer",
                 str(tmp_path / "tok"), "--engine", "ray", "--out", str(tmp_path / "t")]) == 143
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "electra: stopped by SIGTERM; nothing was written (--out is as it was); run the "
        "command again")
    assert not ray.is_initialized()
    assert not (tmp_path / "t").exists() and not (tmp_path / "t.partial").exists()
    monkeypatch.setattr(prepare_ray, "chunk_ends", real)
    # One local cluster for the test's runs (a run that finds one uses it, leaves it up).
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)

    def stop_ray() -> None:  # and the process's signal handlers back (ray.init sets its own
        ray.shutdown()       # and leaves them: the worker's later tests would run under them)
        for s, h in handlers.items():
            signal.signal(s, h)

    request.addfinalizer(stop_ray)
    names = ("c.txt", "d.txt.gz", "e.jsonl", "f.parquet")
    inputs = [str(tmp_path / n) for n in names]
    runs = {}
    for out, engine, workers, piece in (("one", "local", 1, None), ("ray", "ray", 2, 3000),
                                        ("ray-val", "ray", 2, None), ("one-val", "local", 1,
                                                                      None)):
        val = ({"val_inputs": [str(tmp_path / "v.txt")]} if out.endswith("val")
               else {"val_fraction": 0.1})
        runs[out] = prepare(PrepareOptions(
            inputs=inputs, tokenizer=str(tmp_path / "tok"), out=str(tmp_path / out),
            seq_len=32, pack=True, engine=engine, workers=workers, chunk_bytes=3000,
            piece_bytes=piece, quiet=True, **val))
    fs = fsspec.filesystem("s3", skip_instance_cache=True)
    for name in names:
        fs.put_file(str(tmp_path / name), f"data/ray/{name}")
    runs["s3"] = prepare(PrepareOptions(
        inputs=["s3://data/ray/"], tokenizer=str(tmp_path / "tok"), out=str(tmp_path / "s3"),
        seq_len=32, pack=True, engine="ray", workers=2, chunk_bytes=3000, piece_bytes=3000,
        quiet=True, val_fraction=0.1))
    assert list(runs["s3"]["inputs"]) == [f"s3://data/ray/{n}" for n in names]
    assert list(runs["s3"]["inputs"].values()) == list(runs["one"]["inputs"].values())
    assert not (Path(s3[1]["ELECTRA_CACHE"]) / "outgoing").exists()  # nothing mirrored
    assert not any(p.name.startswith("c.txt") for p in Path(s3[1]["ELECTRA_CACHE"]).rglob("*"))
    runs["s3"]["inputs"] = runs["one"]["inputs"]
    for a, b in (("one", "ray"), ("one-val", "ray-val"), ("one", "s3")):
        files = sorted(p.relative_to(tmp_path / a) for p in (tmp_path / a).rglob("*.bin"))
        assert {f.parts[0] for f in files} == {"train", "val"}
        assert all(sha(tmp_path / a / f) == sha(tmp_path / b / f) for f in files)
        runs[a].pop("seconds", None), runs[b].pop("seconds", None)
        assert runs[a] == runs[b]
    assert runs["one"]["long_lines_cut"] == 1 and runs["one"]["documents"] > 150
    assert "--input s3://data/none/: not found" in cli_error(
        capsys, "prepare", "--input", "s3://data/none/", "--tokenizer", tmp_path / "tok",
        "--engine", "ray", "--out", tmp_path / "bad")
    assert "--address x:1 names a Ray cluster: add --engine ray" in cli_error(
        capsys, "prepare", "--input", tmp_path / "c.txt", "--tokenizer", tmp_path / "tok",
        "--address", "x:1", "--out", tmp_path / "bad")
    # An input's error, found by a task on the cluster, is the one line the local path gives.
    (tmp_path / "bad.jsonl").write_text('{"text": "a b"}\n' * 30 + "{oops\n")
    err = cli_error(capsys, "prepare", "--input", tmp_path / "bad.jsonl", "--tokenizer",
                    tmp_path / "tok", "--engine", "ray", "--workers", "2", "--out",
                    tmp_path / "bad")
    assert err.startswith("electra: error: ") and f"{tmp_path / 'bad.jsonl'}:31" in err
    assert "Traceback" not in capsys.readouterr().err
    assert not (tmp_path / "bad").exists() and not (tmp_path / "bad.partial").exists()


def _signalled(argv: list[str], sig: int, when: str, group: bool) -> tuple[int, str, list]:
    """`electra ARGV` in a session of its own, sent ``sig`` (to its whole process group, as
    a terminal's Ctrl-C is, where ``group``) as soon as ``when`` holds: ``init`` (its local
    cluster's first process is up: ray.init is running) or ``packing`` (a packing actor
    runs); its exit code, standard error and every process it started (psutil's)."""
    import subprocess
    import time

    psutil = pytest.importorskip("psutil")
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                         start_new_session=True, preexec_fn=default_sigint)
    seen: dict[int, object] = {}
    deadline = time.monotonic() + 120
    while p.poll() is None and time.monotonic() < deadline:
        try:
            kids = psutil.Process(p.pid).children(recursive=True)
        except psutil.Error:
            break
        seen.update({k.pid: k for k in kids})
        names = ""
        for k in kids:
            with contextlib.suppress(psutil.Error):  # (gone, or a zombie)
                names += " ".join(k.cmdline()) + " "
        if (when == "init" and kids) or (when == "packing" and "_Packer" in names):
            (os.killpg(p.pid, sig) if group else p.send_signal(sig))
            break
        time.sleep(0.05)
    else:
        pytest.fail(f"{when} never came (exit {p.poll()})")
    _, err = p.communicate(timeout=120)
    return p.returncode, err, list(seen.values())


@pytest.mark.slow
@pytest.mark.parametrize(("sig", "when", "group"), [
    (signal.SIGTERM, "init", False),  # Ray's handlers: exit 15 and no line; an abort
    (signal.SIGINT, "init", True),  # a half-made core worker: a crash at exit
    (signal.SIGINT, "packing", True),  # a terminal's Ctrl-C: every process of the group
    (signal.SIGTERM, "packing", False),
])
def test_a_signal_at_any_moment_ends_ray_in_one_line_and_leaves_no_process(
        tmp_path, sig, when, group):
    """Ctrl-C or SIGTERM while ray.init runs or while the actors pack: one line, exit 130 or
    143, nothing written (no --out, no .partial), and every process the command's local
    cluster started (raylet, GCS, agents, workers) gone within seconds of its exit; Ray's
    banners kept off the screen."""
    psutil = pytest.importorskip("psutil")
    pytest.importorskip("ray")
    rng = random.Random(0)
    words = [f"w{k}" for k in range(300)]
    with open(tmp_path / "c.txt", "w") as f:  # ~6 MB: some seconds of packing on 2 cores
        for _ in range(30_000):
            f.write(" ".join(rng.choices(words, k=30)) + "\n" + ("\n" if rng.random() < .1
                                                                  else ""))
    assert main(["tokenizer", "train", "--input", str(tmp_path / "c.txt"), "--vocab-size",
                 "400", "--out", str(tmp_path / "tok")]) == 0
    import shutil
    import sys

    electra = [sys.executable, "-m", "electra"] if not shutil.which("electra") else ["electra"]
    argv = [*electra, "prepare", "--input", str(tmp_path / "c.txt"), "--tokenizer",
            str(tmp_path / "tok"), "--engine", "ray", "--workers", "2", "--out",
            str(tmp_path / "out")]
    code, err, started = _signalled(argv, sig, when, group)
    lines = err.strip().splitlines()
    said = ("electra: stopped by SIGTERM" if sig == signal.SIGTERM else
            "electra: interrupted") + "; nothing was written (--out is as it was)"
    assert code == 128 + sig and len(lines) == 1 and lines[0].startswith(said), (code, err)
    assert not (tmp_path / "out").exists() and not (tmp_path / "out.partial").exists()
    assert started  # (the cluster was up)
    _, alive = psutil.wait_procs(started, timeout=5)
    assert not [(q.pid, q.name()) for q in alive if q.is_running()], alive
