"""Helpers the tests share (one place): tiny configs and batches, corpora and task files the
tests write, a run with random weights, file snapshots, the CLI's error line, torchrun.

Fixtures are in conftest.py; everything here is a plain function, imported as
``from helpers import ...``."""

from __future__ import annotations

import contextlib
import hashlib
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from electra.config import ModelConfig
from electra.data.tokenizer import SpecialTokens, train_tokenizer
from electra.model.bodies import model_preset
from electra.objectives.pretraining import ElectraPretrainingModel
from electra.saved import folders

ROOT = Path(__file__).resolve().parents[1]  # the checkout
SHARED_DATA = ROOT.parent / "shared" / "data"

SPECIAL = SpecialTokens(pad=0, unk=1, cls=2, sep=3, mask=4)

def tiny_config(**overrides) -> ModelConfig:
    """A very small model: 2 layers, width 32, vocabulary 101."""
    base = dict(vocab_size=101, embedding_size=24, hidden_size=32, num_layers=2, num_heads=4,
                intermediate_size=64, max_position_embeddings=64, hidden_dropout=0.0,
                attention_dropout=0.0)
    return model_preset("tiny", **{**base, **overrides})

def make_batch(lengths: list[int], T: int, vocab_size: int = 101, seed: int = 0):
    """[CLS] w... [SEP] rows of the given lengths, padded to T; returns ids, mask, types."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.full((len(lengths), T), SPECIAL.pad, dtype=torch.long)
    for r, n in enumerate(lengths):
        ids[r, 0] = SPECIAL.cls
        ids[r, 1 : n - 1] = torch.randint(5, vocab_size, (n - 2,), generator=g)
        ids[r, n - 1] = SPECIAL.sep
    mask = (ids != SPECIAL.pad).long()
    types = torch.zeros_like(ids)
    return ids, mask, types

def cli_error(capsys, *args) -> str:
    """Run `electra ARGS`; assert exit code 2 and a one-line error; return that line."""
    from electra.cli import main

    capsys.readouterr()  # what earlier commands printed (notes, progress) is not this one's
    assert main([str(a) for a in args]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0, err
    return err

def shared_data(sub: str) -> Path:
    """A path under ../shared/data, or skip the test with the reason."""
    path = SHARED_DATA / sub
    if not path.exists():
        pytest.skip(f"{path} is absent (the shared real-data folder is not beside the checkout)")
    return path

def small_model(vocab_size: int = 30522, **kw):
    base = dict(vocab_size=vocab_size, embedding_size=32, hidden_size=32, num_layers=2,
                num_heads=2, intermediate_size=64, max_position_embeddings=64)
    return model_preset("tiny", **{**base, **kw})

LETTERS = "abcdefghij"

def write_corpus(path: Path, n_docs: int = 40, seed: int = 0) -> list[list[str]]:
    """Documents whose words use one letter each (doc k: letter k % 10), BERT format."""
    rng = random.Random(seed)
    docs = []
    for k in range(n_docs):
        c = LETTERS[k % len(LETTERS)]
        lines = [" ".join(c * rng.randint(1, 6) for _ in range(rng.randint(3, 30)))
                 for _ in range(rng.randint(1, 12))]
        docs.append(lines)
    path.write_text("\n\n".join("\n".join(d) for d in docs) + "\n", encoding="utf-8")
    return docs

def write_sentiment(path: Path, n: int, seed: int) -> None:
    rng = random.Random(seed)
    filler = ["the", "a", "movie", "film", "plot", "actors", "story", "was", "is", "quite",
              "really", "very"]
    rows = ["text,label"]
    for _ in range(n):
        label = rng.choice(["pos", "neg"])
        cue = rng.choice(["good", "great", "lovely"] if label == "pos" else
                         ["bad", "awful", "boring"])
        words = [rng.choice(filler) for _ in range(rng.randint(3, 8))]
        words.insert(rng.randrange(len(words) + 1), cue)
        rows.append(f"{' '.join(words)},{label}")
    path.write_text("\n".join(rows) + "\n")

def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()

def snapshot(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): sha(p) if p.is_file() else "dir"
            for p in sorted(root.rglob("*"))}

# What a dying process prints about why: a C++ exception's std::terminate (gloo's I/O threads
# throw there), faulthandler's report of a fatal signal, a Python error's last line.
FATAL = ("terminate called", "what():", "Fatal Python error", "Error: ", "Error(")


def why_failed(res: subprocess.CompletedProcess, tail: int = 2000, context: int = 40) -> str:
    """A failed launch's stderr for an assertion message: each report of a fatal error, from
    whichever rank printed it (with ``context`` lines after it: faulthandler's stacks), then
    the last ``tail`` characters. torchrun ends with the rank it stopped, which buries the
    first rank to die."""
    lines = res.stderr.splitlines()
    keep: set[int] = set()
    for i, line in enumerate(lines):
        if any(marker in line for marker in FATAL):
            keep.update(range(i, min(i + context, len(lines))))
    reports = "\n".join(lines[i] for i in sorted(keep))
    return f"exit {res.returncode}; fatal reports:\n{reports[-12000:]}\n--- tail:\n" \
        f"{res.stderr[-tail:]}"


def launch(nproc: int, *args, timeout: float = 240, prefix: list[str] | None = None,
           env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """`torchrun --standalone --nproc-per-node N -m electra ARGS` (one thread per process)."""
    # faulthandler: a rank that dies in native code still shows where its Python was.
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONFAULTHANDLER": "1", **(env or {})}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           f"--nproc-per-node={nproc}", *(prefix or ["-m", "electra"]), *map(str, args)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)

def make_run(tmp_path: Path, preset: str, **overrides) -> tuple[Path, ElectraPretrainingModel]:
    """A run folder with trained-looking (random, non-zero) weights and a real tokenizer;
    ``overrides`` change the preset's model settings."""
    text = tmp_path / "c.txt"
    write_corpus(text)
    tok = train_tokenizer([str(text)], 120, tmp_path / "tok")
    torch.manual_seed(0)
    model = ElectraPretrainingModel(model_preset(preset, vocab_size=tok.get_vocab_size(),
                                                 **overrides))
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.02)  # biases and LayerNorms away from their init
    run = tmp_path / "run"
    for kind in ("discriminator", "generator"):
        folders.save(getattr(model, kind), kind, run / kind, tok)
    return run, model.eval()


SYNCS = ("item", "tolist", "__bool__", "__int__", "__float__", "__index__")


@contextlib.contextmanager
def no_syncs(monkeypatch):
    """Any read of a tensor's value on the host (a device sync on a GPU) raises."""
    with monkeypatch.context() as m:
        for name in SYNCS:
            def refuse(self, *a, _name=name, **k):
                raise AssertionError(f"the step called Tensor.{_name}")
            m.setattr(torch.Tensor, name, refuse)
        yield


@contextlib.contextmanager
def host_reads(monkeypatch):
    """The reads of a tensor's value on the host (each a device sync on a GPU) made inside,
    by name, in order: SYNCS and ``nonzero``, whose output's size is read. (Boolean-mask
    indexing reads too, inside C++, where this cannot see it.)"""
    reads: list[str] = []
    with monkeypatch.context() as m:
        for name in (*SYNCS, "nonzero"):
            real = getattr(torch.Tensor, name)
            def counted(self, *a, _name=name, _real=real, **k):
                reads.append(_name)
                return _real(self, *a, **k)
            m.setattr(torch.Tensor, name, counted)
        m.setattr(torch, "nonzero", lambda x, *a, **k: torch.Tensor.nonzero(x, *a, **k))
        yield reads


def ctrl_c_in_step(monkeypatch, n: int) -> None:
    """Ctrl-C in the middle of the n-th training step of this process (after its forward),
    as a user's lands: the scaffold saves the last completed step and exits 130."""
    from electra.train.trainer import Trainer

    real = Trainer.train_step
    calls = {"n": 0}

    def interrupted(self, micro_step, tokens=0):
        calls["n"] += 1
        if calls["n"] == n:

            def forward_then_ctrl_c(model, j):
                micro_step(model, j)
                raise KeyboardInterrupt

            return real(self, forward_then_ctrl_c, tokens)
        return real(self, micro_step, tokens)

    monkeypatch.setattr(Trainer, "train_step", interrupted)


def default_sigint() -> None:
    """A child's SIGINT as a terminal's foreground command has it (a ``preexec_fn``): a suite
    run as a background job of a shell (`cmd &`, as CI may start it) ignores SIGINT, children
    inherit that, and Python keeps it, so no Ctrl-C could reach the command under test."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


def traced(fn):
    """``fn`` compiled by dynamo alone (backend ``eager``: traced, not code-generated, so
    the test takes seconds), whole-graph (a break raises), and dynamo's counters reset."""
    import torch._dynamo.utils as du

    torch._dynamo.reset()
    du.counters.clear()
    return torch.compile(fn, backend="eager", fullgraph=True), du.counters


def traced_steps(data_path, model_cfg, objective, steps: int = 6, generator=None,
                 precision: str = "fp32"):
    """``steps`` pretraining steps with the step's forward traced whole (:func:`traced`):
    (the graphs dynamo made, the kinds of batch seen: with and without padding)."""
    from electra.config import TrainConfig
    from electra.data.loader import BatchLoader, ShardDataset
    from electra.run_config import RunConfig
    from electra.runtime import Runtime
    from electra.train.pretraining import make_trainer, train_step

    data = ShardDataset(str(data_path))
    cfg = RunConfig(model=model_cfg, objective=objective, train=TrainConfig(
        batch_size=4, precision=precision, max_steps=steps + 2, warmup_steps=1))
    torch.manual_seed(0)
    rt = Runtime()
    model = ElectraPretrainingModel(cfg.model, cfg.objective, data.special,
                                    rt.model_kernels(False))
    if generator is not None:
        model.attach_generator(generator)
    trainer = make_trainer(model, cfg, rt)
    trainer.step_model, counters = traced(trainer.step_model)
    loader = BatchLoader(data, 4, seed=0)
    kinds = set()
    for _ in range(steps):
        batch = next(loader)
        kinds.add(bool(batch["attention_mask"].all()))
        train_step(trainer, batch, cfg, data.special, 4)
    assert not counters["graph_break"], dict(counters["graph_break"])
    return counters["stats"]["unique_graphs"], kinds
