"""Fine-tuning: layer-wise learning rates, learning a separable task, evaluate == finetune."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from conftest import cli_error

from electra import folders
from electra.cli import main
from electra.config import model_preset
from electra.model import Discriminator, SequenceClassifier
from electra.optim import layer_depth, layerwise_groups
from electra.tokenizer import train_tokenizer


def test_layerwise_learning_rates_follow_the_formula():
    cfg = model_preset("tiny", vocab_size=100, num_layers=4)
    model = SequenceClassifier(cfg, 3)
    lr, d, L = 1e-3, 0.8, 4
    groups = layerwise_groups(model, lr, d, 0.01)
    rate = {id(p): g["lr"] for g in groups for p in g["params"]}
    for name, p in model.named_parameters():
        if name.startswith("head_"):
            expected = lr  # the task head: full rate
        elif name.startswith("encoder.layers."):
            i = int(name.split(".")[2])
            expected = lr * d ** (L - 1 - i)  # top layer (i = 3) full, each below x0.8
        else:
            assert name.startswith("encoder.embeddings"), name
            expected = lr * d**L  # one step below layer 0
        assert rate[id(p)] == pytest.approx(expected), name
    assert layer_depth("encoder.layers.3.query.weight", L) == 4
    assert sum(len(g["params"]) for g in groups) == len(list(model.parameters()))


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


def test_finetune_from_a_pretrained_discriminator(task):
    from electra.tokenizer import load_tokenizer

    tok = load_tokenizer(task / "tok")
    disc = Discriminator(model_preset("tiny", vocab_size=tok.get_vocab_size()))
    folders.save(disc, "discriminator", task / "run/discriminator", tok.to_str())
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
    from conftest import shared_data

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
    import electra.finetune as ft
    from electra.data.tasks import Example

    seen = []
    real = ft.encode

    def spy(tok, examples, *a, **k):
        seen.append(list(examples))
        return real(tok, examples, *a, **k)

    monkeypatch.setattr(ft, "encode", spy)
    from tokenizers import Tokenizer, models

    tok = Tokenizer(models.WordLevel({"[PAD]": 0, "[UNK]": 1, "a": 2, "b": 3},
                                     unk_token="[UNK]"))
    train = [Example(f"a{i}", f"b{i}", str(i % 2)) for i in range(40)]
    data = ft.TaskData("custom", train, {"dev": train[:4]}, ("accuracy",), False,
                       {"0": 0, "1": 1})
    cfg = ft.FinetuneConfig(lr=1e-4, layer_decay=0.8, epochs=1, batch_size=4,
                            precision="fp32", double_pairs=True, max_train_examples=10)
    source = ft.ModelSource(None, model_preset("tiny", vocab_size=4, num_layers=1), Path("."),
                            "random-init")
    ft.finetune_one(source, tok, data, cfg, 1)
    used = seen[0]
    assert len(used) == 20
    first, swapped = used[:10], used[10:]
    assert len({e.text_a for e in first}) == 10 and all(e in train for e in first)
    assert [(e.text_a, e.text_b, e.label) for e in swapped] == [
        (e.text_b, e.text_a, e.label) for e in first]

