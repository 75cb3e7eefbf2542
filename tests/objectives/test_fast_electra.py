"""Objective fast_electra: a frozen, existing masked LM samples the replacements. Its weights
are bitwise the same after training, none of it is in a checkpoint, its backward is not
counted, the loss is λ times the discriminator's alone, the run resumes bitwise, and a
generator of another vocabulary (or none) is one line."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch
from helpers import cli_error, small_model, traced_steps, write_corpus
from safetensors.torch import load_file

from electra.cli import main
from electra.commands.pretrain import PretrainOptions, pretrain
from electra.config import TrainConfig
from electra.data.prepare import PrepareOptions, prepare
from electra.data.tokenizer import train_tokenizer
from electra.errors import UserError
from electra.model.macs import encoder_macs, mlm_head_macs, rtd_head_macs
from electra.objectives.config import ObjectiveConfig
from electra.objectives.flops import step_flops_per_sequence
from electra.run_config import RunConfig
from electra.saved.models import open_model
from electra.train.metrics import TIMING_KEYS, iter_metrics


def config(generator: str | None = None, **train) -> RunConfig:
    t = dict(lr=1e-3, batch_size=8, warmup_steps=2, max_steps=6, log_every=1, eval_every=3,
             eval_batches=2, save_every=3, precision="fp32", seed=7)
    objective = (ObjectiveConfig() if generator is None else
                 ObjectiveConfig(kind="fast_electra", generator=generator, temperature=2.0,
                                 temperature_end=1.0, temperature_steps=6))
    return RunConfig(model=small_model(hidden_dropout=0.1, attention_dropout=0.1),
                     objective=objective, train=TrainConfig(**{**t, **train}))


def run(data, out, cfg: RunConfig, **kw) -> None:
    pretrain(PretrainOptions(data=str(data), out=str(out), config=cfg, progress=False, **kw))


def lines(run_folder) -> list[dict]:
    return [{k: v for k, v in r.items() if k not in TIMING_KEYS}
            for r in iter_metrics(run_folder)]


@pytest.fixture(scope="module")
def generator_run(letters_data, tmp_path_factory):
    """A short ELECTRA run on the same data: its generator is the frozen one."""
    out = tmp_path_factory.mktemp("gen") / "run"
    run(letters_data, out, config(max_steps=3))
    return out


def test_the_frozen_generator_is_unchanged_uncounted_and_resumes_bitwise(
        letters_data, generator_run, tmp_path):
    before = load_file(generator_run / "generator/model.safetensors")
    cfg = config(str(generator_run))
    run(letters_data, tmp_path / "a", cfg)
    after = load_file(generator_run / "generator/model.safetensors")
    assert all(torch.equal(before[k], after[k]) for k in before)
    # No generator trained, kept or checkpointed: the discriminator alone.
    assert sorted(p.name for p in (tmp_path / "a").iterdir() if p.is_dir()) == [
        "checkpoints", "discriminator", "tb"]
    state = load_file(tmp_path / "a/checkpoints/step-0000006/model.safetensors")
    assert state and all(k.startswith("discriminator.") for k in state)
    # The loss is λ times the discriminator's; the generator's loss is a statistic.
    a = lines(tmp_path / "a")
    assert all(r["loss"] == pytest.approx(50 * r["disc_loss"], rel=1e-6) for r in a)
    assert all("gen_acc" in r and "gen_loss" in r for r in a)
    # The run records which weights it sampled from; stopped and resumed, the same run.
    saved = json.loads((tmp_path / "a/config.json").read_text())
    assert len(saved["generator_sha256"]) == 64
    run(letters_data, tmp_path / "b", cfg, stop_after=4)
    run(letters_data, tmp_path / "b", cfg, resume=True)
    assert lines(tmp_path / "b") == a
    wa, wb = (load_file(tmp_path / r / "discriminator/model.safetensors") for r in ("a", "b"))
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    # The temperature falls 2 -> 1: an unlike run to one sampled at 1 throughout.
    flat = dataclasses.replace(cfg, objective=dataclasses.replace(
        cfg.objective, temperature=1.0, temperature_end=None, temperature_steps=0))
    run(letters_data, tmp_path / "flat", flat)
    assert lines(tmp_path / "flat")[0]["loss"] != a[0]["loss"]


def test_the_step_with_a_frozen_generator_traces_whole(letters_data, generator_run):
    """train.compile: the frozen generator's forward, its sampling at a falling temperature
    and the discriminator in one graph, with a bounded number of them (9 steps, 8
    temperatures: a recompile to a symbolic temperature for each kind of batch, and at most
    one more; 4 over 20 steps and 5 over 9 were measured)."""
    from electra.saved.start import load_generator

    cfg = config(str(generator_run))
    objective = dataclasses.replace(cfg.objective, temperature_steps=8)
    graphs, kinds = traced_steps(letters_data, cfg.model, objective, steps=9,
                                 generator=load_generator(str(generator_run)).module)
    assert graphs <= 2 * len(kinds) + 1, kinds


def test_the_flop_count_takes_the_frozen_generators_forward_alone(generator_run):
    """6 FLOPs a multiply-accumulate of the discriminator (forward and backward), 2 of the
    frozen generator (forward only), at the slots of the rate."""
    cfg = config(str(generator_run))
    gen = open_model(generator_run, "generator")["generator"].config
    m, T = cfg.model, 32
    P = int((0.15 + 0.005) * T)
    by_hand = 6 * (encoder_macs(m, T) + rtd_head_macs(m, T)) + 2 * (
        encoder_macs(gen, T) + mlm_head_macs(gen, P))
    assert step_flops_per_sequence(m, cfg.objective, T, gen) == by_hand
    with pytest.raises(ValueError, match="pass generator="):
        step_flops_per_sequence(m, cfg.objective, T)


def test_a_frozen_generator_of_another_vocabulary_or_none_is_one_line(
        letters_data, generator_run, tmp_path, capsys):
    write_corpus(tmp_path / "x.txt", n_docs=40, seed=1)
    train_tokenizer([str(tmp_path / "x.txt")], 100, tmp_path / "tok2", lowercase=False)
    prepare(PrepareOptions(inputs=[str(tmp_path / "x.txt")], tokenizer=str(tmp_path / "tok2"),
                           out=str(tmp_path / "other"), seq_len=32, quiet=True))
    args = ("pretrain", "--preset", "tiny", "--quiet", "--set", "train.max_steps=2")
    said = cli_error(capsys, *args, "--data", tmp_path / "other", "--out", tmp_path / "o",
                     "--generator", generator_run)
    assert "--generator" in said or "objective.generator" in said
    assert "tokenizer" in said or "vocabulary" in said
    assert not (tmp_path / "o").exists()
    assert "give it with --generator PATH" in cli_error(
        capsys, *args, "--data", letters_data, "--out", tmp_path / "o", "--set",
        "objective.kind=fast_electra")
    assert "not of 'electra'" in cli_error(
        capsys, *args, "--data", letters_data, "--out", tmp_path / "o", "--set",
        f"objective.generator={generator_run}")
    assert main(["pretrain", "--preset", "tiny", "--quiet", "--data", str(letters_data),
                 "--out", str(tmp_path / "ok"), "--generator", str(generator_run), "--set",
                 "train.max_steps=2", "--set", "train.batch_size=4", "--set",
                 "train.log_every=1", "--set",
                 "objective.generator_precision=bf16", "--stop-after", "1"]) == 0
    assert main(["pretrain", "--quiet", "--data", str(letters_data), "--out",
                 str(tmp_path / "ok"), "--resume"]) == 0  # from its own config.json
    assert [r["step"] for r in iter_metrics(tmp_path / "ok")] == [1, 2]
    with pytest.raises(UserError, match="generator_precision"):
        ObjectiveConfig(generator_precision="bf16")
