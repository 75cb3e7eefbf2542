"""`kill -9`, for real: a command killed at any moment leaves its previous output or nothing a
later command accepts, a rerun succeeds, and a pretraining run resumed after each kill ends
bitwise where an uninterrupted run ends.

Each command runs in its own process (`python -m electra ...`, one thread). The moment of the
kill is chosen two ways: by a wrapper that sends the process SIGKILL on the n-th call of a
function (in the middle of a step, of writing a checkpoint, of writing an output), and by a
timer at a random moment.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from helpers import write_corpus
from safetensors.torch import load_file

from electra.train.metrics import TIMING_KEYS, iter_metrics

# python KILLER MODULE ATTR N -m-args...: SIGKILL this process on the N-th call of MODULE.ATTR.
KILLER = """
import importlib, os, signal, sys
module, attr, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
owner = importlib.import_module(module)
path = attr.split(".")
for name in path[:-1]:
    owner = getattr(owner, name)
real, calls = getattr(owner, path[-1]), [0]
def killed(*a, **k):
    calls[0] += 1
    if calls[0] == n:
        os.kill(os.getpid(), signal.SIGKILL)
    return real(*a, **k)
setattr(owner, path[-1], killed)
from electra.cli import main
sys.exit(main(sys.argv[4:]))
"""
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


def electra(*args, kill: tuple[str, str, int] | None = None,
            after: float | None = None) -> subprocess.CompletedProcess:
    """Run `electra ARGS` in a new process; ``kill``: SIGKILL at the n-th call of
    module.attr; ``after``: SIGKILL after that many seconds (if still running)."""
    args = [str(a) for a in args]
    cmd = ([sys.executable, "-c", KILLER, *map(str, kill), *args] if kill
           else [sys.executable, "-m", "electra", *args])
    if after is None:
        return subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=300)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=ENV)
    try:
        out, err = proc.communicate(timeout=after)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGKILL)
        out, err = proc.communicate()
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def killed(res: subprocess.CompletedProcess) -> bool:
    return res.returncode == -signal.SIGKILL


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> Path:
    w = tmp_path_factory.mktemp("crash")
    write_corpus(w / "c.txt", n_docs=60)
    assert electra("tokenizer", "train", "--input", w / "c.txt", "--vocab-size", 120, "--out",
                   w / "tok").returncode == 0
    assert electra("prepare", "--input", w / "c.txt", "--tokenizer", w / "tok", "--seq-len",
                   32, "--val-fraction", 0.2, "--out", w / "data").returncode == 0
    (w / "tiny.toml").write_text(
        'preset = "tiny"\n[model]\nhidden_size = 32\nembedding_size = 32\nnum_layers = 2\n'
        'num_heads = 2\nintermediate_size = 64\nmax_position_embeddings = 64\n'
        '[train]\nbatch_size = 8\nmax_steps = 30\nwarmup_steps = 3\nsave_every = 1\n'
        'keep_checkpoints = 2\neval_every = 10\neval_batches = 1\nlog_every = 3\n'
        'precision = "fp32"\n')
    return w


def weights(run: Path) -> dict[str, torch.Tensor]:
    return {f"{k}.{n}": t for k in ("discriminator", "generator")
            for n, t in load_file(run / k / "model.safetensors").items()}


def metrics(run: Path) -> list[dict]:
    return [{k: v for k, v in r.items() if k not in TIMING_KEYS} for r in iter_metrics(run)]


@pytest.mark.slow
def test_pretraining_killed_at_random_moments_resumes_bitwise(world, tmp_path):
    """Killed mid-forward, mid-checkpoint and at a random time, resumed after each: the final
    weights and every metrics line equal an uninterrupted run's, bit for bit."""
    args = ["pretrain", "--config", world / "tiny.toml", "--data", world / "data", "--quiet"]
    assert electra(*args, "--out", tmp_path / "a").returncode == 0
    run = tmp_path / "b"
    rng = random.Random(int(os.environ.get("ELECTRA_KILL_SEED", "1234")))  # other kill points
    # Each count from the start of its own (resumed) process, small enough to land within
    # the 30 steps: a step's forward, a checkpoint's checksums, its state.pt.
    kills = [("electra.objectives.pretraining", "electra_forward", rng.randint(2, 8)),
             ("electra.io.checkpoint", "sha256_file", rng.randint(2, 20)),
             ("torch", "save", rng.randint(2, 6))]
    steps_at_kill = []
    for i, kill in enumerate(kills):
        res = electra(*args, "--out", run, *(["--resume"] if i else []), kill=kill)
        assert killed(res), res.stderr[-2000:]
        steps_at_kill.append(sorted(p.name for p in (run / "checkpoints").iterdir())[-1])
    start = time.perf_counter()
    res = electra(*args, "--out", run, "--resume", after=rng.uniform(2.0, 4.0))
    timed = killed(res)
    res = electra(*args, "--out", run, "--resume")
    assert res.returncode == 0, res.stderr[-2000:]
    wa, wb = weights(tmp_path / "a"), weights(run)
    assert wa.keys() == wb.keys()
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    assert metrics(tmp_path / "a") == metrics(run)
    print(f"kills left {steps_at_kill} (last checkpoint folder at each kill), "
          f"{'and' if timed else 'no'} timed kill ({time.perf_counter() - start:.1f}s); "
          f"final weights bitwise equal")


def test_prepare_and_tokenizer_killed_leave_old_or_nothing(world, tmp_path):
    import shutil

    from electra.data.loader import ShardDataset

    shutil.copytree(world / "data", tmp_path / "data")
    before = (tmp_path / "data/train/ids.bin").read_bytes()
    res = electra("prepare", "--input", world / "c.txt", "--tokenizer", world / "tok",
                  "--seq-len", 16, "--out", tmp_path / "data", "--overwrite",
                  kill=("electra.data.prepare", "_Writer.write", 1))
    assert killed(res)
    assert (tmp_path / "data/train/ids.bin").read_bytes() == before  # the old output, whole
    assert ShardDataset(tmp_path / "data").seq_len == 32
    with pytest.raises(Exception, match="interrupted"):
        ShardDataset(tmp_path / "data.partial")  # left behind, never accepted
    assert electra("prepare", "--input", world / "c.txt", "--tokenizer", world / "tok",
                   "--seq-len", 16, "--out", tmp_path / "data", "--overwrite").returncode == 0
    assert ShardDataset(tmp_path / "data").seq_len == 16
    assert not (tmp_path / "data.partial").exists()

    res = electra("tokenizer", "train", "--input", world / "c.txt", "--out", tmp_path / "tok",
                  kill=("electra.data.tokenizer", "save_tokenizer", 1))
    assert killed(res) and not (tmp_path / "tok").exists()
    assert electra("tokenizer", "train", "--input", world / "c.txt", "--out",
                   tmp_path / "tok").returncode == 0


@pytest.mark.slow
def test_finetune_export_import_killed_leave_nothing_accepted(world, tmp_path):
    run = tmp_path / "run"
    assert electra("pretrain", "--config", world / "tiny.toml", "--data", world / "data",
                   "--out", run, "--quiet", "--set", "train.max_steps=4").returncode == 0
    (tmp_path / "train.csv").write_text("text,label\n" + "".join(
        f"{w} film,{lab}\n" for w, lab in [("good", "pos"), ("bad", "neg")] * 16))
    ft = ["finetune", "--model", run, "--task", "custom", "--train", tmp_path / "train.csv",
          "--dev", tmp_path / "train.csv", "--out", tmp_path / "ft", "--quiet", "--seeds",
          "1,2", "--set", "epochs=2", "--set", "batch_size=8", "--set", "max_length=16"]
    res = electra(*ft, kill=("electra.train.trainer", "Trainer.train_step", 11))  # seed 2, step 3
    assert killed(res) and not (tmp_path / "ft").exists()
    res = electra("evaluate", "--model", tmp_path / "ft.partial/seed-2", "--task", "custom",
                  "--dev", tmp_path / "train.csv")
    assert res.returncode == 2  # the seed in progress is not a model
    res = electra(*ft, "--resume")
    assert res.returncode == 0, res.stderr[-2000:]
    assert json.loads((tmp_path / "ft/results.json").read_text())["seeds"].keys() == {"1", "2"}

    pytest.importorskip("transformers")
    for i, cmd in enumerate((["export", run, "--out", tmp_path / "hf"],
                             ["import", tmp_path / "hf/discriminator", "--out",
                              tmp_path / "imp"])):
        if i == 1:
            assert electra(*cmd[:-2], "--out", tmp_path / "hf2").returncode == 0
        res = electra(*cmd, kill=("safetensors.torch", "save_file", 2))
        assert killed(res) and not Path(cmd[-1]).exists(), cmd
        assert electra(*cmd).returncode == 0, cmd
        assert not Path(f"{cmd[-1]}.partial").exists()
