"""Data in object storage (issue 61, ``electra.io.remote``), against a real S3-protocol server
the tests start on a free port (moto's): prepare reads and writes ``s3://`` URLs, pretraining
reads shards from one (mirrored into a bounded local cache) bit for bit as from the local
folder, fine-tuning reads its files from one; a missing bucket is one line; a connection
dropped while a shard comes down is one line, keeps what came, and a rerun goes on."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from helpers import cli_error, snapshot, write_corpus, write_sentiment

from electra.cli import main
from electra.data.loader import ShardDataset
from electra.train.metrics import TIMING_KEYS, iter_metrics

moto_server = pytest.importorskip("moto.server")
fsspec = pytest.importorskip("fsspec")
pytest.importorskip("s3fs")


def store() -> object:
    return fsspec.filesystem("s3", skip_instance_cache=True)


def test_prepare_and_pretrain_through_the_store_as_from_a_folder(s3, tmp_path, capsys):
    write_corpus(tmp_path / "c.txt", n_docs=80)
    assert main(["tokenizer", "train", "--input", str(tmp_path / "c.txt"), "--vocab-size",
                 "120", "--out", str(tmp_path / "tok")]) == 0
    store().put_file(str(tmp_path / "c.txt"), "data/corpus/c.txt")
    common = ["--tokenizer", str(tmp_path / "tok"), "--seq-len", "32", "--val-fraction", "0.2"]
    assert main(["prepare", "--input", "s3://data/corpus", *common, "--out",
                 "s3://data/shards"]) == 0
    assert main(["prepare", "--input", str(tmp_path / "c.txt"), *common, "--out",
                 str(tmp_path / "local")]) == 0
    # The uploaded folder is the local one, file for file (meta.json aside: it names its
    # inputs' paths).
    fs = store()
    for f in (tmp_path / "local").rglob("*"):
        if f.is_file() and f.name != "meta.json":
            rel = f.relative_to(tmp_path / "local").as_posix()
            assert fs.cat(f"data/shards/{rel}") == f.read_bytes(), rel
    assert "--out s3://data/shards already holds something" in cli_error(
        capsys, "prepare", "--input", "s3://data/corpus", *common, "--out", "s3://data/shards")
    # --overwrite replaces a prepared folder only: a URL of other files is left as it was.
    fs.pipe("data/notes/todo.txt", b"a user's notes")
    assert "holds files `electra prepare` did not write" in cli_error(
        capsys, "prepare", "--input", "s3://data/corpus", *common, "--out", "s3://data/notes",
        "--overwrite")
    assert fs.ls("data/notes") == ["data/notes/todo.txt"]
    assert fs.cat("data/notes/todo.txt") == b"a user's notes"

    def pretrain(data: str, out: Path, *more: str) -> int:
        return main(["pretrain", "--preset", "tiny", "--data", data, "--out", str(out),
                     "--quiet", "--set", "model.num_layers=1", "--set", "train.batch_size=8",
                     "--set", "train.max_steps=4", "--set", "train.save_every=2", "--set",
                     "train.log_every=1", "--set", "train.eval_every=2", "--set",
                     "train.precision=fp32", *more])

    assert pretrain(str(tmp_path / "local"), tmp_path / "a") == 0
    assert pretrain("s3://data/shards", tmp_path / "b", "--stop-after", "2") == 0
    assert pretrain("s3://data/shards", tmp_path / "b", "--resume") == 0

    def lines(run: Path) -> list[dict]:
        return [{k: v for k, v in r.items() if k not in TIMING_KEYS} for r in iter_metrics(run)]

    assert lines(tmp_path / "a") == lines(tmp_path / "b")


def test_fine_tuning_reads_its_files_from_the_store(s3, tmp_path):
    write_sentiment(tmp_path / "train.csv", 40, 0)
    write_sentiment(tmp_path / "dev.csv", 20, 1)
    for name in ("train.csv", "dev.csv"):
        store().put_file(str(tmp_path / name), f"data/task/{name}")
    write_corpus(tmp_path / "c.txt")
    assert main(["tokenizer", "train", "--input", str(tmp_path / "train.csv"), "--vocab-size",
                 "100", "--out", str(tmp_path / "tok")]) == 0
    assert main(["finetune", "--random-init", "tiny", "--tokenizer", str(tmp_path / "tok"),
                 "--task", "custom", "--train", "s3://data/task/train.csv", "--dev",
                 "s3://data/task/dev.csv", "--out", str(tmp_path / "ft"), "--quiet", "--set",
                 "epochs=1", "--set", "precision=fp32"]) == 0
    results = json.loads((tmp_path / "ft/results.json").read_text())
    assert set(results["seeds"]["1"]["dev"]) == {"accuracy"}


def test_a_missing_bucket_or_a_dropped_connection_is_one_line_and_a_rerun_goes_on(
        s3, tmp_path, capsys, monkeypatch):
    server, env = s3
    before = snapshot(tmp_path)
    err = cli_error(capsys, "pretrain", "--preset", "tiny", "--data", "s3://nobucket/shards",
                    "--out", tmp_path / "r")
    assert "--data s3://nobucket/shards: not found (no such bucket" in err
    assert snapshot(tmp_path) == before
    # A folder of three files; the server goes away after the first came down.
    fs = store()
    for k in range(3):
        fs.pipe(f"data/big/part-{k}.bin", bytes([k]) * 100_000)
    from electra.io import remote

    real, calls = remote.filesystem, []

    def dropping(url):
        fs, inside = real(url)
        get = fs.get_file

        def get_file(rpath, lpath, **kw):
            calls.append(rpath)
            if len(calls) == 2:
                server.stop()  # the connection drops while the second file comes down
            return get(rpath, lpath, **kw)

        fs.get_file = get_file
        return fs, inside

    monkeypatch.setattr(remote, "filesystem", dropping)
    with pytest.raises(Exception) as caught:
        remote.local("s3://data/big", "--data")
    assert "the store failed" in str(caught.value) and "run the command again" in str(
        caught.value)
    mirror = next(p for p in Path(env["ELECTRA_CACHE"]).iterdir() if p.name.endswith("-big"))
    assert (mirror / "part-0.bin").stat().st_size == 100_000  # kept
    port = int(env["AWS_ENDPOINT_URL"].rpartition(":")[2])
    back = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    back.start()  # the same port, the same state (moto's, in this process): the store is back
    monkeypatch.setattr(remote, "filesystem", real)
    fetched = []
    monkeypatch.setattr(remote, "filesystem", lambda url: _counting(real(url), fetched))
    got = remote.local("s3://data/big", "--data")
    assert sorted(p.name for p in got.iterdir()) == [f"part-{k}.bin" for k in range(3)]
    assert [r.rpartition("/")[2] for r in fetched] == ["part-1.bin", "part-2.bin"]  # resumed
    # The store's copy rewritten with the same size: fetched again, not read stale.
    fetched.clear()
    fs.pipe("data/big/part-2.bin", bytes([9]) * 100_000)
    got = remote.local("s3://data/big", "--data")
    # (the store's client is one cached instance, wrapped twice by now: a name per wrapper)
    assert {r.rpartition("/")[2] for r in fetched} == {"part-2.bin"}
    assert (got / "part-2.bin").read_bytes() == bytes([9]) * 100_000
    # (the server stays up for this worker's later tests; its thread ends with the process)


def _counting(pair, fetched):
    fs, inside = pair
    get = fs.get_file

    def get_file(rpath, lpath, **kw):
        fetched.append(rpath)
        return get(rpath, lpath, **kw)

    fs.get_file = get_file
    return fs, inside


def test_credentials_the_store_refuses_are_one_line_and_a_rerun_with_good_ones_goes_on(
        s3, tmp_path, capsys):
    """The server checks each request's key (moto's IAM authentication): a key it does not
    know is refused, which is one line naming the credentials, exit 2, nothing written; the
    same command with credentials it takes then prepares the data."""
    import s3fs
    from moto.core.authorization import enable_iam_authentication

    write_corpus(tmp_path / "c.txt", n_docs=20)
    assert main(["tokenizer", "train", "--input", str(tmp_path / "c.txt"), "--vocab-size",
                 "100", "--out", str(tmp_path / "tok")]) == 0
    store().put_file(str(tmp_path / "c.txt"), "data/creds/c.txt")
    argv = ["prepare", "--input", "s3://data/creds/c.txt", "--tokenizer",
            str(tmp_path / "tok"), "--seq-len", "32", "--out", str(tmp_path / "p")]
    before = snapshot(tmp_path)
    s3fs.S3FileSystem.clear_instance_cache()  # a client made now, with the key checked
    try:
        with enable_iam_authentication():
            err = cli_error(capsys, *argv)
    finally:
        s3fs.S3FileSystem.clear_instance_cache()
    assert err.startswith("electra: error: --input s3://data/creds/c.txt: access denied; "
                          "check the store's credentials"), err
    assert snapshot(tmp_path) == before
    assert main(argv) == 0 and (tmp_path / "p/meta.json").is_file()


def test_a_hub_dataset_url_that_cannot_be_reached_is_one_line(tmp_path, capsys, monkeypatch):
    """hf://datasets/... through huggingface_hub's filesystem: a hub that does not answer
    (here an endpoint nothing listens on) is one line naming the hub's settings."""
    pytest.importorskip("huggingface_hub")
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    write_corpus(tmp_path / "c.txt", n_docs=4)
    assert main(["tokenizer", "train", "--input", str(tmp_path / "c.txt"), "--vocab-size",
                 "80", "--out", str(tmp_path / "tok")]) == 0
    before = snapshot(tmp_path)
    err = cli_error(capsys, "prepare", "--input", "hf://datasets/org/name/train.txt",
                    "--tokenizer", tmp_path / "tok", "--out", tmp_path / "p")
    assert "--input hf://datasets/org/name/train.txt: the store failed" in err
    assert "HF_ENDPOINT" in err
    assert snapshot(tmp_path) == before


def _upload(folder: Path, prefix: str) -> None:
    fs = store()
    for f in sorted(folder.rglob("*")):
        if f.is_file():
            fs.put_file(str(f), f"{prefix}/{f.relative_to(folder).as_posix()}")


STREAM = ("--set", "train.shuffle=blocks", "--set", "train.shuffle_block=16", "--set",
          "train.shuffle_window=2")


def test_streamed_shards_train_as_the_local_folder_through_a_bounded_cache(
        s3, letters_data, tmp_path, monkeypatch):
    """``train.shuffle=blocks`` on a URL: no mirror of the folder, blocks fetched as batches
    need them into a cache that never holds more than its bound (a fraction of the data),
    and the run (stopped and resumed on the way) is the local folder's, line for line."""
    from electra.data import stream

    _upload(letters_data, "data/streamed")
    train = letters_data / "train"
    whole = sum(f.stat().st_size for f in train.iterdir() if f.name in ("ids.bin",
                                                                         "segments.bin"))
    bound = whole / 3
    monkeypatch.setenv("ELECTRA_CACHE_GB", str(bound / 1e9))
    most = []
    trim = stream.BlockCache._trim

    def measured(self, keep):
        trim(self, keep)
        most.append(self.size())

    monkeypatch.setattr(stream.BlockCache, "_trim", measured)

    def pretrain(data: str, out: Path, *more: str) -> int:
        return main(["pretrain", "--preset", "tiny", "--data", data, "--out", str(out),
                     "--quiet", "--set", "model.num_layers=1", "--set", "train.batch_size=8",
                     "--set", "train.max_steps=12", "--set", "train.save_every=4", "--set",
                     "train.log_every=1", "--set", "train.eval_every=4", "--set",
                     "train.eval_batches=2", "--set", "train.precision=fp32", *STREAM, *more])

    assert pretrain(str(letters_data), tmp_path / "a") == 0
    assert pretrain("s3://data/streamed", tmp_path / "b", "--stop-after", "4") == 0
    assert pretrain("s3://data/streamed", tmp_path / "b", "--resume") == 0

    def lines(run: Path) -> list[dict]:
        return [{k: v for k, v in r.items() if k not in TIMING_KEYS} for r in iter_metrics(run)]

    assert lines(tmp_path / "a") == lines(tmp_path / "b")
    assert most and max(most) <= bound  # never more than the bound held
    cache = Path(os.environ["ELECTRA_CACHE"])
    assert not any(p.name.endswith("-streamed") for p in cache.iterdir())  # no mirror
    assert any(p.name.startswith("stream") for p in cache.iterdir())


def test_each_process_fetches_only_its_parts_blocks_and_a_dropped_connection_resumes(
        s3, letters_data, monkeypatch):
    """With two processes and two parts, each fetches the blocks of its own part alone (and
    not all of them); the connection dropped while blocks come down is one line, the blocks
    that came are kept, and reading again fetches only the rest."""
    from electra.data.loader import BatchLoader, Blocks, block_order
    from electra.data.stream import StreamedShards

    _upload(letters_data, "data/parts")
    blocks = Blocks(rows=16, window=2, parts=2)
    opened = []
    for rank in (0, 1):
        monkeypatch.setenv("RANK", str(rank))
        opened.append(StreamedShards("s3://data/parts", block_rows=16))
    n = len(opened[0])
    for rank, data in enumerate(opened):
        loader = BatchLoader(data, 4, seed=2, rank=rank, world_size=2, blocks=blocks)
        for _ in range(n // 8 // 2):  # half the epoch
            next(loader)
    order = block_order(n, 2, 0, blocks)
    checked = {0, (n - 16) // 16, (n - 1) // 16}  # the first and last rows' blocks: read
    fetched = [{b for rel, b in d.fetched if rel == "train/ids.bin"} - checked  # when opened
               for d in opened]
    for rank in (0, 1):
        own = set((order[rank] // 16).tolist())
        assert fetched[rank] and fetched[rank] <= own
        assert len(fetched[rank]) < len(own)  # half an epoch: half its blocks, no more
    assert fetched[0].isdisjoint(fetched[1])

    # The connection drops while the second of a batch's reads comes down (a server of this
    # test's own, on the store's state: the module's may have been replaced by now).
    import s3fs

    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://{host}:{port}")
    s3fs.S3FileSystem.clear_instance_cache()  # a client for this endpoint
    monkeypatch.setenv("RANK", "5")
    data = StreamedShards("s3://data/parts", block_rows=16)
    fs, calls = data.fs, []
    real = fs.cat_ranges

    def dropping(paths, starts, ends, **kw):
        calls.append(len(paths))
        if len(calls) == 2:
            server.stop()
        return real(paths, starts, ends, **kw)

    monkeypatch.setattr(fs, "cat_ranges", dropping)
    rows = np.arange(16, n - 16)
    with pytest.raises(Exception) as caught:
        for k in range(0, len(rows), 16):
            data.batch(rows[k:k + 16])
    assert "the store failed" in str(caught.value) and "run the command again" in str(
        caught.value)
    kept = set(data.fetched)
    assert kept
    back = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    back.start()  # the same port, the same state: the store is back
    monkeypatch.setattr(fs, "cat_ranges", real)
    again = StreamedShards("s3://data/parts", block_rows=16)
    got = again.batch(rows)
    back.stop()
    s3fs.S3FileSystem.clear_instance_cache()  # (the module's endpoint again, after)
    assert not kept & set(again.fetched)  # what came before is not fetched again
    local = ShardDataset(letters_data).batch(rows)
    assert all(got[k].equal(local[k]) for k in local)
    # Slices and single rows (a counting pass over the split reads slices) as a memmap's.
    mapped = ShardDataset(letters_data)
    assert np.array_equal(again.ids[5:37], mapped.ids[5:37])
    assert np.array_equal(again.ids[-1], mapped.ids[-1])
    assert np.array_equal(again.segments[3:9, 1], mapped.segments[3:9, 1])


def test_a_hub_dataset_is_read_as_a_store_is(letters_data, tmp_path, monkeypatch):
    """``hf://datasets/ORG/NAME/...`` read through huggingface_hub's filesystem from a hub
    answering its HTTP API on this machine (tests/fake_hub.py; the real one is out of
    reach): prepare reads its text as from the local file, byte for byte the same shards,
    and pretraining streams its prepared folder as the local one trains."""
    huggingface_hub = pytest.importorskip("huggingface_hub")
    import fake_hub
    from huggingface_hub import HfFileSystem

    write_corpus(tmp_path / "c.txt", n_docs=40)
    files = {"text/c.txt": (tmp_path / "c.txt").read_bytes()}
    files |= {f"shards/{f.relative_to(letters_data).as_posix()}": f.read_bytes()
              for f in letters_data.rglob("*") if f.is_file()}
    endpoint, server = fake_hub.start("org/corpus", files)
    monkeypatch.setenv("HF_ENDPOINT", endpoint)
    monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", endpoint)  # (read at import)
    monkeypatch.setattr(huggingface_hub.constants, "HUGGINGFACE_CO_URL_TEMPLATE",
                        endpoint + "/{repo_id}/resolve/{revision}/{filename}")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("ELECTRA_CACHE", str(tmp_path / "cache"))
    HfFileSystem.clear_instance_cache()
    try:
        tok = letters_data.parent / "tok"
        for source, out in (("hf://datasets/org/corpus/text", "hub"),
                            (str(tmp_path / "c.txt"), "local")):
            assert main(["prepare", "--input", source, "--tokenizer", str(tok), "--seq-len",
                         "32", "--out", str(tmp_path / out)]) == 0
        for f in (tmp_path / "local").rglob("*"):
            if f.is_file() and f.name != "meta.json":
                assert (tmp_path / "hub" / f.relative_to(tmp_path / "local")).read_bytes() \
                    == f.read_bytes()

        def pretrain(data: str, out: str) -> None:
            assert main(["pretrain", "--preset", "tiny", "--data", data, "--out",
                         str(tmp_path / out), "--quiet", "--set", "model.num_layers=1",
                         "--set", "train.batch_size=8", "--set", "train.max_steps=3",
                         "--set", "train.log_every=1", "--set", "train.eval_every=0",
                         "--set", "train.precision=fp32", *STREAM]) == 0

        pretrain(str(letters_data), "a")
        pretrain("hf://datasets/org/corpus/shards", "b")
        a, b = ([{k: v for k, v in r.items() if k not in TIMING_KEYS}
                 for r in iter_metrics(tmp_path / run)] for run in ("a", "b"))
        assert a == b
    finally:
        server.shutdown()
        HfFileSystem.clear_instance_cache()


def test_a_connection_dropped_mid_run_is_one_line_and_resume_goes_on_bit_for_bit(
        s3, letters_data, tmp_path, monkeypatch, capsys):
    """A streamed run whose store goes away at its fifth block fetch: one line, exit 2,
    the checkpoints it wrote kept; `--resume` once the store is back ends where an
    uninterrupted local run ends, line for line."""
    import s3fs

    from electra.io import remote

    _upload(letters_data, "data/dropped")
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()  # this test's own (the module's may have been replaced by now)
    host, port = server.get_host_and_port()
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://{host}:{port}")
    monkeypatch.setenv("ELECTRA_CACHE", str(tmp_path / "cache"))
    s3fs.S3FileSystem.clear_instance_cache()
    real, calls = remote.filesystem, []

    def dropping(url):
        fs, inside = real(url)
        if not getattr(fs, "_wrapped", False):
            ranges = fs.cat_ranges

            def cat_ranges(*args, **kw):
                calls.append(1)
                if len(calls) == 5:
                    server.stop()
                return ranges(*args, **kw)

            fs.cat_ranges, fs._wrapped = cat_ranges, True
        return fs, inside

    monkeypatch.setattr(remote, "filesystem", dropping)
    args = ["pretrain", "--preset", "tiny", "--quiet", "--set", "model.num_layers=1", "--set",
            "train.batch_size=8", "--set", "train.max_steps=12", "--set", "train.save_every=2",
            "--set", "train.log_every=1", "--set", "train.eval_every=0", "--set",
            "train.precision=fp32", "--set", "train.shuffle_window=1", *STREAM[:4]]
    assert main([*args, "--data", str(letters_data), "--out", str(tmp_path / "a")]) == 0
    capsys.readouterr()
    assert main([*args, "--data", "s3://data/dropped", "--out", str(tmp_path / "b")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--data s3://data/dropped: the store failed" in err[0]
    assert "run the command again" in err[0]
    kept = sorted(p.name for p in (tmp_path / "b/checkpoints").iterdir())
    assert kept  # what it trained before the drop
    back = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    back.start()
    try:
        assert main([*args, "--data", "s3://data/dropped", "--out", str(tmp_path / "b"),
                     "--resume"]) == 0
    finally:
        back.stop()
        s3fs.S3FileSystem.clear_instance_cache()

    def lines(run: Path) -> list[dict]:
        return [{k: v for k, v in r.items() if k not in TIMING_KEYS} for r in iter_metrics(run)]

    assert lines(tmp_path / "a") == lines(tmp_path / "b")


def test_a_folder_prepared_anew_at_the_url_is_not_read_from_the_old_blocks(
        s3, letters_data, tmp_path, monkeypatch):
    """The blocks are named by their file's stamp in the store: the same URL holding other
    rows is read anew, not from the cache; and a second process streaming on the same
    machine keeps a cache folder of its own."""
    from electra.data import stream
    from electra.data.stream import BlockCache, StreamedShards

    monkeypatch.setenv("ELECTRA_CACHE", str(tmp_path / "cache"))
    _upload(letters_data, "data/anew")
    rows = np.arange(40)
    first = StreamedShards("s3://data/anew", block_rows=16).batch(rows)["input_ids"]
    ids = (letters_data / "train/ids.bin").read_bytes()
    store().pipe("data/anew/train/ids.bin", ids[len(ids) // 2:] + ids[:len(ids) // 2])
    again = StreamedShards("s3://data/anew", block_rows=16)
    assert not again.batch(rows)["input_ids"].equal(first)
    assert {rel for rel, _ in again.fetched} >= {"train/ids.bin"}
    other = BlockCache(stream.block_cache().folder.with_name("rank-0"), 1e9)
    assert other.folder != stream.block_cache().folder  # that one is held
    other.held.release()


def test_a_streamed_mixture_with_a_phase_of_another_length_trains_as_the_local_folders(
        s3, letters_data, tmp_path):
    """Each folder of a mixture streams window by window and a second length phase streams
    its own; stopped and resumed, the run's lines are the local folders' run's."""
    root = letters_data.parent
    write_corpus(tmp_path / "o.txt", n_docs=60, seed=5)
    for text, n, name in ((tmp_path / "o.txt", 32, "o32"), (root / "c.txt", 64, "d64")):
        assert main(["prepare", "--input", str(text), "--tokenizer", str(root / "tok"),
                     "--seq-len", str(n), "--val-fraction", "0.2", "--out",
                     str(tmp_path / name)]) == 0
    for folder, name in ((letters_data, "data"), (tmp_path / "o32", "o32"),
                         (tmp_path / "d64", "d64")):
        _upload(folder, f"data/mix/{name}")
    args = ["pretrain", "--preset", "tiny", "--quiet", "--set", "model.num_layers=1", "--set",
            "train.batch_size=8", "--set", "train.max_steps=8", "--set", "train.log_every=1",
            "--set", "train.eval_every=4", "--set", "train.eval_batches=1", "--set",
            "train.precision=fp32", "--set", "train.shuffle=blocks", "--set",
            "train.shuffle_block=8", "--set", "train.shuffle_window=2", "--set",
            "train.phases=32:0.5,64:0.5"]
    local = f"{letters_data}:0.7+{tmp_path / 'o32'}:0.3,{tmp_path / 'd64'}"
    url = "s3://data/mix/data:0.7+s3://data/mix/o32:0.3,s3://data/mix/d64"  # names alike
    assert main([*args, "--data", local, "--out", str(tmp_path / "a")]) == 0
    assert main([*args, "--data", url, "--out", str(tmp_path / "b"), "--stop-after", "5"]) == 0
    assert main([*args, "--data", url, "--out", str(tmp_path / "b"), "--resume"]) == 0

    def lines(run: Path) -> list[dict]:
        return [{k: v for k, v in r.items() if k not in TIMING_KEYS} for r in iter_metrics(run)]

    a = lines(tmp_path / "a")
    assert a == lines(tmp_path / "b") and len(a) == 8
    assert a[-1]["tokens_from_data"] and a[-1]["tokens_from_o32"]


def test_one_writer_per_url_and_an_interrupted_upload_is_written_over(
        s3, letters_data, tmp_path, capsys):
    """`prepare --out URL` holds ``URL/.electra-writing`` while it writes (the store's
    conditional write): a second writer is one line naming the first and changes nothing;
    the upload of a prepare interrupted half-way (its mark, no meta.json) is written over
    with --overwrite as the refusal advises; the writer's object is gone after."""
    from electra.io.remote import WRITING

    fs = store()
    text = letters_data.parent / "c.txt"
    args = ["prepare", "--input", str(text), "--tokenizer", str(letters_data.parent / "tok"),
            "--seq-len", "32", "--out", "s3://data/locked"]
    fs.pipe(f"data/locked/{WRITING}", b'{"host": "node7", "pid": 4242, "since": "noon"}')
    err = cli_error(capsys, *args)
    assert "--out s3://data/locked: another `electra` is writing there (since noon, node7 " \
           "process 4242)" in err and f"delete s3://data/locked/{WRITING}" in err
    assert fs.find("data/locked") == [f"data/locked/{WRITING}"]  # nothing else written
    fs.rm(f"data/locked/{WRITING}")
    # Another command's folder (its mark says a run), no meta.json: never written over.
    fs.pipe("data/other/.electra.json", b'{"kind": "run", "command": "pretrain"}')
    err = cli_error(capsys, *args[:-1], "s3://data/other", "--overwrite")
    assert "holds files `electra prepare` did not write" in err
    assert fs.find("data/other") == ["data/other/.electra.json"]
    # An upload cut off after its first files: the mark and a shard, no meta.json.
    fs.pipe("data/locked/.electra.json", (letters_data / ".electra.json").read_bytes())
    fs.pipe("data/locked/train/ids.bin", b"half")
    err = cli_error(capsys, *args)
    assert "already holds the upload of an interrupted `electra prepare`; pass --overwrite" \
        in err
    assert main([*args, "--overwrite"]) == 0
    assert fs.exists("data/locked/meta.json") and not fs.exists(f"data/locked/{WRITING}")
    local = tmp_path / "local"
    assert main([*args[:-1], str(local)]) == 0
    assert fs.cat("data/locked/train/ids.bin") == (local / "train/ids.bin").read_bytes()


def test_a_profile_in_the_shared_credentials_file_is_used(s3, tmp_path, monkeypatch):
    """The store's usual environment: with the server checking keys, the access key of an
    IAM user the server knows, given only as a named profile of a credentials file
    (AWS_SHARED_CREDENTIALS_FILE, AWS_PROFILE), reads the data; the environment's keys
    are not set."""
    import boto3
    import s3fs
    from moto.core.authorization import enable_iam_authentication

    iam = boto3.client("iam", region_name="us-east-1")
    iam.create_user(UserName="reader")
    iam.attach_user_policy(UserName="reader", PolicyArn=iam.create_policy(
        PolicyName="s3-all", PolicyDocument=json.dumps({
            "Version": "2012-10-17", "Statement": [
                {"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}))["Policy"]["Arn"])
    key = iam.create_access_key(UserName="reader")["AccessKey"]
    (tmp_path / "credentials").write_text(
        f"[research]\naws_access_key_id = {key['AccessKeyId']}\n"
        f"aws_secret_access_key = {key['SecretAccessKey']}\n")
    write_corpus(tmp_path / "c.txt", n_docs=20)
    assert main(["tokenizer", "train", "--input", str(tmp_path / "c.txt"), "--vocab-size",
                 "100", "--out", str(tmp_path / "tok")]) == 0
    store().put_file(str(tmp_path / "c.txt"), "data/profile/c.txt")
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "credentials"))
    monkeypatch.setenv("AWS_PROFILE", "research")
    s3fs.S3FileSystem.clear_instance_cache()
    try:
        with enable_iam_authentication():
            assert main(["prepare", "--input", "s3://data/profile/c.txt", "--tokenizer",
                         str(tmp_path / "tok"), "--seq-len", "32", "--out",
                         str(tmp_path / "p")]) == 0
    finally:
        s3fs.S3FileSystem.clear_instance_cache()
    assert (tmp_path / "p/meta.json").is_file()


# -- never lose, round 4 (issue 69): keys, the cache's bound, outputs over inputs, writers --


def test_a_hostile_key_is_never_written_outside_the_cache(s3, tmp_path, capsys):
    """A key with '..' or empty parts under a URL a user reads (which anyone who can write
    one object there could plant) is one line naming it, and nothing is fetched, inside the
    cache or out of it; a URL with such parts is refused before any request, as an input and
    as prepare's --out (a store would take them as literal key parts)."""
    import boto3

    client = boto3.client("s3")
    client.put_object(Bucket="data", Key="evil/a.txt", Body=b"good")
    client.put_object(Bucket="data", Key="evil/../../../../escape.txt", Body=b"planted")
    cache = Path(os.environ["ELECTRA_CACHE"])
    err = cli_error(capsys, "pretrain", "--preset", "tiny", "--data", "s3://data/evil",
                    "--out", tmp_path / "r")
    assert "--data s3://data/evil: the store holds an object whose key " \
           "'../../../../escape.txt' has '..', '.' or empty parts" in err
    assert not list(tmp_path.rglob("escape.txt")) and not (tmp_path / "r").exists()
    assert not [p for p in cache.rglob("*") if p.is_file() and p.suffix == ".txt"]
    client.delete_object(Bucket="data", Key="evil/../../../../escape.txt")
    client.put_object(Bucket="data", Key="evil//etc.txt", Body=b"planted")
    assert "key '/etc.txt'" in cli_error(capsys, "finetune", "--model", tmp_path, "--task",
                                         "custom", "--train", "s3://data/evil", "--dev",
                                         "s3://data/evil", "--out", tmp_path / "f")
    # URLs with such parts: refused before any request
    write_corpus(tmp_path / "c.txt", n_docs=10)
    before = sorted(store().find("data"))
    for url, flag in (("s3://data/x/../../escape", "--out"), ("s3://data//x", "--out"),
                      ("s3://data/./x", "--input")):
        args = ["--input", str(tmp_path / "c.txt"), "--out", url] if flag == "--out" else [
            "--input", url, "--out", str(tmp_path / "p")]
        err = cli_error(capsys, "prepare", *args, "--tokenizer", str(tmp_path))
        assert f"{flag} {url}: a store's URL may not have '..', '.' or empty parts" in err
    assert sorted(store().find("data")) == before


def test_the_caches_bound_removes_only_the_mirrors_electra_made(s3, tmp_path, monkeypatch):
    """ELECTRA_CACHE set to a folder that holds other things: to make room, the bound
    removes mirrors electra made there (their stamps beside them) and nothing else: not a
    user's folder, not the stream's blocks, not a folder named like a mirror without its
    stamps; a mirror another process holds is skipped."""
    from electra.io import remote

    cache = tmp_path / "mine"
    monkeypatch.setenv("ELECTRA_CACHE", str(cache))
    (cache / "notes").mkdir(parents=True)
    (cache / "notes/big.bin").write_bytes(b"k" * 300_000)  # a user's, older than any mirror
    (cache / "0123456789abcdef-lookalike").mkdir()
    (cache / "0123456789abcdef-lookalike/keep.bin").write_bytes(b"k" * 300_000)
    (cache / "stream/rank-0").mkdir(parents=True)
    (cache / "stream/rank-0/block.bin").write_bytes(b"k" * 300_000)
    for p in cache.rglob("*"):  # long unused
        os.utime(p, (1_000_000_000, 1_000_000_000))
    fs = store()
    fs.pipe("data/one/a.bin", b"1" * 400_000)
    fs.pipe("data/two/b.bin", b"2" * 400_000)
    first = remote.local("s3://data/one", "--data")
    assert (first / "a.bin").is_file()
    monkeypatch.setenv("ELECTRA_CACHE_GB", str(600_000 / 1e9))  # room for one mirror
    second = remote.local("s3://data/two", "--data")
    assert (second / "b.bin").is_file() and not first.exists()  # the older mirror went
    assert not first.with_name(first.name + ".stamps.json").exists()
    for kept in ("notes/big.bin", "0123456789abcdef-lookalike/keep.bin",
                 "stream/rank-0/block.bin"):
        assert (cache / kept).stat().st_size == 300_000, kept
    # a mirror in use by another process is not removed under it
    from filelock import FileLock

    fs.pipe("data/three/c.bin", b"3" * 400_000)
    with FileLock(str(second) + ".lock"):
        import multiprocessing as mp

        ctx = mp.get_context("spawn")
        p = ctx.Process(target=_mirror, args=("s3://data/three", dict(os.environ)))
        p.start()
        p.join(60)
        assert p.exitcode == 0
    assert (second / "b.bin").is_file()


def _mirror(url: str, env: dict[str, str]) -> None:
    os.environ.update(env)
    from electra.io import remote

    remote.local(url, "--data")


def test_a_damaged_stamps_file_is_read_as_none_and_the_files_fetched_again(s3, tmp_path):
    from electra.io import remote

    store().pipe("data/st/a.bin", b"a" * 1000)
    mirror = remote.local("s3://data/st", "--data")
    stamps = mirror.with_name(mirror.name + ".stamps.json")
    for damaged in (b"{\"a.bin\": ", b"[1, 2]", b"\xff\xfe"):
        stamps.write_bytes(damaged)
        (mirror / "a.bin").write_bytes(b"b" * 1000)  # the same size: only stamps tell
        assert (remote.local("s3://data/st", "--data") / "a.bin").read_bytes() == b"a" * 1000
        assert json.loads(stamps.read_text())["a.bin"]


def test_an_output_url_over_inside_or_around_an_input_url_is_refused(s3, tmp_path, capsys):
    """The outputs rule for URLs as for paths: prepare --out equal to, inside or holding an
    --input URL (or its pattern's folder) is one line, and the store is unchanged."""
    write_corpus(tmp_path / "c.txt", n_docs=10)
    store().put_file(str(tmp_path / "c.txt"), "data/corpus/c.txt")
    before = sorted(store().find("data"))
    for given, out, words in (
            ("s3://data/corpus", "s3://data/corpus", "is --input s3://data/corpus itself"),
            ("s3://data/corpus/", "s3://data/corpus/shards", "is inside --input"),
            ("s3://data/corpus/*.txt", "s3a://data/corpus/shards", "is inside --input"),
            ("s3://data/corpus/c.txt", "s3://data", "holds --input s3://data/corpus/c.txt")):
        err = cli_error(capsys, "prepare", "--input", given, "--tokenizer", str(tmp_path),
                        "--out", out)
        assert f"--out {out} {words}" in err, err
    assert sorted(store().find("data")) == before


def test_a_dead_writers_mark_on_this_machine_is_taken_over(s3, letters_data, capsys):
    """`prepare --out URL` killed (-9) leaves its URL/.electra-writing: the next run on the
    same machine finds its process gone and takes it over with a note, as a local lock is;
    a live process's mark (this test's own) is still one line naming it."""
    import socket
    import subprocess

    from electra.io.remote import WRITING

    dead = subprocess.Popen(["true"])
    dead.wait()
    mark = {"host": socket.gethostname(), "since": "noon"}
    args = ["prepare", "--input", str(letters_data.parent / "c.txt"), "--tokenizer",
            str(letters_data.parent / "tok"), "--seq-len", "32", "--out", "s3://data/killed"]
    store().pipe(f"data/killed/{WRITING}", json.dumps({**mark, "pid": os.getpid()}).encode())
    assert "another `electra` is writing there" in cli_error(capsys, *args)
    store().pipe(f"data/killed/{WRITING}", json.dumps({**mark, "pid": dead.pid}).encode())
    assert main(args) == 0
    err = capsys.readouterr().err
    assert f"process {dead.pid}); taking it over" in err
    assert store().exists("data/killed/meta.json")
    assert not store().exists(f"data/killed/{WRITING}")


def test_an_electra_output_inside_an_input_folder_is_not_read_as_text(s3, tmp_path, capsys):
    """prepare's --input folder holding an earlier output of electra's (prepared data: its
    vocab.txt is a .txt): that output is skipped with a note, locally and in a store; an
    input that is an output itself is one line."""
    (tmp_path / "corpus").mkdir()
    write_corpus(tmp_path / "corpus/c.txt", n_docs=20)
    assert main(["tokenizer", "train", "--input", str(tmp_path / "corpus/c.txt"),
                 "--vocab-size", "100", "--out", str(tmp_path / "tok")]) == 0
    common = ["--tokenizer", str(tmp_path / "tok"), "--seq-len", "32"]
    assert main(["prepare", "--input", str(tmp_path / "corpus"), *common, "--out",
                 str(tmp_path / "alone")]) == 0
    # an earlier prepare into a folder inside the corpus (before the outputs rule said no)
    import shutil

    shutil.copytree(tmp_path / "alone", tmp_path / "corpus/data")
    capsys.readouterr()
    assert main(["prepare", "--input", str(tmp_path / "corpus"), *common, "--out",
                 str(tmp_path / "again")]) == 0
    assert "skipping " + str(tmp_path / "corpus/data") in capsys.readouterr().err
    same = [json.loads((tmp_path / n / "meta.json").read_text())["splits"] for n in
            ("alone", "again")]
    assert same[0] == same[1]
    assert "is an electra output (its .electra.json), not text" in cli_error(
        capsys, "prepare", "--input", str(tmp_path / "alone"), *common, "--out",
        str(tmp_path / "x"))
    for f in sorted((tmp_path / "corpus").rglob("*")):
        if f.is_file():
            store().put_file(str(f), f"data/c/{f.relative_to(tmp_path / 'corpus')}")
    capsys.readouterr()
    assert main(["prepare", "--input", "s3://data/c", *common, "--out",
                 str(tmp_path / "from-url"), "--engine", "local"]) == 0
    assert "skipping" in capsys.readouterr().err
    assert json.loads((tmp_path / "from-url/meta.json").read_text())["splits"] == same[0]
