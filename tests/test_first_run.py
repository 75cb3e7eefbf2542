"""What a newcomer's first commands say: a vocabulary smaller than asked, a validation split
too small to trust, where a pretraining run ended and what it wrote, what a fine-tune trains
on, and a machine too busy for torch's default threads. Each was a silent surprise once."""

from __future__ import annotations

import os
from pathlib import Path

import torch
from helpers import write_corpus, write_sentiment

from electra.cli import main

TINY = ["--preset", "tiny", "--set", "train.batch_size=8", "--set", "train.eval_batches=1",
        "--set", "model.num_layers=1", "--set", "model.hidden_size=32", "--set",
        "model.num_heads=2", "--set", "model.intermediate_size=64", "--set",
        "model.embedding_size=32", "--set", "train.precision=fp32"]


def cli(*args) -> int:
    return main([str(a) for a in args])


def test_a_vocabulary_smaller_than_asked_and_a_small_validation_split_get_a_note(
        tmp_path, capsys):
    text = tmp_path / "c.txt"
    write_corpus(text, n_docs=60)
    assert cli("tokenizer", "train", "--input", text, "--vocab-size", 30522, "--out",
               tmp_path / "tok") == 0
    err = capsys.readouterr().err
    assert "--vocab-size asked for 30,522" in err and "the text holds only" in err
    assert cli("prepare", "--input", text, "--tokenizer", tmp_path / "tok", "--seq-len", 32,
               "--val-fraction", 0.05, "--out", tmp_path / "data") == 0
    err = capsys.readouterr().err
    assert "the validation split holds only" in err and "--val-fraction" in err


def test_pretrain_says_where_it_ended_and_what_it_wrote(letters_data, tmp_path, capsys):
    run = tmp_path / "run"
    assert cli("pretrain", *TINY, "--set", "train.max_steps=4", "--set", "train.eval_every=2",
               "--data", letters_data, "--out", run, "--stop-after", 2) == 0
    out = capsys.readouterr().out
    assert f"stopped at step 2 of 4 with a checkpoint in {run / 'checkpoints'}" in out
    assert "--resume continues" in out
    assert cli("pretrain", "--data", letters_data, "--out", run, "--resume") == 0
    out = capsys.readouterr().out
    assert "electra: done, 4 steps; held-out discriminator accuracy" in out
    assert "all-original baseline" in out and "ROC-AUC" in out
    assert f"wrote {run / 'discriminator'}/, {run / 'generator'}/" in out
    assert f"electra finetune --model {run}" in out


def test_finetune_opens_with_what_it_trains_on(letters_data, tmp_path, capsys):
    write_sentiment(tmp_path / "train.csv", 40, seed=0)
    write_sentiment(tmp_path / "dev.csv", 20, seed=1)
    assert cli("finetune", "--random-init", "tiny", "--tokenizer", letters_data / "tokenizer.json",
               "--task", "custom", "--train", tmp_path / "train.csv", "--dev",
               tmp_path / "dev.csv", "--set", "epochs=1", "--set", "precision=fp32",
               "--set", "max_train_examples=30", "--out", tmp_path / "ft") == 0
    first, second = [line for line in capsys.readouterr().out.splitlines() if line.strip()][:2]
    assert first == ("electra: fine-tuning custom: 30 of 40 training examples (a fixed random "
                     "subset, max_train_examples), 20 dev; from random-init; 1 epoch, batch "
                     "32, lr 0.0003, fp32, cpu, seeds 1"), first
    assert second == ("electra: --random-init: every weight built fresh (bert body, 4 x 128; a "
                      f"sequence head for custom (2 labels)); the tokenizer from "
                      f"{letters_data / 'tokenizer.json'}"), second


def test_a_busy_machine_trains_on_fewer_threads_and_says_so(letters_data, tmp_path, capsys,
                                                            monkeypatch):
    """Loaded past its cores with no core idle, training runs on one thread fewer (2 -> 1 on
    2 cores: bench/busy_threads.py measured 1 thread ~3x faster there) and says how to
    choose; train.threads chooses; a load that has passed (cores idle) changes nothing."""
    from electra import runtime

    cores = os.cpu_count() or 1
    monkeypatch.setattr(os, "getloadavg", lambda: (2.0 * cores, 0.0, 0.0))
    monkeypatch.setattr(runtime, "idle_cores", lambda cores: 0.0)
    args = ("pretrain", *TINY, "--set", "train.max_steps=1", "--data", letters_data)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        assert cli(*args, "--out", tmp_path / "a", "--quiet") == 0  # said under --quiet too
        out = capsys.readouterr().err  # a note: on stderr, beside the errors
        assert "this machine is busy" in out and "torch runs on 1 thread instead of 2" in out
        assert "--set train.threads=N" in out and torch.get_num_threads() == 1
        torch.set_num_threads(2)
        assert cli(*args, "--set", "train.threads=2", "--out", tmp_path / "b") == 0
        assert torch.get_num_threads() == 2
        assert "this machine is busy" not in capsys.readouterr().err
        monkeypatch.setattr(runtime, "idle_cores", lambda cores: 2.0)
        assert cli(*args, "--out", tmp_path / "c") == 0
        assert torch.get_num_threads() == 2
        monkeypatch.setattr(os, "getloadavg", lambda: (0.0, 0.0, 0.0))
        assert cli(*args, "--out", tmp_path / "d") == 0
        assert "this machine is busy" not in capsys.readouterr().err
    finally:
        torch.set_num_threads(threads)
    assert Path(tmp_path / "d" / "discriminator").is_dir()


def test_idle_cores_reads_proc_stat():
    from electra.runtime import idle_cores

    idle = idle_cores(os.cpu_count() or 1, seconds=0.05)
    assert idle is None or 0.0 <= idle <= (os.cpu_count() or 1) + 0.01


def test_init_says_what_it_loaded_and_what_it_built(letters_data, tmp_path, capsys):
    """--init names what came from the folder and what the run built fresh; the first line
    names the body, its shape, dropout and eps."""
    args = ("pretrain", *TINY, "--set", "train.max_steps=1", "--data", letters_data)
    assert cli(*args, "--out", tmp_path / "a", "--quiet") == 0
    assert cli("export", tmp_path / "a", "--out", tmp_path / "hf") == 0
    capsys.readouterr()
    assert cli(*args, "--out", tmp_path / "b", "--init", tmp_path / "a") == 0
    out = capsys.readouterr().out
    assert (f"--init {tmp_path / 'a'}: loaded the discriminator (bert body 1 x 32, with its "
            f"replaced-token head) and the generator (1 x 8); nothing built fresh") in out, out
    assert "electra: bert body 1 x 32 (generator 1 x 8; dropout 0.1/0.1, layer-norm eps " \
        "1e-12)" in out, out
    assert cli(*args, "--out", tmp_path / "c", "--init", tmp_path / "hf/discriminator",
               "--set", "objective.sharing=gdes") == 0
    out = capsys.readouterr().out
    assert "built fresh: the generator (1 x 8); GDES's delta set to the discriminator's " \
        "table less the generator's" in out, out

    # A ModernBERT saved as ModernBertModel has no RTD head: the line says it is built fresh.
    from safetensors.torch import load_file, save_file

    modern = (*args, "--set", "model.body=modernbert", "--set", "model.local_attention=16")
    assert cli(*modern, "--out", tmp_path / "m", "--quiet") == 0
    assert cli("export", tmp_path / "m", "--out", tmp_path / "mhf") == 0
    weights = tmp_path / "mhf/discriminator/model.safetensors"
    save_file({k: v for k, v in load_file(weights).items()
               if not k.startswith("discriminator_predictions.")}, weights)
    capsys.readouterr()
    assert cli(*modern, "--out", tmp_path / "n", "--init", tmp_path / "mhf/discriminator") == 0
    out = capsys.readouterr().out
    assert (f"--init {tmp_path / 'mhf/discriminator'}: loaded the discriminator (modernbert "
            f"body 1 x 32, its encoder); built fresh: its replaced-token head and the "
            f"generator (1 x 8)") in out, out
