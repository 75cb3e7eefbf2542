"""SIGTERM (timeout, kill, docker stop, Kubernetes, SLURM) and SIGUSR1 (SLURM's --signal) end
every training command as Ctrl-C does: a checkpoint of the last completed step, exit
128 + signal, and a last line naming the exact command that continues it; the run continued
with it ends bitwise where an uninterrupted run ends. Under torchrun every rank stops at the
same step and they save together.

The signal is real (``os.kill``), sent by the process to itself (or, under torchrun, by rank 1
to torchrun, which passes it to every rank) at a chosen call: in the middle of a step, or
while a metrics line's validation runs.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import sys
from pathlib import Path

import pytest
import torch
from helpers import launch, why_failed, write_sentiment
from safetensors.torch import load_file
from train.test_parallel import CONFIG

from electra.cli import main
from electra.train import stop
from electra.train.metrics import TIMING_KEYS, iter_metrics


@pytest.fixture(scope="module")
def configs(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("signals")
    made = {}
    for name, dropout in (("dropout", 0.1), ("plain", 0.0)):  # plain: ranks compute as one
        made[name] = folder / f"{name}.toml"  # torchrun's tests' run, saving only when asked
        made[name].write_text(CONFIG.replace("save_every = 5", "save_every = 1000").replace(
            "dropout = 0.0", f"dropout = {dropout}"))
    return made


def metrics(run: Path) -> list[dict]:
    return [{k: v for k, v in r.items() if k not in TIMING_KEYS} for r in iter_metrics(run)]


def weights(run: Path) -> dict[str, torch.Tensor]:
    return {f"{kind}.{k}": v for kind in ("discriminator", "generator")
            for k, v in load_file(run / kind / "model.safetensors").items()}


def assert_bitwise(a: Path, b: Path) -> None:
    assert metrics(a) == metrics(b)
    wa, wb = weights(a), weights(b)
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)


def signal_at(monkeypatch, owner, name: str, n: int, signum: int) -> None:
    """Send this process ``signum`` at the n-th call of ``owner.name`` (before it runs)."""
    real, calls = getattr(owner, name), [0]

    def sends(*a, **k):
        calls[0] += 1
        if calls[0] == n:
            os.kill(os.getpid(), signum)
        return real(*a, **k)

    monkeypatch.setattr(owner, name, sends)


def term_script(folder: Path, when: str, to: str) -> Path:
    """A script that runs `electra ARGS` and sends SIGTERM to ``to`` (a pid expression) at
    the forward where ``when`` holds (``calls[0]``: the forwards so far)."""
    path = folder / "term.py"
    path.write_text(
        "import os, signal, sys\n"
        "from electra.objectives import pretraining\n"
        "from electra.cli import main\n"
        "real, calls = pretraining.electra_forward, [0]\n"
        "def forward(*a, **k):\n"
        "    calls[0] += 1\n"
        f"    if {when}:\n"
        f"        os.kill({to}, signal.SIGTERM)\n"
        "    return real(*a, **k)\n"
        "pretraining.electra_forward = forward\n"
        "sys.exit(main(sys.argv[1:]))\n")
    return path


@pytest.mark.parametrize(("where", "signum"), [("step", signal.SIGTERM),
                                               ("validation", signal.SIGUSR1)])
def test_a_signal_saves_and_the_printed_command_resumes_bitwise(letters_data, configs,
                                                                 tmp_path, monkeypatch,
                                                                 capsys, where, signum):
    """In the middle of step 4's forward (the step completes, the run stops before step 5,
    with step 4's line logged), or in the validation of step 5's line (at once, as Ctrl-C):
    a checkpoint, exit 128 + signal, and the last line's command continues it bitwise (with
    dropout: every random stream restored)."""
    import electra.train.pretraining as pretrain
    from electra.objectives import pretraining

    base = ["pretrain", "--config", str(configs["dropout"]), "--data", str(letters_data),
            "--quiet"]
    assert main([*base, "--out", str(tmp_path / "a")]) == 0
    capsys.readouterr()
    if where == "step":
        signal_at(monkeypatch, pretraining, "electra_forward", 4, signum)
    else:
        signal_at(monkeypatch, pretrain, "validate", 1, signum)
    b = ["--out", str(tmp_path / "b"), "--overwrite"]
    assert main([*base, *b]) == 128 + signum
    monkeypatch.undo()
    out, err = capsys.readouterr()
    name = signal.Signals(signum).name
    step = 4 if where == "step" else 5
    assert f"electra: stopped by {name} at step {step}; checkpoint of step {step} saved" in out
    again = [*base, "--out", str(tmp_path / "b"), "--resume"]
    assert err.strip().splitlines()[-1] == (
        f"electra: stopped by {name}; continue it with `electra {shlex.join(again)}`")
    assert sorted(p.name for p in (tmp_path / "b/checkpoints").iterdir()) == [
        f"step-{step:07d}"]
    assert stop.pending() is None and not stop.installed()  # the handlers are given back
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    assert main(again) == 0
    assert_bitwise(tmp_path / "a", tmp_path / "b")


def test_sigterm_from_outside_a_process_ends_it_resumable(letters_data, configs, tmp_path):
    """`timeout`'s and `kill`'s SIGTERM to a separate `python -m electra` process, sent from
    inside its 3rd step: exit 143 and a command that continues it."""
    import subprocess

    helper = term_script(tmp_path, "calls[0] == 3", "os.getpid()")
    args = ["pretrain", "--config", str(configs["plain"]), "--data", str(letters_data),
            "--out", str(tmp_path / "r"), "--quiet"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    res = subprocess.run([sys.executable, str(helper), *args], capture_output=True, text=True,
                         env=env, timeout=300)
    assert res.returncode == 143, res.stderr[-2000:]
    assert "Traceback" not in res.stderr
    assert (tmp_path / "r/checkpoints/step-0000003").is_dir()
    assert res.stderr.strip().splitlines()[-1].endswith(
        f"{shlex.join(args)} --resume`")


def test_a_fine_tune_stopped_by_sigterm_resumes_to_the_same_result(tmp_path, monkeypatch,
                                                                   capsys):
    from helpers import make_run

    import electra.train.finetuning as finetuning

    run, _ = make_run(tmp_path, "tiny")
    write_sentiment(tmp_path / "train.csv", 48, seed=1)
    write_sentiment(tmp_path / "dev.csv", 16, seed=2)
    base = ["finetune", "--model", str(run), "--task", "custom", "--train",
            str(tmp_path / "train.csv"), "--dev", str(tmp_path / "dev.csv"), "--quiet",
            "--set", "epochs=2", "--set", "batch_size=8", "--set", "max_length=32",
            "--set", "precision=fp32"]
    assert main([*base, "--out", str(tmp_path / "a")]) == 0
    signal_at(monkeypatch, finetuning, "micro_rows", 8, signal.SIGTERM)  # in step 8
    assert main([*base, "--out", str(tmp_path / "b")]) == 143
    monkeypatch.undo()
    err = capsys.readouterr().err.strip().splitlines()[-1]
    again = [*base, "--out", str(tmp_path / "b"), "--resume"]
    assert err == (f"electra: stopped by SIGTERM; continue it with `electra "
                   f"{shlex.join(again)}` (finished seeds are kept)")
    assert main(again) == 0
    a, b = (json.loads((tmp_path / x / "results.json").read_text()) for x in "ab")
    assert a["seeds"] == b["seeds"]
    assert metrics(tmp_path / "a/seed-1") == metrics(tmp_path / "b/seed-1")


@pytest.mark.slow
@pytest.mark.skipif(not torch.distributed.is_available(), reason="no torch.distributed")
def test_under_torchrun_every_rank_stops_at_one_step_and_resumes_exactly(letters_data,
                                                                         configs, tmp_path):
    """Rank 1 sends torchrun SIGTERM from inside its 3rd step; torchrun passes it to both
    ranks, which get it at different moments, agree on a step, save together (both ranks'
    random streams) and exit; the run continued under torchrun equals an uninterrupted one."""
    helper = term_script(tmp_path, "os.environ['RANK'] == '1' and calls[0] == 3",
                         "os.getppid()")
    args = ["pretrain", "--config", configs["plain"], "--data", letters_data, "--quiet"]
    res = launch(2, *args, "--out", tmp_path / "a")
    assert res.returncode == 0, why_failed(res)
    res = launch(2, *args, "--out", tmp_path / "b", prefix=[str(helper)])
    assert res.returncode != 0
    assert re.search(r'File "[^"]*src/electra/', res.stderr) is None  # no trace of ours
    # (torchrun prints its own, for the SignalException it raised on SIGTERM)
    saved = sorted(p.name for p in (tmp_path / "b/checkpoints").iterdir())
    assert len(saved) == 1, (saved, why_failed(res))
    step = int(saved[0].split("-")[1])
    assert 3 <= step < 10
    state = torch.load(tmp_path / "b/checkpoints" / saved[0] / "state.pt", weights_only=True)
    assert len(state["rng"]["ranks"]) == 2  # saved together: each rank's own streams
    assert "electra: stopped by SIGTERM; continue it with `torchrun ... -m electra" in res.stderr
    res = launch(2, *args, "--out", tmp_path / "b", "--resume")
    assert res.returncode == 0, why_failed(res)
    assert_bitwise(tmp_path / "a", tmp_path / "b")


def test_advice_names_the_command_as_the_user_started_it(monkeypatch, tmp_path):
    """`make demo` gets `make demo ARGS="..."` back, `python -m electra` itself, a venv's
    script off the PATH its path from here; --overwrite and --decay-from X are dropped."""
    from electra import invocation

    monkeypatch.chdir(tmp_path)
    (tmp_path / ".venv/bin").mkdir(parents=True)
    script = tmp_path / ".venv/bin/electra"
    script.write_text("")
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.delenv("TORCHELASTIC_RUN_ID", raising=False)
    monkeypatch.setenv("MAKELEVEL", "1")
    monkeypatch.setattr(sys, "argv", [str(script), "demo", "--out", "my runs/d"])
    invocation.record(None)
    assert invocation.command(add=["--resume"]) == \
        """`make demo ARGS="--out 'my runs/d' --resume"`"""
    monkeypatch.delenv("MAKELEVEL")
    assert invocation.command(add=["--resume"]) == \
        "`.venv/bin/electra demo --out 'my runs/d' --resume`"
    monkeypatch.setattr(sys, "argv", ["/x/electra/__main__.py", "pretrain", "--out", "r",
                                      "--decay-from", "a/step-1", "--overwrite"])
    invocation.record(None)
    assert invocation.command(add=["--resume"], drop=["--overwrite"],
                              drop_with_value=["--decay-from"]) == \
        "`python -m electra pretrain --out r --resume`"
    invocation.record(["finetune", "--out", "f"])  # main(argv): as `electra`
    assert invocation.command(add=["--resume"]) == "`electra finetune --out f --resume`"
