"""`electra demo`, the README's first command: it runs from nothing, a finished demo is kept
(a rerun or --resume refuses, naming the command that works), --overwrite replaces its own
folder with the same data (the tokenizer and shards are byte-identical), and it never writes
into a folder it did not make."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from electra.cli import main
from electra.io.outputs import what_is


def digests(folder: Path) -> dict[str, str]:
    """Every file's checksum (meta.json, which records how long packing took, aside)."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file() and p.name != "meta.json"}


@pytest.mark.slow
def test_the_demo_runs_reruns_identically_and_keeps_to_its_own_folder(tmp_path, capsys):
    out = tmp_path / "demo"
    argv = ["demo", "--out", str(out), "--steps", "2", "--quiet", "--set",
            "train.eval_batches=2"]  # the held-out line from 2 batches (the demo: 10)
    assert main(argv) == 0
    first = {k: digests(out / k) for k in ("tokenizer", "data", "run")}
    assert what_is(out) == ("demo", "demo") and (out / "run" / "discriminator").is_dir()
    assert "held-out discriminator accuracy" in capsys.readouterr().out
    for again in ([], ["--resume"]):  # a finished demo: refused, every file as it was
        assert main([*argv, *again]) == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and "holds a finished demo" in err, err
        assert f"`electra {' '.join(argv)} --overwrite`" in err, err
        assert {k: digests(out / k) for k in ("tokenizer", "data", "run")} == first
    assert main([*argv, "--overwrite"]) == 0
    assert {k: digests(out / k) for k in ("tokenizer", "data")} == {
        k: first[k] for k in ("tokenizer", "data")}
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep")
    assert main(["demo", "--out", str(mine), "--steps", "2", "--quiet"]) == 2
    assert "holds files electra did not write" in capsys.readouterr().err
    assert [p.name for p in mine.iterdir()] == ["notes.txt"]


@pytest.mark.slow
def test_an_interrupted_demo_is_resumed_or_refused_never_started_over(tmp_path, capsys,
                                                                        monkeypatch):
    """Ctrl-C after its pretraining saved step 2: the same command is refused (the
    checkpoint kept), --resume continues from step 2 with the corpus, tokenizer and shards
    it made, and --set reaches the demo's settings (the busy-machine note's advice)."""
    import json

    import electra.commands.pretrain as pretrain_module

    real = pretrain_module.pretrain

    def interrupted(opt, rt):
        real(pretrain_module.PretrainOptions(**{**vars(opt), "stop_after": 2}), rt)
        raise KeyboardInterrupt

    out = tmp_path / "demo"
    argv = ["demo", "--out", str(out), "--steps", "4", "--quiet", "--set",
            "train.save_every=2", "--set", "train.threads=1"]
    monkeypatch.setattr(pretrain_module, "pretrain", interrupted)
    assert main(argv) == 130
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"electra: interrupted; continue it with `electra {' '.join(argv)} --resume`")
    monkeypatch.setattr(pretrain_module, "pretrain", real)
    ckpt = out / "run/checkpoints/step-0000002"
    before = digests(ckpt)
    kept = {k: digests(out / k) for k in ("tokenizer", "data")}
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "holds an interrupted demo" in err and "step 2" in err
    assert f"`electra {' '.join(argv)} --resume`" in err and digests(ckpt) == before
    assert main([*argv, "--resume"]) == 0
    assert "as the interrupted demo made them" in capsys.readouterr().out
    assert {k: digests(out / k) for k in ("tokenizer", "data")} == kept
    steps = [json.loads(line)["step"] for line in (out / "run/metrics.jsonl").open()
             if '"loss"' in line]
    assert steps[-1] == 4 and steps == sorted(set(steps)), steps
    assert (out / "summary.json").is_file()
    assert json.loads((out / "run/config.json").read_text())["train"]["threads"] == 1
