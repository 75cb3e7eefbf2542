"""Fine-tuning: layer-wise learning rates, learning a separable task, evaluate == finetune."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import cli_error, ctrl_c_in_step, shared_data, snapshot, write_sentiment
from safetensors.torch import load_file

from electra.cli import main
from electra.data.tokenizer import train_tokenizer
from electra.model import Discriminator
from electra.model.bodies import model_preset
from electra.saved import folders
from electra.tasks.sequence.head import Sequence, SequenceClassifier
from electra.train.metrics import TIMING_KEYS


@pytest.fixture
def task(tmp_path):
    write_sentiment(tmp_path / "train.csv", 400, 0)
    write_sentiment(tmp_path / "dev.csv", 100, 1)
    train_tokenizer([str(tmp_path / "train.csv")], 100, tmp_path / "tok")
    return tmp_path


def test_learns_a_separable_task_and_evaluate_reproduces_it(task, capsys):
    args = ["--task", "custom", "--train", str(task / "train.csv"), "--dev",
            str(task / "dev.csv"), "--text-columns", "text", "--label-column", "label"]
    assert main(["finetune", "--random-init", "tiny", "--tokenizer", str(task / "tok"),
                 *args, "--out", str(task / "ft"), "--seeds", "1,2",
                 "--set", "epochs=4", "--set", "lr=1e-3", "--set", "precision=fp32"]) == 0
    results = json.loads((task / "ft/results.json").read_text())
    assert results["median"]["dev"]["accuracy"] >= 0.95
    assert (task / "ft/results.md").read_text().count("| dev | accuracy |") == 1
    capsys.readouterr()
    assert main(["evaluate", "--model", str(task / "ft/seed-2"), "--task", "custom", "--dev",
                 str(task / "dev.csv"), "--text-columns", "text", "--label-column",
                 "label"]) == 0
    again = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert again["dev"] == results["seeds"]["2"]["dev"]


def test_each_metrics_line_carries_its_mfu(task, monkeypatch):
    """mfu = real tokens/s x training FLOPs a token / the peak (the peak fixed here, so the
    figure is checkable): tiny's 4 blocks at 128 tokens, by hand, 6 FLOPs a multiply-add
    (2 for a frozen encoder's forward)."""
    from electra.train import finetuning

    monkeypatch.setattr(finetuning, "peak_flops", lambda device, precision: (0.5e12, "fixed"))
    per_block = 4 * 128 * 128 + 2 * 128 * 512 + 2 * 128 * 128  # qkv+out, FFN, attention
    for freeze, factor in (("none", 6), ("encoder", 2)):
        out = task / f"ft-{freeze}"
        assert main(["finetune", "--random-init", "tiny", "--tokenizer", str(task / "tok"),
                     *custom_args(task), "--out", str(out), "--seeds", "1", "--quiet",
                     "--set", "epochs=1", "--set", f"freeze={freeze}"]) == 0
        lines = [json.loads(x) for x in (out / "seed-1/metrics.jsonl").read_text().splitlines()]
        assert lines and all(r["mfu"] == pytest.approx(
            r["tokens_per_s"] * factor * 4 * per_block / 0.5e12, rel=1e-12) for r in lines)


def test_a_modernbert_body_learns_a_separable_task(task):
    """Sentence classification (GLUE's shape: a custom CSV) on a tiny ModernBERT body."""
    from electra.data.tokenizer import load_tokenizer

    tok = load_tokenizer(task / "tok")
    torch.manual_seed(0)
    disc = Discriminator(model_preset("tiny", body="modernbert", vocab_size=tok.get_vocab_size(),
                                      num_layers=3, local_attention=16))
    folders.save(disc, "discriminator", task / "run/discriminator", tok)
    assert main(["finetune", "--model", str(task / "run"), "--task", "custom", "--train",
                 str(task / "train.csv"), "--dev", str(task / "dev.csv"), "--out",
                 str(task / "ft"), "--quiet", "--set", "epochs=4", "--set", "lr=1e-3",
                 "--set", "precision=fp32"]) == 0
    results = json.loads((task / "ft/results.json").read_text())
    assert results["median"]["dev"]["accuracy"] >= 0.95
    # It exports as ModernBertForSequenceClassification, with the same logits.
    transformers = pytest.importorskip("transformers")
    assert main(["export", str(task / "ft/seed-1"), "--out", str(task / "hf")]) == 0
    hf, info = transformers.AutoModelForSequenceClassification.from_pretrained(
        task / "hf", output_loading_info=True)
    assert type(hf).__name__ == "ModernBertForSequenceClassification"
    assert not any(info.values()), info
    ours = folders.load(task / "ft/seed-1", "classifier")[0].eval()
    ids = torch.randint(5, tok.get_vocab_size(), (3, 24))
    mask = torch.ones_like(ids)
    mask[1, 10:] = 0
    with torch.no_grad():
        torch.testing.assert_close(ours(ids, mask), hf.eval()(input_ids=ids,
                                   attention_mask=mask).logits, atol=1e-5, rtol=1e-5)


def test_a_deberta_body_learns_a_separable_task_and_evaluate_reproduces_it(task, capsys):
    """Sentence classification on a tiny DeBERTa body (issue 43): the fine-tune learns it,
    and `evaluate` of the saved model gives the scores the run reported."""
    from electra.data.tokenizer import load_tokenizer

    tok = load_tokenizer(task / "tok")
    torch.manual_seed(0)
    disc = Discriminator(model_preset("tiny", body="deberta", vocab_size=tok.get_vocab_size(),
                                      num_layers=2, position_buckets=32))
    folders.save(disc, "discriminator", task / "run/discriminator", tok)
    assert main(["finetune", "--model", str(task / "run"), *custom_args(task), "--out",
                 str(task / "ft"), "--quiet", "--set", "epochs=4", "--set", "lr=1e-3",
                 "--set", "precision=fp32"]) == 0
    results = json.loads((task / "ft/results.json").read_text())
    assert results["median"]["dev"]["accuracy"] >= 0.95
    capsys.readouterr()
    assert main(["evaluate", "--model", str(task / "ft/seed-1"), *custom_args(task)[:2],
                 "--dev", str(task / "dev.csv")]) == 0
    again = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert again["dev"] == results["seeds"]["1"]["dev"]


@pytest.mark.parametrize("body", ["modernbert", "deberta"])
def test_a_modern_body_fine_tunes_on_glue_files(tmp_path, body):
    """GLUE's own SST-2 files (../shared/data; 64 training rows, one epoch) through the GLUE
    reader with BERT's vocabulary, on a random-init modernbert-small, and on a tiny DeBERTa
    body saved as a pretrained one would be: the run writes its dev accuracy."""
    from electra.data.tokenizer import load_tokenizer

    glue = shared_data("glue/SST-2")
    vocab = shared_data("vocab/bert-base-uncased-vocab.txt")
    model = ["--random-init", "modernbert-small", "--tokenizer", str(vocab)]
    if body == "deberta":
        tok = load_tokenizer(vocab)
        torch.manual_seed(0)
        disc = Discriminator(model_preset("tiny", body="deberta", num_layers=2,
                                          vocab_size=tok.get_vocab_size()))
        folders.save(disc, "discriminator", tmp_path / "run/discriminator", tok)
        model = ["--model", str(tmp_path / "run")]
    assert main(["finetune", *model, "--task", "sst2", "--data", str(glue), "--out",
                 str(tmp_path / "ft"), "--quiet", "--set", "epochs=1", "--set",
                 "max_train_examples=64", "--set", "max_length=64"]) == 0
    results = json.loads((tmp_path / "ft/results.json").read_text())
    # Every dev row of the official file scored under its own label, and the accuracy is
    # the confusion matrix's diagonal; 64 training rows at batch 32 are two steps.
    rows = (glue / "dev.tsv").read_text(encoding="utf-8-sig").splitlines()[1:]
    labels = [r.rsplit("\t", 1)[1] for r in rows if r.strip()]
    details = results["details"]["1"]
    conf = details["confusion"]["dev"]
    by_label = {lab: sum(row) for lab, row in zip(conf["labels"], conf["matrix"], strict=True)}
    assert by_label == {lab: labels.count(lab) for lab in set(labels)}
    hits = sum(conf["matrix"][i][i] for i in range(len(conf["labels"])))
    assert results["median"]["dev"]["accuracy"] == pytest.approx(hits / len(labels))
    assert details["step"] == 2
    saved = json.loads((tmp_path / "ft/seed-1/config.json").read_text())
    assert saved["model"]["body"] == body
    # The card names the rows trained on, not the file's size, and the hub's dataset id.
    card = (tmp_path / "ft/seed-1/README.md").read_text()
    train = len((glue / "train.tsv").read_text(encoding="utf-8-sig").splitlines()) - 1
    assert f"sst2: 64 of {train:,} training examples (a fixed random subset" in card
    assert "datasets:\n- \"nyu-mll/glue\"" in card


def test_finetune_from_a_pretrained_discriminator(task):
    from electra.data.tokenizer import load_tokenizer

    tok = load_tokenizer(task / "tok")
    disc = Discriminator(model_preset("tiny", vocab_size=tok.get_vocab_size()))
    folders.save(disc, "discriminator", task / "run/discriminator", tok)
    assert main(["finetune", "--model", str(task / "run"), "--task", "custom", "--train",
                 str(task / "train.csv"), "--dev", str(task / "dev.csv"), "--out",
                 str(task / "ft"), "--set", "epochs=1"]) == 0
    results = json.loads((task / "ft/results.json").read_text())
    assert results["config"]["lr"] == 3e-4 and results["config"]["layer_decay"] == 0.8
    # The same architecture from random weights, for the pretrained-vs-random comparison.
    assert main(["finetune", "--random-init", str(task / "run"), "--task", "custom",
                 "--train", str(task / "train.csv"), "--dev", str(task / "dev.csv"),
                 "--out", str(task / "ft0"), "--set", "epochs=1"]) == 0
    assert json.loads((task / "ft0/results.json").read_text())["model"] == "random-init"


def test_any_model_folder_is_a_starting_point(task):
    """--model reads through the one opener: a transformers ElectraForPreTraining folder
    made from a run fine-tunes exactly as the run does (the export is bitwise)."""
    pytest.importorskip("transformers")
    from electra.data.tokenizer import load_tokenizer

    tok = load_tokenizer(task / "tok")
    torch.manual_seed(0)
    disc = Discriminator(model_preset("tiny", vocab_size=tok.get_vocab_size()))
    folders.save(disc, "discriminator", task / "run/discriminator", tok)
    assert main(["export", str(task / "run"), "--out", str(task / "hf")]) == 0
    common = ["--task", "custom", "--train", str(task / "train.csv"), "--dev",
              str(task / "dev.csv"), "--set", "epochs=1", "--set", "max_train_examples=64",
              "--set", "precision=fp32", "--quiet"]
    weights = {}
    for name, model in (("run", ["--model", task / "run"]),
                        ("hf", ["--model", task / "hf/discriminator"]),
                        ("random", ["--random-init", task / "run"])):
        assert main(["finetune", *map(str, model), *common, "--out",
                     str(task / f"ft-{name}")]) == 0
        weights[name] = load_file(task / f"ft-{name}/seed-1/model.safetensors")
    assert weights["hf"].keys() == weights["run"].keys()
    assert all(torch.equal(weights["hf"][k], weights["run"][k]) for k in weights["run"])
    assert not torch.equal(weights["random"]["encoder.layers.0.qkv.weight"],
                           weights["run"]["encoder.layers.0.qkv.weight"])

    # Each source's first lines say what it loaded, what it left out and what it builds.
    from electra.commands.finetune import model_source
    from electra.config import FinetuneConfig
    from electra.tasks.registry import load_task

    read = load_task("custom", train=str(task / "train.csv"), dev=str(task / "dev.csv"))
    data = {"custom": read.head.prepare(read, FinetuneConfig())}
    shape = "(bert body, 4 x 128); built fresh: a sequence head for custom (2 labels)"
    assert model_source(str(task / "run")).line(data) == (
        f"--model {task / 'run'}: loaded the encoder of its discriminator (its replaced-token "
        f"head left out) {shape}")
    assert model_source(str(task / "hf/discriminator")).line(data) == (
        f"--model {task / 'hf/discriminator'}: loaded the encoder of a transformers "
        f"ElectraForPreTraining folder (its head left out) {shape}")
    assert model_source(str(task / "ft-run/seed-1")).line(data) == (
        f"--model {task / 'ft-run/seed-1'}: loaded the encoder of a model fine-tuned on "
        f"custom (its sequence head left out) {shape}")
    assert model_source(random_init=str(task / "run")).line(data).startswith(
        "--random-init: every weight built fresh (bert body, 4 x 128; a sequence head")


def test_bad_input(task, capsys):
    def err(*args) -> str:
        return cli_error(capsys, *args)

    common = ["--train", task / "train.csv", "--dev", task / "dev.csv", "--out", task / "o"]
    assert "valid tasks" in err("finetune", "--model", task, "--task", "squad", "--data", task,
                                "--out", task / "o")
    assert "no column 'sentence'" in err("finetune", "--model", task, "--task", "custom",
                                         "--text-columns", "sentence", *common)
    assert "no discriminator weights" in err("finetune", "--model", task, "--task", "custom",
                                             *common)
    assert "exceeds the model's 512 positions" in err(
        "finetune", "--random-init", "tiny", "--tokenizer", task / "tok", "--task", "custom",
        *common, "--set", "max_length=1024")
    assert "valid keys" in err("finetune", "--random-init", "tiny", "--tokenizer",
                               task / "tok", "--task", "custom", *common, "--set", "lrr=1")
    assert "GLUE submission files" in err("finetune", "--random-init", "tiny", "--tokenizer",
                                          task / "tok", "--task", "custom", *common,
                                          "--predict", "test")


@pytest.mark.parametrize("task,folder,file,rows", [("wnli", "WNLI", "WNLI.tsv", 146),
                                                   ("stsb", "STS-B", "STS-B.tsv", 1379)])
def test_predict_test_writes_glue_submission_files(tmp_path, task, folder, file, rows):
    from helpers import shared_data

    glue = shared_data(f"glue/{folder}")
    train_tokenizer([str(glue / "train.tsv")], 300, tmp_path / "tok")
    assert main(["finetune", "--random-init", "tiny", "--tokenizer", str(tmp_path / "tok"),
                 "--task", task, "--data", str(glue), "--out", str(tmp_path / "ft"),
                 "--predict", "test", "--set", "epochs=1", "--set",
                 "max_train_examples=32"]) == 0
    lines = (tmp_path / "ft/seed-1/predictions" / file).read_text().splitlines()
    assert lines[0] == "index\tprediction" and len(lines) == rows + 1
    assert [line.split("\t")[0] for line in lines[1:]] == [str(i) for i in range(rows)]
    values = [line.split("\t")[1] for line in lines[1:]]
    if task == "stsb":
        assert all(0.0 <= float(v) <= 5.0 for v in values)
    else:
        assert set(values) <= {"0", "1"}


def test_double_pairs_adds_each_pair_swapped_to_the_chosen_subset(monkeypatch):
    import electra.commands.finetune as ft
    from electra.data.examples import Example

    seen = []
    import electra.tasks.sequence.head as seq

    real = seq.encode

    def spy(tok, examples, *a, **k):
        seen.append(list(examples))
        return real(tok, examples, *a, **k)

    monkeypatch.setattr(seq, "encode", spy)
    from tokenizers import Tokenizer, models

    tok = Tokenizer(models.WordLevel({"[PAD]": 0, "[UNK]": 1, "a": 2, "b": 3, "[CLS]": 4,
                                      "[SEP]": 5, "[MASK]": 6}, unk_token="[UNK]"))
    train = [Example(f"a{i}", f"b{i}", str(i % 2)) for i in range(40)]
    data = ft.TaskData("custom", train, {"dev": train[:4]}, ("accuracy",), False,
                       {"0": 0, "1": 1})
    cfg = ft.FinetuneConfig(lr=1e-4, layer_decay=0.8, epochs=1, batch_size=4,
                            precision="fp32", family={"double_pairs": True},
                            max_train_examples=10)
    source = ft.ModelSource(None, model_preset("tiny", vocab_size=7, num_layers=1), Path("."),
                            "random-init")
    from electra.train.finetuning import finetune_one

    finetune_one(source, tok, data, cfg.resolved(
        source.config, data.head.task_defaults(data.name)), 1)
    used = seen[0]
    assert len(used) == 20
    first, swapped = used[:10], used[10:]
    assert len({e.text_a for e in first}) == 10 and all(e in train for e in first)
    assert [(e.text_a, e.text_b, e.label) for e in swapped] == [
        (e.text_b, e.text_a, e.label) for e in first]


def write_dropout_free_run(task: Path) -> Path:
    """A pretraining-run folder whose (random) discriminator has no dropout."""
    from electra.data.tokenizer import load_tokenizer

    tok = load_tokenizer(task / "tok")
    torch.manual_seed(0)
    disc = Discriminator(model_preset("tiny", vocab_size=tok.get_vocab_size(), num_layers=2,
                                      hidden_dropout=0.0, attention_dropout=0.0))
    folders.save(disc, "discriminator", task / "run/discriminator", tok)
    return task / "run"


def custom_args(task: Path) -> list[str]:
    return ["--task", "custom", "--train", str(task / "train.csv"), "--dev",
            str(task / "dev.csv")]


def test_gradient_accumulation_trains_like_one_big_batch(task):
    """batch 16 as 4 micro-batches of 4 = batch 16 at once (no dropout: only summation order
    and padding length differ)."""
    run = write_dropout_free_run(task)
    for accum in (1, 4):
        assert main(["finetune", "--model", str(run), *custom_args(task), "--out",
                     str(task / f"ft{accum}"), "--quiet", "--set", "epochs=2", "--set",
                     "precision=fp32", "--set", "batch_size=16", "--set",
                     f"grad_accum={accum}"]) == 0
    r1 = json.loads((task / "ft1/results.json").read_text())
    r4 = json.loads((task / "ft4/results.json").read_text())
    assert r4["config"]["grad_accum"] == 4
    assert r1["seeds"] == r4["seeds"]
    w1 = load_file(task / "ft1/seed-1/model.safetensors")
    w4 = load_file(task / "ft4/seed-1/model.safetensors")
    for k in w1:
        torch.testing.assert_close(w1[k], w4[k], rtol=1e-4, atol=1e-5, msg=k)
    # The per-epoch training loss is logged for each seed.
    lines = [json.loads(x) for x in (task / "ft4/seed-1/metrics.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in lines] == [1, 2] and lines[1]["loss"] < lines[0]["loss"]


def test_fp16_scales_the_loss_and_unscales_before_clipping():
    """One step from the same weights and batch: in fp16 the gradient the optimizer sees
    (and the norm that is clipped and reported) is the true one, not 65536 times it."""
    from electra.config import LoopConfig
    from electra.runtime import Runtime
    from electra.train.optim import param_groups
    from electra.train.trainer import RandomStreams, Settings, Trainer

    cfg = model_preset("tiny", vocab_size=50, num_layers=2, hidden_dropout=0.0,
                       attention_dropout=0.0)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, 50, (8, 12), generator=g)
    labels = torch.randint(0, 2, (8,), generator=g)
    norms = {}
    for precision in ("fp32", "fp16"):
        torch.manual_seed(0)
        model = SequenceClassifier(cfg, 2)
        trainer = Trainer(model, Runtime(), Settings(lr=1e-3, max_steps=10, warmup_steps=0,
                                                     loop=LoopConfig(precision=precision)),
                          lambda m: param_groups(m, 0.0), streams=RandomStreams(Runtime(), 0))
        assert (trainer.scaler is not None) == (precision == "fp16")

        def micro(m, j):
            logits = m(ids, torch.ones_like(ids))
            return torch.nn.functional.cross_entropy(logits.float(), labels), {}

        assert trainer.train_step(micro) is not None
        norms[precision] = trainer.metrics()["grad_norm"]
    assert norms["fp16"] == pytest.approx(norms["fp32"], rel=0.05), norms


@pytest.mark.slow
def test_fp16_finetuning_learns_a_separable_task(task):
    assert main(["finetune", "--random-init", "tiny", "--tokenizer", str(task / "tok"),
                 *custom_args(task), "--out", str(task / "ft"), "--quiet", "--set", "epochs=4",
                 "--set", "lr=1e-3", "--set", "precision=fp16"]) == 0
    results = json.loads((task / "ft/results.json").read_text())
    assert results["config"]["precision"] == "fp16"
    assert results["median"]["dev"]["accuracy"] >= 0.95


@pytest.mark.parametrize("select", ["last", "best"])
def test_interrupted_finetune_resumes_bitwise(task, monkeypatch, capsys, select):
    """Two seeds; Ctrl-C in the middle of seed 2's 12th step (after its forward). The same
    command without --resume is refused and changes nothing (it used to start over, deleting
    the checkpoint). --resume keeps seed 1 and continues seed 2 from a checkpoint of step 11:
    every number and weight equals an uninterrupted run's (fp32, with dropout), the kept
    best evaluation included."""
    args = ["finetune", "--random-init", "tiny", "--tokenizer", str(task / "tok"),
            *custom_args(task), "--seeds", "1,2", "--quiet", "--set", "epochs=2", "--set",
            "precision=fp32", "--set", "batch_size=16", "--set", "save_every=5", "--set",
            f"select={select}", "--set", "eval_every=4"]
    assert main([*args, "--out", str(task / "a")]) == 0
    ctrl_c_in_step(monkeypatch, 50 + 12)  # seed 1 has 2 epochs x 25 steps
    assert main([*args, "--out", str(task / "b")]) == 130
    monkeypatch.undo()
    partial = task / "b.partial"
    assert not (task / "b").exists() and (partial / "seed-1/result.json").is_file()
    assert sorted(p.name for p in (partial / "seed-2/checkpoints").iterdir()) == [
        "step-0000011"]  # keep_checkpoints=1: the Ctrl-C one replaced step 10's
    seed1 = (partial / "seed-1/model.safetensors").stat().st_mtime_ns
    before = snapshot(partial)
    capsys.readouterr()
    assert main([*args, "--out", str(task / "b")]) == 2
    err = capsys.readouterr().err.strip()
    assert "holds what an interrupted electra finetune did" in err and "--resume" in err, err
    assert snapshot(partial) == before and not (task / "b").exists()
    assert main([*args, "--out", str(task / "b"), "--resume"]) == 0
    assert not partial.exists()
    assert (task / "b/seed-1/model.safetensors").stat().st_mtime_ns == seed1  # not retrained
    assert not (task / "b/seed-2/checkpoints").exists()
    ra = json.loads((task / "a/results.json").read_text())
    rb = json.loads((task / "b/results.json").read_text())
    assert ra["seeds"] == rb["seeds"] and ra["median"] == rb["median"]
    for d in (*ra["details"].values(), *rb["details"].values()):
        d.pop("seconds")
    assert ra["details"] == rb["details"]
    for seed in (1, 2):
        wa = load_file(task / f"a/seed-{seed}/model.safetensors")
        wb = load_file(task / f"b/seed-{seed}/model.safetensors")
        assert all(torch.equal(wa[k], wb[k]) for k in wa), seed
    ma = (task / "a/seed-2/metrics.jsonl").read_text().splitlines()
    mb = (task / "b/seed-2/metrics.jsonl").read_text().splitlines()
    strip = [{k: v for k, v in json.loads(x).items() if k not in TIMING_KEYS} for x in ma]
    assert strip == [{k: v for k, v in json.loads(x).items() if k not in TIMING_KEYS}
                     for x in mb]  # timings (tokens/s, mfu) differ


def test_resume_takes_the_same_model_folder_however_it_is_written(task, monkeypatch, capsys):
    """--model run0, interrupted, then --resume with ./run0 and with its absolute path: the
    same folder, so it resumes (it was refused with advice to --overwrite, which throws the
    checkpoints away); another folder is still refused."""
    import shutil

    from electra.data.tokenizer import load_tokenizer

    tok = load_tokenizer(task / "tok")
    disc = Discriminator(model_preset("tiny", vocab_size=tok.get_vocab_size()))
    folders.save(disc, "discriminator", task / "run0/discriminator", tok)
    shutil.copytree(task / "run0", task / "run1")
    monkeypatch.chdir(task)
    args = ["finetune", "--task", "custom", "--train", "train.csv", "--dev", "dev.csv",
            "--quiet", "--set", "epochs=1", "--set", "save_every=2", "--set",
            "max_train_examples=64", "--set", "batch_size=16", "--out", "ft"]
    ctrl_c_in_step(monkeypatch, 3)
    assert main([*args, "--model", "run0"]) == 130
    monkeypatch.undo()
    monkeypatch.chdir(task)
    capsys.readouterr()
    assert "other settings" in cli_error(capsys, *args, "--model", "run1", "--resume")
    # a multi-task --resume onto this single-task fine-tune: refused before it writes
    saved = (task / "ft.partial/finetune.json").read_bytes()
    copa = Path(__file__).parent / "fixtures/superglue/COPA"
    multi = ["finetune", "--task", "custom,copa", "--data", f",{copa}", "--train",
             "train.csv,", "--dev", "dev.csv,", "--quiet", "--set", "epochs=1", "--out", "ft"]
    err = cli_error(capsys, *multi, "--model", "run0", "--resume")
    assert "it fine-tunes one task, this command several tasks" in err, err
    assert (task / "ft.partial/finetune.json").read_bytes() == saved
    assert main([*args, "--model", "./run0", "--resume"]) == 0
    assert (task / "ft/results.json").is_file()


def test_resume_refuses_other_settings_and_a_finished_run(task, capsys):
    args = ["finetune", "--random-init", "tiny", "--tokenizer", str(task / "tok"),
            *custom_args(task), "--quiet", "--set", "epochs=1"]
    assert main([*args, "--out", str(task / "a")]) == 0
    capsys.readouterr()
    assert "already complete" in cli_error(capsys, *args, "--out", task / "a", "--resume")
    (task / "b.partial").mkdir()
    (task / "b.partial/finetune.json").write_text(json.dumps(
        {"task": "custom", "model": "random-init", "config": {"lr": 1.0}, "labels": {},
         "seeds": [1]}))
    assert "other settings" in cli_error(capsys, *args, "--out", task / "b", "--resume")


@pytest.mark.parametrize("setting, words", [
    ("precision=bf61", "precision must be one of auto, bf16, fp16, fp32, got 'bf61'"),
    ("grad_accum=3", "batch_size=32 is not divisible by grad_accum=3"),
    ("grad_accum=0", "grad_accum must be a positive integer, got 0"),
    ("epochs=abc", "epochs must be an integer or unset, got 'abc'"),
    ("lr=nan", "lr must be a finite number"),
    ("lr=-1", "lr must be > 0, got -1.0"),
    ("max_length=0", "max_length must be >= 8"),
    ("batch_size=0", "batch_size must be a positive integer, got 0"),
    ("layer_decay=1.5", "layer_decay must be in (0, 1]"),
    ("freeze=decoder", "freeze must be one of none, encoder, got 'decoder'"),
])
def test_bad_finetuning_settings_name_the_value(task, capsys, setting, words):
    err = cli_error(capsys, "finetune", "--random-init", "tiny", "--tokenizer", task / "tok",
                    *custom_args(task), "--out", task / "o", "--set", setting)
    assert words in err
    assert not (task / "o").exists() and not (task / "o.partial").exists()


def test_bad_seeds_are_one_line(task, capsys):
    assert "--seeds abc" in cli_error(capsys, "finetune", "--random-init", "tiny",
                                      "--tokenizer", task / "tok", *custom_args(task),
                                      "--out", task / "o", "--seeds", "abc")


def run_custom(task: Path, out: str, *sets: str, seeds: str = "1") -> dict:
    assert main(["finetune", "--random-init", "tiny", "--tokenizer", str(task / "tok"),
                 *custom_args(task), "--out", str(task / out), "--quiet", "--seeds", seeds,
                 *[x for s in sets for x in ("--set", s)]]) == 0
    return json.loads((task / out / "results.json").read_text())


def test_a_collapsed_classifier_is_flagged_with_its_class(task, monkeypatch, capsys):
    """A head biased towards "neg" that cannot learn (lr ~0) predicts "neg" everywhere: the
    seed is flagged, naming the class and its share of dev; a healthy run is not."""
    real = SequenceClassifier.__init__

    def biased(self, cfg, num_labels, kernels=None):
        real(self, cfg, num_labels, kernels)
        with torch.no_grad():
            self.head_out.bias[0] = 50.0  # label id 0 is "neg" (labels sorted)

    monkeypatch.setattr(SequenceClassifier, "__init__", biased)
    results = run_custom(task, "collapsed", "epochs=2", "lr=1e-12")
    dev = [line.split(",")[-1] for line in (task / "dev.csv").read_text().splitlines()[1:]]
    share = dev.count("neg") / len(dev)
    warnings = results["details"]["1"]["warnings"]
    assert f"dev: every prediction is 'neg' ({share:.1%} of dev is 'neg')" in warnings
    assert any(w.startswith("the training loss never fell below its first epoch's")
               for w in warnings)  # lr ~0: it cannot
    assert "electra: warning: seed 1: dev: every prediction is 'neg'" in capsys.readouterr().err
    md = (task / "collapsed/results.md").read_text()
    assert "seed 1 (!)" in md and "every prediction is 'neg'" in md
    # Its model card says so too, under the hub's own reader (issue 58).
    hub = pytest.importorskip("huggingface_hub")
    card = hub.ModelCard.load(task / "collapsed/seed-1/README.md")
    assert "## Warnings" in card.text and "every prediction is 'neg'" in card.text
    assert card.data.eval_results[0].metric_value == results["seeds"]["1"]["dev"]["accuracy"]
    monkeypatch.undo()
    healthy = run_custom(task, "healthy", "epochs=4", "lr=1e-3", seeds="1,2")
    assert "## Warnings" not in (task / "healthy/seed-1/README.md").read_text()
    assert healthy["median"]["dev"]["accuracy"] >= 0.95
    assert all(d["warnings"] == [] for d in healthy["details"].values())
    c = healthy["details"]["1"]["confusion"]["dev"]
    matrix = np.array(c["matrix"])
    assert c["labels"] == ["neg", "pos"] and matrix.sum() == len(dev)
    assert np.trace(matrix) / matrix.sum() == pytest.approx(healthy["seeds"]["1"]["dev"][
        "accuracy"])


def test_selection_keeps_the_last_or_the_best_evaluation():
    from electra.train.finetuning import Selection

    scores = [0.5, 0.7, 0.7, float("nan"), 0.6]

    def run(mode: str) -> Selection:
        sel = Selection(mode, "dev", "accuracy", None)
        for epoch, score in enumerate(scores, 1):
            sel.stepped()
            sel.offer({"step": 10 * epoch, "epoch": epoch, "loss": 1.0,
                       "dev": {"dev": {"accuracy": score}}}, torch.nn.Linear(1, 1),
                      {"dev": (f"predictions of epoch {epoch}", None)})
        return sel

    best, last = run("best"), run("last")
    assert best.kept["epoch"] == 2  # the first of the two best; NaN never wins
    assert last.kept["epoch"] == 5
    assert len(best.history) == 5
    # the kept evaluation's predictions describe the model the seed ends with: the best's
    # (its weights are restored) whatever steps follow; the last's until the next step
    assert best.predictions == {"dev": ("predictions of epoch 2", None)}
    assert last.predictions == {"dev": ("predictions of epoch 5", None)}
    best.stepped()
    last.stepped()
    assert best.predictions is not None and last.predictions is None
    last.load_state_dict(best.state_dict())  # resumed: its predictions are made again
    assert last.predictions is None


@pytest.mark.parametrize("select", ["last", "best"])
def test_logged_dev_metrics_equal_evaluate_on_the_kept_model(task, capsys, select,
                                                             monkeypatch):
    """Dev is scored at every epoch's end (and every eval_every steps), and only then (the
    finished seed reuses its kept evaluation's predictions); the kept model, saved as the
    seed's model, gives exactly the numbers logged for its evaluation."""
    passes = []
    real = Sequence.predict
    monkeypatch.setattr(Sequence, "predict", lambda *a: passes.append(1) or real(*a))
    results = run_custom(task, select, "epochs=3", "lr=3e-4", "eval_every=7",
                         f"select={select}")
    details = results["details"]["1"]
    logged = [json.loads(x) for x in (task / select / "seed-1/metrics.jsonl").read_text()
              .splitlines()]
    steps_per_epoch = 400 // 32
    assert [r["step"] for r in logged] == sorted({*range(7, 37, 7), 12, 24, 36})
    assert [r["epoch"] for r in logged if r["step"] % steps_per_epoch == 0] == [1, 2, 3]
    assert all("dev_accuracy" in r and "loss" in r for r in logged)
    assert len(passes) == len(logged)
    kept = {e["step"]: e for e in details["evaluations"]}[details["step"]]
    if select == "best":
        assert kept["dev"]["dev"]["accuracy"] == max(r["dev_accuracy"] for r in logged)
    else:
        assert details["step"] == 36
    assert results["seeds"]["1"] == kept["dev"]
    capsys.readouterr()
    assert main(["evaluate", "--model", str(task / select / "seed-1"), *custom_args(task)[:2],
                 "--dev", str(task / "dev.csv")]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1]) == kept["dev"]
    assert not (task / select / "seed-1/best.safetensors").exists()


def test_plot_draws_a_finetuning_output(task):
    run_custom(task, "ft", "epochs=2", seeds="1,2")
    assert main(["plot", str(task / "ft")]) == 0
    assert (task / "ft/curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_constant_regression_head_is_flagged(task, monkeypatch, capsys):
    rng = random.Random(3)
    for name, n in (("reg_train.csv", 200), ("reg_dev.csv", 60)):
        rows = ["text,score"]
        for _ in range(n):
            k = rng.randint(0, 4)
            rows.append(f"{' '.join(['good'] * k + ['film'] * (5 - k))},{k}")
        (task / name).write_text("\n".join(rows) + "\n")
    real = SequenceClassifier.__init__

    def flat(self, cfg, num_labels, kernels=None):
        real(self, cfg, num_labels, kernels)
        with torch.no_grad():
            self.head_out.weight.zero_()  # the output is the bias alone

    monkeypatch.setattr(SequenceClassifier, "__init__", flat)
    assert main(["finetune", "--random-init", "tiny", "--tokenizer", str(task / "tok"),
                 "--task", "custom", "--train", str(task / "reg_train.csv"), "--dev",
                 str(task / "reg_dev.csv"), "--label-column", "score", "--regression",
                 "--out", str(task / "reg"), "--quiet", "--set", "epochs=1", "--set",
                 "lr=1e-12"]) == 0
    details = json.loads((task / "reg/results.json").read_text())["details"]["1"]
    assert details["confusion"] == {}
    assert details["warnings"][0].startswith("dev: near-constant predictions (std ")


def test_freeze_encoder_trains_the_head_alone(task):
    """A linear probe: every encoder weight of the fine-tuned model is bitwise the
    pretrained one, the head moved, and the encoder ran without dropout (so two seeds'
    features agree)."""
    from electra.data.tokenizer import load_tokenizer

    tok = load_tokenizer(task / "tok")
    torch.manual_seed(0)
    disc = Discriminator(model_preset("tiny", vocab_size=tok.get_vocab_size()))
    folders.save(disc, "discriminator", task / "run/discriminator", tok)
    assert main(["finetune", "--model", str(task / "run"), "--task", "custom", "--train",
                 str(task / "train.csv"), "--dev", str(task / "dev.csv"), "--out",
                 str(task / "probe"), "--set", "epochs=2", "--set", "freeze=encoder",
                 "--set", "lr=1e-2", "--set", "precision=fp32", "--quiet"]) == 0
    tuned = load_file(task / "probe/seed-1/model.safetensors")
    pretrained = disc.encoder.state_dict()
    for key, value in pretrained.items():
        assert torch.equal(tuned[f"encoder.{key}"], value), key
    torch.manual_seed(1)  # the seed's own initial head
    fresh = SequenceClassifier(disc.config, 2)
    assert torch.equal(tuned["encoder.layers.0.qkv.weight"],
                       fresh.encoder.layers[0].qkv.weight) is False  # pretrained, not fresh
    for key in ("head_dense.weight", "head_out.weight"):
        assert not torch.equal(tuned[key], fresh.state_dict()[key]), key
    result = json.loads((task / "probe/results.json").read_text())
    assert result["config"]["freeze"] == "encoder"


def test_a_glue_finetune_imports_neither_scikit_learn_nor_scipy(tmp_path):
    """F1, accuracy and the confusion matrix are numpy's (test_metrics_are_scikit_learns):
    an MRPC fine-tune and its report never import scikit-learn or scipy, 2-3 s of a short
    command's start."""
    import subprocess
    import sys

    rng = random.Random(0)
    mrpc = tmp_path / "MRPC"
    mrpc.mkdir()
    for name, n in (("train.tsv", 64), ("dev.tsv", 32)):
        rows = ["\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String"]
        for i in range(n):
            a = " ".join(rng.choice(["the", "a", "cat", "dog", "sat", "ran"]) for _ in range(6))
            same = rng.random() < 0.5
            rows.append(f"{int(same)}\t{i}\t{i}\t{a}\t{a if same else a[::-1]}")
        (mrpc / name).write_text("\n".join(rows) + "\n")
    train_tokenizer([str(mrpc / "train.tsv")], 100, tmp_path / "tok")
    args = ["finetune", "--random-init", "tiny", "--tokenizer", str(tmp_path / "tok"),
            "--task", "mrpc", "--data", str(mrpc), "--out", str(tmp_path / "ft"), "--quiet",
            "--set", "epochs=1", "--set", "precision=fp32"]
    code = ("import sys; from electra.cli import main; rc = main(sys.argv[1:]); "
            "print(rc, sorted({m.split('.')[0] for m in sys.modules} & {'sklearn', 'scipy'}))")
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip().splitlines()[-1] == "0 []"
    dev = json.loads((tmp_path / "ft/results.json").read_text())["median"]["dev"]
    assert set(dev) == {"f1", "accuracy"}


def test_fine_tuning_takes_every_schedule_and_optimizer_setting_pretraining_has(task, capsys):
    """One set of loop settings (LoopConfig): `--set schedule=cosine` or `wsd` with its decay
    shape shapes the fine-tune's rate as it shapes pretraining's (each metrics line's rate
    against the linear run's: the schedules' ratio at that step), AdamW's betas and epsilon
    reach the optimizer, and a decay longer than the run decays over what there is (a note)."""
    from electra.config import FinetuneConfig, TrainConfig
    from electra.train.optim import schedule
    from electra.train.trainer import Settings

    def rates(out: str, *sets: str) -> list[float]:
        run_custom(task, out, "epochs=2", "batch_size=16", "max_train_examples=96", "eval_every=2",
                   "precision=fp32", *sets)
        lines = (task / out / "seed-1/metrics.jsonl").read_text().splitlines()
        return [(r["step"], r["lr"]) for r in map(json.loads, lines)]

    linear = rates("linear")
    total = linear[-1][0]  # 2 epochs of 6 steps, a line every 2
    assert [step for step, _ in linear] == [2, 4, 6, 8, 10, 12]
    warmup = int(0.1 * total)
    for sets, shape in ((("schedule=cosine",), schedule("cosine", warmup, total)),
                        (("schedule=wsd", "decay_fraction=0.5", "decay_shape=1-sqrt"),
                         schedule("wsd", warmup, total, 0.5, decay_shape="1-sqrt"))):
        got = rates(sets[0].split("=")[1], *sets)
        line = schedule("linear", warmup, total)
        for (step, lr), (_, base) in zip(got, linear, strict=True):
            if base:
                assert lr / base == pytest.approx(shape(step) / line(step), rel=1e-9), sets
    settings = Settings.of(FinetuneConfig(adam_beta1=0.8, adam_eps=1e-8, schedule="wsd"),
                           1e-4, 10, 1)
    loop = settings.loop  # the loop's own config, read as it is
    assert (loop.adam_beta1, loop.adam_eps, loop.schedule, settings.prefix) == (
        0.8, 1e-8, "wsd", "")
    assert Settings.of(TrainConfig(), 1e-4, 10, 1).prefix == "train."
    capsys.readouterr()
    rates("long", "schedule=wsd", "decay_steps=1000")
    assert "decay_steps=1000 is more than the 11 steps after the warmup (2 epoch(s) of 6 " \
        "steps): the rate decays over those" in capsys.readouterr().err
