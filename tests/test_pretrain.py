"""The pretraining loop: exact resume, checkpoints that refuse to half-load, learning on real
text, metrics, configs and the bad-input contract."""

from __future__ import annotations

import dataclasses
import errno
import json
import shutil
from itertools import pairwise
from pathlib import Path

import pytest
import torch
from helpers import cli_error, host_reads, no_syncs, small_model, snapshot, write_corpus
from safetensors.torch import load_file

from electra.cli import main
from electra.commands.pretrain import PretrainOptions, pretrain
from electra.config import TrainConfig
from electra.data.prepare import PrepareOptions, prepare
from electra.data.tokenizer import train_tokenizer
from electra.errors import UserError
from electra.experiments.demo import python_docs_corpus
from electra.objectives import pretraining as objectives
from electra.objectives.config import ObjectiveConfig
from electra.run_config import RunConfig
from electra.train.metrics import TIMING_KEYS, iter_metrics
from electra.train.optim import schedule
from electra.train.trainer import TrainingDiverged


@pytest.fixture
def data(letters_data) -> Path:
    return letters_data


def config(**train) -> RunConfig:
    t = dict(lr=1e-3, batch_size=8, warmup_steps=3, max_steps=12, log_every=1, eval_every=4,
             eval_batches=2, save_every=4, precision="fp32", seed=7)
    return RunConfig(model=small_model(hidden_dropout=0.1, attention_dropout=0.1),
                     train=TrainConfig(**{**t, **train}))


def run(data: Path, out: Path, cfg: RunConfig, **kw) -> dict:
    return pretrain(PretrainOptions(data=str(data), out=str(out), config=cfg, progress=False,
                                    **kw))


def without_timing(records: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k not in TIMING_KEYS} for r in records]


def assert_same_runs(a: Path, b: Path) -> None:
    """Two runs' every metrics line (timing aside) and every final weight, bit for bit."""
    assert without_timing(list(iter_metrics(a))) == without_timing(list(iter_metrics(b)))
    for kind in ("discriminator", "generator"):
        wa, wb = (load_file(r / kind / "model.safetensors") for r in (a, b))
        assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa), kind


def test_resume_equals_uninterrupted_run(data, tmp_path):
    cfg = config()
    run(data, tmp_path / "a", cfg)
    run(data, tmp_path / "b", cfg, stop_after=5)
    assert sorted(p.name for p in (tmp_path / "b/checkpoints").iterdir())[-1] == "step-0000005"
    run(data, tmp_path / "b", cfg, resume=True, stop_after=2)  # stop and resume twice
    run(data, tmp_path / "b", cfg, resume=True)
    a = without_timing(list(iter_metrics(tmp_path / "a")))
    b = without_timing(list(iter_metrics(tmp_path / "b")))
    assert [r["step"] for r in b] == list(range(1, 13))
    assert a == b
    assert "val_disc_auc" in a[3]
    for kind in ("discriminator", "generator"):
        wa = load_file(tmp_path / "a" / kind / "model.safetensors")
        wb = load_file(tmp_path / "b" / kind / "model.safetensors")
        assert wa.keys() == wb.keys()
        assert all(torch.equal(wa[k], wb[k]) for k in wa), kind


def test_ctrl_c_mid_step_saves_a_checkpoint_that_resumes_exactly(data, tmp_path,
                                                                monkeypatch):
    cfg = config(save_every=100, grad_accum=2, eval_every=0)
    run(data, tmp_path / "a", cfg)
    real = objectives.electra_forward
    calls = {"n": 0}

    def interrupted(*args, **kw):
        calls["n"] += 1
        if calls["n"] == 12:  # the 2nd micro-batch of step 6
            raise KeyboardInterrupt
        return real(*args, **kw)

    monkeypatch.setattr(objectives, "electra_forward", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run(data, tmp_path / "b", cfg)
    monkeypatch.undo()
    assert [p.name for p in (tmp_path / "b/checkpoints").iterdir()] == ["step-0000005"]
    run(data, tmp_path / "b", cfg, resume=True)
    assert without_timing(list(iter_metrics(tmp_path / "a"))) == without_timing(
        list(iter_metrics(tmp_path / "b")))
    wa = load_file(tmp_path / "a/discriminator/model.safetensors")
    wb = load_file(tmp_path / "b/discriminator/model.safetensors")
    assert all(torch.equal(wa[k], wb[k]) for k in wa)


def test_metrics_lines_have_the_promised_fields(data, tmp_path):
    run(data, tmp_path / "r", config(max_steps=4))
    rec = list(iter_metrics(tmp_path / "r"))
    for key in ("step", "tokens", "lr", "loss", "gen_loss", "disc_loss", "gen_acc", "disc_acc",
                "masked_frac", "replaced_frac", "sampled_original_frac", "tokens_per_s"):
        assert key in rec[0], key
    assert rec[-1]["tokens"] > rec[0]["tokens"] > 0
    for key in ("val_gen_loss", "val_gen_acc", "val_disc_loss", "val_disc_acc", "val_disc_auc"):
        assert key in rec[-1], key
    assert list((tmp_path / "r/tb").iterdir())  # TensorBoard events
    assert rec[-1]["loss"] == pytest.approx(rec[-1]["gen_loss"] + 50 * rec[-1]["disc_loss"],
                                            rel=1e-5)
    from electra.experiments.plot import plot_run

    png = plot_run(tmp_path / "r")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("damage", ["truncate", "flip"])
def test_damaged_checkpoint_is_refused_before_loading(data, tmp_path, damage):
    run(data, tmp_path / "r", config(), stop_after=4)
    weights = tmp_path / "r/checkpoints/step-0000004/model.safetensors"
    blob = bytearray(weights.read_bytes())
    if damage == "truncate":
        weights.write_bytes(blob[: len(blob) // 2])
    else:
        blob[-5] ^= 0xFF
        weights.write_bytes(bytes(blob))
    with pytest.raises(UserError, match="truncated" if damage == "truncate" else "corrupted"):
        run(data, tmp_path / "r", config(), resume=True)


def test_full_disk_keeps_the_previous_checkpoint(data, tmp_path, monkeypatch):
    run(data, tmp_path / "r", config(), stop_after=4)
    import electra.io.checkpoint as ck

    def no_space(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(ck, "save_model", no_space)
    with pytest.raises(UserError, match=r"No space left.*step-0000004 is intact"):
        run(data, tmp_path / "r", config(), resume=True)
    monkeypatch.undo()
    assert not list((tmp_path / "r/checkpoints").glob("*.partial"))
    ck.verify_checkpoint(tmp_path / "r/checkpoints/step-0000004")  # still whole


def test_the_sync_free_step_reads_nothing_on_the_host_and_trains_bitwise_as_before(
        data, tmp_path, monkeypatch, sync_free):
    # A GPU's path (fused AdamW) on the CPU: no step between two metrics lines waits for the
    # device, and the run's every metrics line and weight equal the host-checked step's.
    import electra.train.pretraining as command
    from electra.train.trainer import Trainer

    real_step, steps = command.train_step, []

    def checked(*args, **kw):
        with no_syncs(monkeypatch):
            out = real_step(*args, **kw)
        steps.append(args[0].sync_free)
        return out

    monkeypatch.setattr(command, "train_step", checked)
    cfg = config(grad_accum=2, eval_every=0)
    run(data, tmp_path / "free", cfg)
    assert len(steps) == 12 and all(steps)
    monkeypatch.setattr(command, "train_step", real_step)
    real_init = Trainer.__init__

    def host_checked(self, *a, **k):
        real_init(self, *a, **k)
        self.sync_free = False

    monkeypatch.setattr(Trainer, "__init__", host_checked)
    run(data, tmp_path / "host", cfg)
    assert_same_runs(tmp_path / "free", tmp_path / "host")


@pytest.fixture(scope="module")
def packed_letters(letters_data, tmp_path_factory) -> Path:
    """The letters corpus packed (``prepare --pack``): rows of several sequences."""
    root = tmp_path_factory.mktemp("packed")
    prepare(PrepareOptions(inputs=[str(letters_data.parent / "c.txt")], tokenizer=str(
        letters_data.parent / "tok"), out=str(root / "data"), seq_len=32, val_fraction=0.2,
        pack=True, quiet=True))
    return root / "data"


@pytest.mark.parametrize("rows", ["padded", "packed"])
def test_the_gpu_paths_unpadded_step_reads_nothing_and_equals_the_device_layouts(
        data, packed_letters, tmp_path, monkeypatch, sync_free, rows):
    """A GPU's step (torch's kernels, fused AdamW) with ``train.unpad`` on rows with padding
    and on packed rows: each micro-batch's layout comes from the host with the rows, so no
    step reads the device (the layout read it twice a micro-batch, once per encoder); the run
    (its metrics lines, validation included, and weights) equals the one whose encoders
    compute the layouts on the device."""
    import electra.train.pretraining as command
    from electra.model.kernels import REFERENCE
    from electra.runtime import Runtime

    folder = data if rows == "padded" else packed_letters
    cfg = config(grad_accum=2, eval_every=6, unpad=True)
    real_step, checked_steps = command.train_step, []

    def checked(*args, **kw):
        with host_reads(monkeypatch) as reads:  # item, tolist, ..., nonzero
            out = real_step(*args, **kw)
        checked_steps.append(reads)
        return out

    def go(name: str) -> None:
        pretrain(PretrainOptions(data=str(folder), out=str(tmp_path / name), config=cfg,
                                 progress=False), Runtime(chosen_kernels=REFERENCE))

    monkeypatch.setattr(command, "train_step", checked)
    go("host")
    assert checked_steps == [[]] * 12
    monkeypatch.setattr(command, "train_step", real_step)
    monkeypatch.setattr(command, "host_layouts", lambda *a: None)  # the encoders' own
    go("device")
    assert_same_runs(tmp_path / "host", tmp_path / "device")


def test_nonfinite_loss_stops_with_the_step_or_is_skipped(data, tmp_path, monkeypatch):
    real = objectives.electra_forward
    calls = {"n": 0}

    def poisoned(*args, **kw):
        out = real(*args, **kw)
        calls["n"] += 1
        if calls["n"] == 6:  # the 6th training batch (no validation before step 8)
            out.loss = out.loss * float("nan")
        return out

    monkeypatch.setattr(objectives, "electra_forward", poisoned)
    with pytest.raises(TrainingDiverged, match=r"step 6 .*step-0000004"):
        run(data, tmp_path / "r", config(eval_every=0))
    ck = tmp_path / "r/checkpoints/step-0000004"
    from electra.io.checkpoint import verify_checkpoint

    verify_checkpoint(ck)
    calls["n"] = 0
    run(data, tmp_path / "s", config(eval_every=0, max_nonfinite_skips=1))
    assert list(iter_metrics(tmp_path / "s"))[-1]["step"] == 12


def test_batch_warmup_grows_in_micro_batches_and_resumes_bitwise(data, tmp_path):
    """train.batch_warmup=2:400 with batches of 8 in 4 micro-batches of 2, rows of 32 tokens:
    2 while fewer than 192 token positions are behind (2 + 6 x seen/400 < 4), then 4, 6 and
    the full 8. A step of k micro-batches is the k-micro-batch accumulation: the first steps
    (one micro-batch of 2) are a run of batch 2's, metrics for metrics. Stopped inside the
    warmup and resumed, the run is the uninterrupted one; max_tokens counts the warmup's
    smaller steps."""
    cfg = config(batch_size=8, grad_accum=4, batch_warmup="2:400", eval_every=0, max_steps=8,
                 save_every=2)
    run(data, tmp_path / "w", cfg)
    lines = without_timing(list(iter_metrics(tmp_path / "w")))
    assert [r["batch_size"] for r in lines] == [2, 2, 2, 4, 6, 8, 8, 8]
    run(data, tmp_path / "b2", config(batch_size=2, eval_every=0, max_steps=8, save_every=2))
    two = without_timing(list(iter_metrics(tmp_path / "b2")))
    assert [{k: v for k, v in r.items() if k != "batch_size"} for r in lines[:3]] == two[:3]
    assert lines[3]["tokens"] > two[3]["tokens"]  # then twice the rows
    run(data, tmp_path / "r", cfg, stop_after=4)  # inside the warmup
    run(data, tmp_path / "r", cfg, resume=True)
    assert without_timing(list(iter_metrics(tmp_path / "r"))) == lines
    a, b = (load_file(tmp_path / r / "discriminator/model.safetensors") for r in ("w", "r"))
    assert all(torch.equal(a[k], b[k]) for k in a)
    # 2+2+2+4+6 = 16 rows in the warmup, then 8 a step: 40 rows are 5 + 3 steps
    run(data, tmp_path / "t", config(batch_size=8, grad_accum=4, batch_warmup="2:400",
                                     eval_every=0, max_tokens=40 * 32, save_every=100))
    assert list(iter_metrics(tmp_path / "t"))[-1]["step"] == 8


def test_length_phases_switch_at_the_planned_step_and_resume_across_it(data, tmp_path,
                                                                          capsys):
    """train.phases=32:0.75,64:0.25 over 8 steps with --data of each length: steps 1-6 read
    32-token rows, 7-8 the 64-token folder (each step's real tokens show it), validation at
    the end on the 64-token held-out split; stopped before the switch and after it, the run
    resumes to the uninterrupted one bitwise. --data of two folders needs phases naming them."""
    root = data.parent
    prepare(PrepareOptions(inputs=[str(root / "c.txt")], tokenizer=str(root / "tok"),
                           out=str(tmp_path / "d64"), seq_len=64, val_fraction=0.2,
                           quiet=True))
    both = f"{data},{tmp_path / 'd64'}"
    cfg = config(phases="32:0.75,64:0.25", max_steps=8, eval_every=0, save_every=2)
    run(both, tmp_path / "a", cfg)
    lines = without_timing(list(iter_metrics(tmp_path / "a")))
    added = [b["tokens"] - a["tokens"] for a, b in pairwise([{"tokens": 0}, *lines])]
    assert max(added[:6]) <= 8 * 32 < min(added[6:]), added
    assert "val_disc_auc" in lines[-1]
    run(both, tmp_path / "b", cfg, stop_after=5)
    run(both, tmp_path / "b", cfg, resume=True, stop_after=2)  # across the switch at 6
    run(both, tmp_path / "b", cfg, resume=True)
    assert without_timing(list(iter_metrics(tmp_path / "b"))) == lines
    a, b = (load_file(tmp_path / r / "discriminator/model.safetensors") for r in ("a", "b"))
    assert all(torch.equal(a[k], b[k]) for k in a)
    # Two folders without phases, or of one length, or a phase that gets no step: one line.
    args = ("pretrain", "--preset", "tiny", "--data", both, "--quiet", "--out")
    assert "2 folders; give one, or set train.phases" in cli_error(capsys, *args,
                                                                   tmp_path / "e1")
    assert "two folders hold 32-token rows" in cli_error(
        capsys, "pretrain", "--preset", "tiny", "--data", f"{data},{data}", "--set",
        "train.phases=32:0.5,64:0.5", "--quiet", "--out", tmp_path / "e2")
    assert "a phase gets no step of train.max_steps=8" in cli_error(
        capsys, *args, tmp_path / "e3", "--set", "train.phases=32:0.99,64:0.01", "--set",
        "train.max_steps=8")
    assert not any((tmp_path / f"e{i}").exists() for i in (1, 2, 3))


@pytest.mark.parametrize("name", ["stableadamw", "lamb", "muon"])
def test_each_optimizer_trains_its_own_way_and_resumes_bitwise(data, tmp_path, name):
    """train.optimizer: pytorch-optimizer's StableAdamW or LAMB steps the run (weights unlike
    AdamW's), and its state (moments, step counts in the groups) goes into the checkpoint:
    a run stopped and resumed equals the uninterrupted one, metrics and weights."""
    cfg = config(optimizer=name, eval_every=0, max_steps=6, save_every=3)
    run(data, tmp_path / "a", cfg)
    run(data, tmp_path / "b", cfg, stop_after=3)
    run(data, tmp_path / "b", cfg, resume=True)
    run(data, tmp_path / "adamw", config(eval_every=0, max_steps=6, save_every=3))
    a = without_timing(list(iter_metrics(tmp_path / "a")))
    assert a == without_timing(list(iter_metrics(tmp_path / "b")))
    weights = {r: load_file(tmp_path / r / "discriminator/model.safetensors")
               for r in ("a", "b", "adamw")}
    assert all(torch.equal(weights["a"][k], weights["b"][k]) for k in weights["a"])
    assert not all(torch.equal(weights["a"][k], weights["adamw"][k]) for k in weights["a"])
    saved = torch.load(tmp_path / "b/checkpoints/step-0000006/state.pt", weights_only=False)
    if name == "muon":  # the blocks' matrices by Muon (a momentum buffer), the rest by AdamW
        groups = saved["optimizer"]["param_groups"]
        assert [g["muon"] for g in groups] == [True, False, False]
        states = saved["optimizer"]["state"]
        assert all(set(states[i]) == {"momentum_buffer"} for i in groups[0]["params"])
        assert all("exp_avg" in states[i] for g in groups[1:] for i in g["params"])
        return
    assert [g["step"] for g in saved["optimizer"]["param_groups"]] == [6, 6]


@pytest.mark.parametrize("name", ["cosine", "wsd"])
def test_other_schedules_resume_bitwise_inside_their_decay(data, tmp_path, name):
    """train.schedule: the rate each step logs is the schedule's (wsd: 3 warmup steps, the
    peak, then the last quarter of 12 steps decaying); a run stopped inside the decay and
    resumed equals the uninterrupted one."""
    cfg = config(schedule=name, decay_fraction=0.25)
    run(data, tmp_path / "a", cfg)
    run(data, tmp_path / "b", cfg, stop_after=10)
    run(data, tmp_path / "b", cfg, resume=True)
    a = without_timing(list(iter_metrics(tmp_path / "a")))
    assert a == without_timing(list(iter_metrics(tmp_path / "b")))
    f = schedule(name, 3, 12, 0.25)
    assert [r["lr"] for r in a] == [pytest.approx(1e-3 * f(r["step"])) for r in a]
    if name == "wsd":
        assert [r["lr"] for r in a][3:9] == [1e-3] * 6


@pytest.fixture(scope="module")
def real_text(tmp_path_factory) -> Path:
    """Python's own docs (always present) packed into 64-token examples, 20 docs held out
    (a 2,000-token vocabulary); the tests that train on it only read it."""
    tmp_path, vocab = tmp_path_factory.mktemp("real-text"), 2000
    docs = python_docs_corpus(max_bytes=600_000)
    text = tmp_path / "docs.txt"
    text.write_text("\n\n".join("\n".join(d) for d in docs[20:]) + "\n")
    held = tmp_path / "held.txt"
    held.write_text("\n\n".join("\n".join(d) for d in docs[:20]) + "\n")
    train_tokenizer([str(text)], vocab, tmp_path / "tok")
    prepare(PrepareOptions(inputs=[str(text)], val_inputs=[str(held)], tokenizer=str(
        tmp_path / "tok"), out=str(tmp_path / "data"), seq_len=64, quiet=True))
    return tmp_path / "data"


@pytest.mark.slow
def test_fast_path_trains_like_the_reference_path(real_text, tmp_path):
    """The default precision (bf16 on a CPU with bf16 units, fp32 where bf16 would be
    emulated) + inverse-CDF sampling + lane dropout (what `electra pretrain` runs) against
    fp32 + Gumbel-max + torch's Bernoulli dropout: over 200 steps on real text the losses
    agree within what a change of seed moves them."""
    from electra.model.kernels import REFERENCE
    from electra.runtime import Runtime

    data = real_text

    def losses(name: str, precision: str, sampling: str, seed: int,
               rt: Runtime | None = None) -> tuple[float, float]:
        cfg = RunConfig(objective=ObjectiveConfig(sampling=sampling),
                        model=small_model(embedding_size=64, hidden_size=64,
                                          intermediate_size=256, hidden_dropout=0.1,
                                          attention_dropout=0.1),
                        train=TrainConfig(lr=2e-3, batch_size=32, warmup_steps=20,
                                          max_steps=200, log_every=10, eval_every=0,
                                          save_every=200, precision=precision, seed=seed))
        pretrain(PretrainOptions(data=str(data), out=str(tmp_path / name), config=cfg,
                                 progress=False), rt)
        tail = list(iter_metrics(tmp_path / name))[-5:]  # the last 50 steps
        return (sum(r["gen_loss"] for r in tail) / 5, sum(r["disc_loss"] for r in tail) / 5)

    fast = losses("fast", "auto", "inverse_cdf", seed=0)
    other_seed = losses("seed", "auto", "inverse_cdf", seed=1)
    reference = losses("ref", "fp32", "gumbel", 0, Runtime(chosen_kernels=REFERENCE))
    for i, name in enumerate(("gen_loss", "disc_loss")):
        noise = abs(fast[i] - other_seed[i])
        assert abs(fast[i] - reference[i]) < 3 * noise + 0.02 * reference[i], (
            name, fast[i], reference[i], other_seed[i])


@pytest.mark.slow
@pytest.mark.parametrize("body", ["bert", "modernbert", "deberta"])
def test_learns_on_real_text(real_text, tmp_path, body):
    """Python's own docs, 150 steps of a tiny model of each body (DeBERTa's with GDES, as V3
    pretrains): the generator is far above chance on masked tokens and the discriminator
    beats the all-original guess. (250 steps until 2026-12-05; on the 2-core AVX2 EPYC, at
    150 steps against 250: the discriminator 0.70-1.12 points over the guess against
    0.91-2.15, ROC-AUC 0.82-0.84 against 0.83-0.84, the generator's loss down 1.52-1.66
    against 1.52-1.85, its accuracy 4.7-13% against 7.6-20%.)

    Sampling runs at temperature 3 here. At temperature 1 a run this short stays on the
    all-original plateau (the generator's unigram-like samples can only be told apart by
    context, which RTD learns slowly at this size; transformers' ELECTRA does the same, see
    README); flatter samples are detectable from the start, so the test can show the
    discriminator learning through the real trainer within seconds. At the default precision
    (bf16 where the CPU has bf16 units; emulated it took 177 s on an AVX2-only EPYC)."""
    data = real_text
    cfg = RunConfig(objective=ObjectiveConfig(temperature=3.0, sharing="gdes" if body ==
                                              "deberta" else "embeddings"),
                    model=small_model(embedding_size=64, hidden_size=64, num_layers=2,
                                      num_heads=2, intermediate_size=256,
                                      generator_size=0.5, body=body, local_attention=16,
                                      position_buckets=32),  # DeBERTa's, on 64-token rows
                    train=TrainConfig(lr=2e-3, batch_size=32, warmup_steps=20, max_steps=150,
                                      log_every=25, eval_every=75, eval_batches=8,
                                      save_every=150, precision="auto", seed=0))
    last = run(data, tmp_path / "run", cfg)
    rec = list(iter_metrics(tmp_path / "run"))
    assert rec[-1]["gen_loss"] < rec[0]["gen_loss"] - 1.5
    assert last["val_disc_acc"] > last["val_baseline_acc"] + 0.002
    assert last["val_disc_auc"] > 0.7
    assert last["val_gen_acc"] > 50 / 2000  # chance is 1/2000


@pytest.mark.parametrize(("seq_len", "batch"), [(1024, 2), (8192, 1)])
def test_modernbert_pretrains_on_long_rows(tmp_path, seq_len, batch):
    """Rows of 1,024 and 8,192 tokens (long documents: rows filled to the end), a tiny
    ModernBERT body (two local blocks of a 128-token window between global ones): the
    generator's prediction slots follow the length, every row's positions reach its end
    (RoPE past the BERT presets' 512), and the losses are finite and fall. (One row of
    8,192 a step: the step's global attention is most of the test's time.)"""
    lines = [line for d in python_docs_corpus(max_bytes=400_000) for line in d]
    text = tmp_path / "long.txt"  # documents of 1,500 lines (~30k tokens) each
    text.write_text("\n\n".join("\n".join(lines[i:i + 1500])
                                for i in range(0, len(lines), 1500)) + "\n")
    train_tokenizer([str(text)], 1000, tmp_path / "tok")
    prepare(PrepareOptions(inputs=[str(text)], tokenizer=str(tmp_path / "tok"),
                           out=str(tmp_path / "data"), seq_len=seq_len, quiet=True))
    cfg = RunConfig(model=small_model(body="modernbert", embedding_size=64, hidden_size=64,
                                      num_layers=3, num_heads=2, intermediate_size=96,
                                      max_position_embeddings=8192, hidden_dropout=0.0,
                                      attention_dropout=0.0),
                    train=TrainConfig(lr=3e-3, batch_size=batch, warmup_steps=1, max_steps=4,
                                      log_every=1, eval_every=0, save_every=4,
                                      precision="auto", seed=0))
    run(tmp_path / "data", tmp_path / "run", cfg)
    saved = json.loads((tmp_path / "run/config.json").read_text())
    assert saved["objective"]["max_predictions"] == int(0.155 * seq_len)
    rec = list(iter_metrics(tmp_path / "run"))
    tokens = [0] + [r["tokens"] for r in rec]  # counted from the start of the run
    per_step = [b - a for a, b in pairwise(tokens)]
    assert max(per_step) == batch * seq_len  # rows filled to their last position...
    assert sum(per_step) > 0.75 * batch * seq_len * len(rec)  # ...but a few document ends
    assert all(torch.isfinite(torch.tensor([r["gen_loss"], r["disc_loss"]])).all()
               for r in rec)
    assert rec[-1]["gen_loss"] < rec[0]["gen_loss"]


def cli(*args) -> int:
    return main([str(a) for a in args])


def test_pretrain_bad_input(data, tmp_path, capsys):
    def err(*args) -> str:
        return cli_error(capsys, "pretrain", *args)

    (tmp_path / "plain").mkdir()
    assert "not prepared data" in err("--preset", "tiny", "--data", tmp_path / "plain",
                                      "--out", tmp_path / "o")
    assert "valid keys" in err("--preset", "tiny", "--data", data, "--out", tmp_path / "o",
                               "--set", "train.nope=1")
    assert "not divisible" in err("--preset", "tiny", "--data", data, "--out", tmp_path / "o",
                                  "--set", "batch_size=10", "--set", "grad_accum=3")
    assert "exceeds the model's 16 positions" in err(
        "--preset", "tiny", "--data", data, "--out", tmp_path / "o", "--set",
        "max_position_embeddings=16")
    # A run folder is not overwritten by accident, and not by a different config on resume.
    assert cli("pretrain", "--preset", "tiny", "--data", data, "--out", tmp_path / "r",
               "--quiet", "--set", "max_steps=2", "--set", "batch_size=4",
               "--stop-after", "1") == 0
    assert "--resume" in err("--preset", "tiny", "--data", data, "--out", tmp_path / "r")
    assert "settings differ" in err("--preset", "tiny", "--data", data, "--out", tmp_path / "r",
                                    "--resume", "--set", "max_steps=2", "--set",
                                    "batch_size=8")
    # Data made with another tokenizer than the run's.
    other = tmp_path / "other"
    write_corpus(tmp_path / "x.txt", n_docs=40, seed=1)
    train_tokenizer([str(tmp_path / "x.txt")], 100, tmp_path / "tok2", lowercase=False)
    prepare(PrepareOptions(inputs=[str(tmp_path / "x.txt")], tokenizer=str(tmp_path / "tok2"),
                           out=str(other), seq_len=32, quiet=True))
    assert "tokenizer" in err("--preset", "tiny", "--data", other, "--out", tmp_path / "r",
                              "--resume", "--set", "max_steps=2", "--set", "batch_size=4")
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine/notes.txt").write_text("keep")
    assert "holds files electra did not write" in err("--preset", "tiny", "--data", data,
                                                      "--out", tmp_path / "mine", "--overwrite")
    assert (tmp_path / "mine/notes.txt").read_text() == "keep"
    # --resume alone reuses the saved config.
    assert cli("pretrain", "--data", data, "--out", tmp_path / "r", "--resume", "--quiet",
               "--set", "max_steps=2") == 0
    saved = json.loads((tmp_path / "r/config.json").read_text())
    assert saved["train"]["batch_size"] == 4
    # A finished run is not finished again (its cards' held-out results were rewritten
    # empty): --resume is refused and changes nothing, as finetune's and demo's are.
    card = (tmp_path / "r/discriminator/README.md").read_text()
    assert "accuracy" in card
    before = snapshot(tmp_path / "r")
    said = err("--data", data, "--out", tmp_path / "r", "--resume")
    assert "is finished (2 of 2 steps, its models written)" in said and "--overwrite" in said
    assert snapshot(tmp_path / "r") == before


def test_accumulation_trains_like_one_big_batch(data, tmp_path):
    """batch 8 in 4 micro-batches of 2 = batch 8 at once: the step's masking draws and loss
    denominators are the global batch's, so (without dropout) only summation order differs."""
    def cfg(accum: int) -> RunConfig:
        return RunConfig(model=small_model(hidden_dropout=0.0, attention_dropout=0.0),
                         train=TrainConfig(lr=1e-3, batch_size=8, grad_accum=accum,
                                           warmup_steps=3, max_steps=8, log_every=1,
                                           eval_every=4, eval_batches=2, save_every=8,
                                           precision="fp32", seed=5))
    run(data, tmp_path / "one", cfg(1))
    run(data, tmp_path / "four", cfg(4))
    a = without_timing(list(iter_metrics(tmp_path / "one")))
    b = without_timing(list(iter_metrics(tmp_path / "four")))
    for ra, rb in zip(a, b, strict=True):
        assert ra["tokens"] == rb["tokens"]  # the same examples
        for key in ra:
            assert ra[key] == pytest.approx(rb[key], rel=1e-4, abs=1e-6), (ra["step"], key)
    wa = load_file(tmp_path / "one/discriminator/model.safetensors")
    wb = load_file(tmp_path / "four/discriminator/model.safetensors")
    for k in wa:
        torch.testing.assert_close(wa[k], wb[k], rtol=1e-4, atol=1e-5)


def test_resume_between_log_lines_writes_the_same_metrics(data, tmp_path):
    """Checkpoints at steps 4 and 8, lines every 3 steps: the steps since the last line are
    part of the checkpoint, so the resumed run's lines equal the uninterrupted run's."""
    cfg = config(log_every=3, eval_every=6)
    run(data, tmp_path / "a", cfg)
    run(data, tmp_path / "b", cfg, stop_after=4)
    run(data, tmp_path / "b", cfg, resume=True, stop_after=4)
    run(data, tmp_path / "b", cfg, resume=True)
    a = without_timing(list(iter_metrics(tmp_path / "a")))
    b = without_timing(list(iter_metrics(tmp_path / "b")))
    assert [r["step"] for r in a] == [3, 6, 9, 12]
    assert a == b


def test_a_checkpoint_fine_tunes_as_the_run_it_ends(data, tmp_path):
    """`finetune --model RUN/checkpoints/step-N` opens the checkpoint's discriminator: at the
    last step it is the run's own, so the two fine-tunes agree exactly."""
    from helpers import write_sentiment

    run(data, tmp_path / "r", config(max_steps=4, save_every=2, keep_checkpoints=2))
    write_sentiment(tmp_path / "train.csv", 64, 0)
    write_sentiment(tmp_path / "dev.csv", 16, 1)
    common = ["--task", "custom", "--train", tmp_path / "train.csv", "--dev",
              tmp_path / "dev.csv", "--set", "epochs=1", "--set", "precision=fp32",
              "--set", "max_length=32", "--quiet"]
    weights = {}
    for name, model in (("run", tmp_path / "r"), ("early", tmp_path / "r/checkpoints/step-0000002"),
                        ("ckpt", tmp_path / "r/checkpoints/step-0000004")):
        assert cli("finetune", "--model", model, *common, "--out", tmp_path / name) == 0
        weights[name] = load_file(tmp_path / name / "seed-1/model.safetensors")
    assert all(torch.equal(weights["ckpt"][k], weights["run"][k]) for k in weights["run"])
    key = "encoder.layers.0.qkv.weight"  # an earlier checkpoint is another start
    assert not torch.equal(weights["early"][key], weights["run"][key])


def test_a_probe_during_pretraining_logs_its_score_and_changes_nothing(data, tmp_path):
    """train.probe_every: a linear probe's dev accuracy in metrics.jsonl at its steps (and
    the last); every other number and the final weights bitwise those of a run without."""
    from helpers import write_sentiment

    write_sentiment(tmp_path / "p_train.csv", 64, 0)
    write_sentiment(tmp_path / "p_dev.csv", 32, 1)
    run(data, tmp_path / "a", config(max_steps=8))
    run(data, tmp_path / "b", config(max_steps=8, probe_every=3,
                                     probe_train=str(tmp_path / "p_train.csv"),
                                     probe_dev=str(tmp_path / "p_dev.csv"), probe_epochs=2))
    a, b = (without_timing(list(iter_metrics(tmp_path / x))) for x in "ab")
    probed = [r["step"] for r in b if "probe_dev_accuracy" in r]
    assert probed == [3, 6, 8]
    assert all(0.0 <= r["probe_dev_accuracy"] <= 1.0 for r in b if r["step"] in probed)
    assert a == [{k: v for k, v in r.items() if not k.startswith("probe_")} for r in b]
    for kind in ("discriminator", "generator"):
        wa = load_file(tmp_path / "a" / kind / "model.safetensors")
        wb = load_file(tmp_path / "b" / kind / "model.safetensors")
        assert all(torch.equal(wa[k], wb[k]) for k in wa), kind


def test_each_metrics_line_carries_its_mfu(data, tmp_path):
    """mfu = real tokens/s x training FLOPs a token / the peak (here train.peak_tflops, so
    the figure is checkable): FLOPs a token are the step's hand-checked count
    (tests/experiments/test_compare.py) over the row length."""
    from electra.objectives.flops import step_flops_per_sequence

    cfg = config(max_steps=4, eval_every=0, peak_tflops=0.5)
    run(data, tmp_path / "a", cfg)
    saved = json.loads((tmp_path / "a/config.json").read_text())
    T, model = saved["seq_len"], cfg.model.replace(vocab_size=saved["data_vocab_size"])
    per_token = step_flops_per_sequence(model, cfg.objective, T) / T
    for r in iter_metrics(tmp_path / "a"):
        assert r["mfu"] == pytest.approx(r["tokens_per_s"] * per_token / 0.5e12, rel=1e-12)


def test_the_peak_is_a_datasheet_figure_on_known_gpus_and_measured_elsewhere(monkeypatch):
    from electra.runtime import peak_flops

    monkeypatch.setattr(torch.cuda, "get_device_name", lambda d=None: "NVIDIA H100 PCIe")
    assert peak_flops(torch.device("cuda"), "bf16") == (756e12, "H100 PCIe datasheet, bf16 "
                                                                "dense")
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda d=None: "NVIDIA H200")
    assert peak_flops(torch.device("cuda"), "fp32")[0] == 494.7e12  # TF32
    from electra.runtime import _measured_peak

    _measured_peak.cache_clear()  # measured here, not taken from an earlier test's run
    state = torch.get_rng_state()
    peak, source = peak_flops(torch.device("cpu"), "fp32")
    assert 1e8 < peak < 1e14 and source.startswith("measured: a ")
    assert source.startswith("measured: a 1024^3 fp32 matmul")  # fp32: never the 256^3 probe
    assert torch.equal(torch.get_rng_state(), state)  # the run's random streams untouched


def test_a_decay_branched_from_a_stable_checkpoint_equals_that_length_planned(data, tmp_path,
                                                                               capsys):
    """WSD: a run planned for 20 steps (decay over its last 4) is checkpointed at step 8, in
    its stable phase; `--decay-from` that checkpoint decays over 4 steps to step 12, bitwise
    the run planned for 12 steps from the start (decay_steps=4)."""
    wsd = dict(schedule="wsd", decay_steps=4, eval_every=4)
    run(data, tmp_path / "planned", config(max_steps=12, **wsd))
    run(data, tmp_path / "long", config(max_steps=20, **wsd), stop_after=10)
    checkpoint = tmp_path / "long/checkpoints/step-0000008"
    assert main(["pretrain", "--data", str(data), "--out", str(tmp_path / "branch"),
                 "--decay-from", str(checkpoint), "--quiet"]) == 0
    a = without_timing(list(iter_metrics(tmp_path / "planned")))
    b = without_timing(list(iter_metrics(tmp_path / "branch")))
    assert [r["step"] for r in b] == list(range(1, 13)) and a == b
    assert [r["lr"] for r in b[7:]] == [1e-3 * m for m in (1.0, 0.75, 0.5, 0.25, 0.0)]
    for kind in ("discriminator", "generator"):
        wa = load_file(tmp_path / "planned" / kind / "model.safetensors")
        wb = load_file(tmp_path / "branch" / kind / "model.safetensors")
        assert all(torch.equal(wa[k], wb[k]) for k in wa), kind
    saved = json.loads((tmp_path / "branch/config.json").read_text())["train"]
    assert (saved["max_steps"], saved["decay_steps"]) == (12, 4)
    assert (tmp_path / "long/checkpoints/step-0000010").is_dir()  # the long run untouched
    # not a WSD run, outside the stable phase: one line, nothing written
    run(data, tmp_path / "linear", config(max_steps=8), stop_after=4)
    for point, sets, words in (
            (tmp_path / "linear/checkpoints/step-0000004", (),
             "the run's train.schedule is linear; a decay branches off the stable phase"),
            (checkpoint, ("--set", "train.decay_steps=15"),
             "step 8 is outside the run's stable phase (steps 3 to 5)")):
        err = cli_error(capsys, "pretrain", "--data", data, "--out", tmp_path / "x",
                        "--decay-from", point, *sets)
        assert words in err and not (tmp_path / "x").exists()
    # The checkpoint copied into another run's folder: that run's metrics are not its history.
    shutil.copytree(checkpoint, tmp_path / "linear/checkpoints/copied")
    capsys.readouterr()
    assert main(["pretrain", "--data", str(data), "--out", str(tmp_path / "copy"),
                 "--decay-from", str(tmp_path / "linear/checkpoints/copied"), "--quiet"]) == 0
    assert "is not the run that wrote it (a copied checkpoint?)" in capsys.readouterr().err
    c = without_timing(list(iter_metrics(tmp_path / "copy")))
    assert [r["step"] for r in c] == list(range(9, 13)) and c == a[8:]


def test_max_tokens_sets_the_run_length(data, tmp_path):
    """train.max_tokens: the steps that many token positions take (8 rows of 32 a step),
    rounded up; the schedule and the stop follow it."""
    cfg = config(max_tokens=4 * 8 * 32 + 1, max_steps=1000, eval_every=0)
    run(data, tmp_path / "a", cfg)
    records = list(iter_metrics(tmp_path / "a"))
    assert records[-1]["step"] == 5
    assert json.loads((tmp_path / "a/config.json").read_text())["train"]["max_steps"] == 5
    assert records[-1]["lr"] == 0.0  # linear decay to 0 at the fifth step


def test_the_first_line_names_what_the_step_runs_on(packed_letters, tmp_path, capsys):
    """Packed rows, unpadding, compiled blocks or CUDA graphs, the micro-batches: said on the
    first line (docs/how-to/hardware.md)."""
    from electra.train.first_lines import step_levers

    assert step_levers(TrainConfig(), False) == " (padded rows, every position computed)"
    assert step_levers(TrainConfig(compile=True), False) == (
        " (padded rows, every position computed, compiled step)")
    assert step_levers(TrainConfig(compile=True), False, processes=True) == (
        " (padded rows, every position computed, compiled blocks)")
    pretrain(PretrainOptions(data=str(packed_letters), out=str(tmp_path / "r"), config=config(
        max_steps=1, unpad=True, grad_accum=2)))
    first = capsys.readouterr().out.splitlines()[0]
    assert "fp32, cpu (packed rows, unpadded, 2 micro-batches a step)" in first, first


@pytest.mark.parametrize("shape,over", [("linear", "run"), ("cosine", "decay")])
def test_a_mask_rate_schedule_logs_its_formula_and_resumes_bitwise(data, tmp_path, shape,
                                                                   over):
    """objective.mask_prob_end: the rate goes 0.3 -> 0.15 (linear over the run, or cosine
    over wsd's decay); each metrics line's mask_rate is the formula's at its step (computed
    here by hand), the chosen fraction follows it, the slots are sized for 0.3, and a run
    stopped mid-schedule and resumed equals the uninterrupted one."""
    import math

    base = config(schedule="wsd", decay_fraction=0.5, eval_every=0, save_every=3)
    cfg = dataclasses.replace(base, objective=ObjectiveConfig(
        mask_prob=0.3, mask_prob_end=0.15, mask_shape=shape, mask_over=over))
    run(data, tmp_path / "a", cfg)
    run(data, tmp_path / "b", cfg, stop_after=7)
    run(data, tmp_path / "b", cfg, resume=True)
    a = without_timing(list(iter_metrics(tmp_path / "a")))
    assert a == without_timing(list(iter_metrics(tmp_path / "b")))
    start, stop = (0, 12) if over == "run" else (6, 12)

    def by_hand(step: int) -> float:  # the step's index, 0-based
        t = min(1.0, max(0.0, (step - start) / (stop - start)))
        if shape == "linear":
            return 0.3 + t * (0.15 - 0.3)
        return 0.15 + 0.15 * 0.5 * (1 + math.cos(math.pi * t))

    assert [r["mask_rate"] for r in a] == [pytest.approx(by_hand(r["step"] - 1)) for r in a]
    assert a[0]["mask_rate"] == pytest.approx(0.3) and a[-1]["mask_rate"] < 0.17
    assert a[0]["masked_frac"] > 0.27 and a[-1]["masked_frac"] < 0.18  # what was chosen
    saved = json.loads((tmp_path / "a/config.json").read_text())
    assert saved["objective"]["max_predictions"] == int((0.3 + 0.005) * 32)  # sized for 0.3


def test_a_mask_rate_schedule_refuses_what_it_cannot_run():
    with pytest.raises(UserError, match=r"objective.mask_over='decay'.*train.schedule='wsd'"):
        RunConfig(objective=ObjectiveConfig(mask_prob=0.3, mask_prob_end=0.15,
                                            mask_over="decay"))
    with pytest.raises(UserError, match="use one of the two"):
        RunConfig(objective=ObjectiveConfig(mask_prob=0.3, mask_prob_end=0.15),
                  train=TrainConfig(phases="128:0.5:0.3,512:0.5:0.15"))
    with pytest.raises(UserError, match=r"set objective.mask_prob_end"):
        RunConfig(objective=ObjectiveConfig(mask_shape="cosine"))
