"""Shared fixtures: tiny configs and batches made in-process (no data from outside the repo)."""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from helpers import SPECIAL, write_corpus

from electra.data.tokenizer import SpecialTokens


def pytest_configure(config) -> None:
    """Under pytest-xdist (``make test`` runs a worker per core) the workers share the cores:
    each worker's torch, and every command its tests start, gets its share of threads instead
    of one per core each (threads that wait on each other's cores run many times slower)."""
    workers = os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    if workers:
        threads = max(1, (os.cpu_count() or 1) // int(workers))
        os.environ["OMP_NUM_THREADS"] = str(threads)
        torch.set_num_threads(threads)


@pytest.fixture
def s3(tmp_path, monkeypatch):
    """A moto S3 server of this test's own on a free port, over a store emptied for it
    (moto keeps one store per process, which tests run before on this worker filled), a new
    bucket ``data`` in it, and the environment that reaches it (endpoint, credentials) and a
    cache of this test's own (skipped without moto, fsspec and s3fs). Nothing a test does to
    the store or the cache is seen by another, whatever the order or the split."""
    import urllib.request

    moto_server = pytest.importorskip("moto.server")
    fsspec = pytest.importorskip("fsspec")
    s3fs = pytest.importorskip("s3fs")
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    urllib.request.urlopen(urllib.request.Request(f"{endpoint}/moto-api/reset",
                                                  method="POST")).close()
    env = {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test",
           "AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT_URL": endpoint,
           "ELECTRA_CACHE": str(tmp_path / "electra-cache")}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    s3fs.S3FileSystem.clear_instance_cache()  # none made for another test's server
    fsspec.filesystem("s3", skip_instance_cache=True).mkdir("data")  # new: the store is empty
    yield server, env
    with contextlib.suppress(Exception):  # (a test may have stopped it already)
        server.stop()
    s3fs.S3FileSystem.clear_instance_cache()


@pytest.fixture
def special() -> SpecialTokens:
    return SPECIAL


@pytest.fixture(scope="session")
def letters_data(tmp_path_factory) -> Path:
    """A letters corpus (test_data.write_corpus) packed into 32-token examples with a
    validation split: what the pretraining-loop tests train on."""
    from electra.data.prepare import PrepareOptions, prepare
    from electra.data.tokenizer import train_tokenizer

    root = tmp_path_factory.mktemp("letters")
    text = root / "c.txt"
    write_corpus(text, n_docs=80)
    train_tokenizer([str(text)], 120, root / "tok")
    prepare(PrepareOptions(inputs=[str(text)], tokenizer=str(root / "tok"), out=str(
        root / "data"), seq_len=32, val_fraction=0.2, quiet=True))
    return root / "data"


@pytest.fixture
def sync_free(monkeypatch):
    """The CPU taken for a GPU, where reading a tensor waits for the device: the trainer's
    sync-free step (fused AdamW's found_inf), the GPU's path, runs on the CPU."""
    from electra.train import trainer

    monkeypatch.setattr(trainer, "host_reads_free", lambda device: False)


def built_once(tmp_path_factory, name: str, build: Callable[[Path], None]) -> Path:
    """A folder that ``build(folder)`` fills once for the whole run: under pytest-xdist the
    first worker to ask builds it in the workers' shared temporary folder while the others
    wait (building it again would take the core the first one builds on)."""
    if "PYTEST_XDIST_WORKER" not in os.environ:
        folder = tmp_path_factory.mktemp(name)
        build(folder)
        return folder
    from filelock import FileLock

    root = tmp_path_factory.getbasetemp().parent
    folder = root / name
    with FileLock(str(root / f"{name}.lock")):
        if not (folder / ".built").is_file():
            shutil.rmtree(folder, ignore_errors=True)  # one that failed halfway
            folder.mkdir()
            build(folder)
            (folder / ".built").touch()
    return folder


@pytest.fixture(scope="session")
def docs_bare(tmp_path_factory) -> Path:
    """The docs' working folder before any block ran (tests/docs_blocks.py), once a run."""
    from docs_blocks import bare_folder

    return built_once(tmp_path_factory, "docs-bare", bare_folder)


@pytest.fixture(scope="session")
def docs_started(docs_bare, tmp_path_factory) -> Path:
    """That folder after the blocks the later chains start from (docs_blocks.START)."""
    from docs_blocks import copy_folder, run_blocks, start_blocks

    def build(base: Path) -> None:
        run_blocks(start_blocks(), copy_folder(docs_bare, base), "the chains' start "
                   "(tutorials/pretrain.md, then the CSV block of tutorials/continue.md)")

    return built_once(tmp_path_factory, "docs-started", build)
