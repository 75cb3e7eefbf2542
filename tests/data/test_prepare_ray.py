"""`electra prepare --engine ray` (issue 61): the tokenizing and packing on a Ray cluster's
actors (a local one here), the shards byte-identical to the one-process path's for the same
inputs and seed, packed rows too."""

from __future__ import annotations

import pytest
from helpers import cli_error, sha, write_corpus

from electra.cli import main

ray = pytest.importorskip("ray")


@pytest.mark.slow
def test_prepare_on_ray_writes_the_one_process_shards(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")  # a local cluster of this test's own
    write_corpus(tmp_path / "c.txt", n_docs=200)
    assert main(["tokenizer", "train", "--input", str(tmp_path / "c.txt"), "--vocab-size",
                 "120", "--out", str(tmp_path / "tok")]) == 0
    from electra.data.prepare import PrepareOptions, prepare

    common = ["--input", str(tmp_path / "c.txt"), "--tokenizer", str(tmp_path / "tok"),
              "--seq-len", "32", "--val-fraction", "0.1", "--pack"]
    # Chunks of 4 kB: many, round-robin over both actors, their results taken in order.
    for out, engine, workers in (("one", "local", 1), ("ray", "ray", 2)):
        prepare(PrepareOptions(inputs=[str(tmp_path / "c.txt")], tokenizer=str(
            tmp_path / "tok"), out=str(tmp_path / out), seq_len=32, val_fraction=0.1,
            pack=True, engine=engine, workers=workers, chunk_bytes=4096, quiet=True))
    files = sorted(p.relative_to(tmp_path / "one") for p in (tmp_path / "one").rglob("*.bin"))
    assert files and all(sha(tmp_path / "one" / f) == sha(tmp_path / "ray" / f)
                         for f in files)
    assert "--address x:1 names a Ray cluster: add --engine ray" in cli_error(
        capsys, "prepare", *common, "--address", "x:1", "--out", tmp_path / "bad")
