"""`electra predict` on a classifier: the same predictions as evaluation, probabilities,
plain lines."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from helpers import write_sentiment

from electra.cli import main
from electra.data.examples import read_custom
from electra.data.tokenizer import train_tokenizer
from electra.model import Discriminator
from electra.model.bodies import model_preset
from electra.saved import folders


@pytest.fixture(scope="module")
def classifier(tmp_path_factory):
    root = tmp_path_factory.mktemp("predict")
    write_sentiment(root / "train.csv", 200, 0)
    write_sentiment(root / "dev.csv", 60, 1)
    tok = train_tokenizer([str(root / "train.csv")], 100, root / "tok")
    torch.manual_seed(0)
    disc = Discriminator(model_preset("tiny", vocab_size=tok.get_vocab_size(), num_layers=1,
                                      hidden_size=32, num_heads=2, intermediate_size=64,
                                      embedding_size=32))
    folders.save(disc, "discriminator", root / "run/discriminator", tok)
    assert main(["finetune", "--model", str(root / "run"), "--task", "custom", "--train",
                 str(root / "train.csv"), "--dev", str(root / "dev.csv"), "--out",
                 str(root / "ft"), "--quiet", "--set", "epochs=3", "--set", "lr=3e-3",
                 "--set", "precision=fp32", "--set", "batch_size=16"]) == 0
    return root


def test_predictions_equal_evaluation_and_carry_probabilities(classifier, capsys):
    root = classifier
    assert main(["predict", "--model", str(root / "ft/seed-1"), "--input",
                 str(root / "dev.csv"), "--out", str(root / "p.jsonl"), "--quiet",
                 "--batch-size", "7"]) == 0
    records = [json.loads(x) for x in (root / "p.jsonl").read_text().splitlines()]
    gold = [e.label for e in read_custom(root / "dev.csv", ["text"], "label")]
    dev = json.loads((root / "ft/results.json").read_text())["seeds"]["1"]["dev"]["accuracy"]
    assert np.mean([r["label"] == g for r, g in zip(records, gold, strict=True)]) == \
        pytest.approx(dev)
    for r in records:
        assert sum(r["probs"].values()) == pytest.approx(1.0, abs=1e-5)
        assert r["label"] == max(r["probs"], key=r["probs"].get)
    texts = [e.text_a for e in read_custom(root / "dev.csv", ["text"], "label")]
    (root / "lines.txt").write_text("\n".join(texts) + "\n")
    capsys.readouterr()
    assert main(["predict", "--model", str(root / "ft/seed-1"), "--input",
                 str(root / "lines.txt"), "--quiet"]) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert [r["label"] for r in lines] == [r["label"] for r in records]


def test_predict_and_evaluate_take_a_precision(classifier, capsys):
    """The fine-tune ran in fp32; --precision bf16 runs the model in bf16 (probabilities
    move, within bf16's rounding), and --precision fp32 gives the fine-tune's own numbers."""
    root = classifier
    runs = {}
    for precision in (None, "fp32", "bf16"):
        capsys.readouterr()
        extra = ["--precision", precision] if precision else []
        assert main(["predict", "--model", str(root / "ft/seed-1"), "--input",
                     str(root / "dev.csv"), "--quiet", *extra]) == 0
        runs[precision] = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert runs["fp32"] == runs[None]
    p32 = np.array([list(r["probs"].values()) for r in runs["fp32"]])
    p16 = np.array([list(r["probs"].values()) for r in runs["bf16"]])
    assert not np.array_equal(p32, p16) and np.abs(p32 - p16).max() < 0.05
    scores = {}
    for precision in ("fp32", "bf16"):
        capsys.readouterr()
        assert main(["evaluate", "--model", str(root / "ft/seed-1"), "--task", "custom",
                     "--dev", str(root / "dev.csv"), "--precision", precision]) == 0
        scores[precision] = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    dev = json.loads((root / "ft/results.json").read_text())["seeds"]["1"]["dev"]
    assert scores["fp32"]["dev"]["accuracy"] == dev["accuracy"]


def test_a_saved_model_is_placed_on_its_device_with_that_devices_kernels(monkeypatch):
    """`evaluate`, `predict` and the embeddings run a loaded model where --device says
    (auto: CUDA when present) with that device's kernels; here a device other than the CPU
    is stood in by the meta device (this machine has no GPU)."""
    import torch

    from electra import runtime
    from electra.model import Discriminator
    from electra.model.bodies import model_preset
    from electra.model.kernels import FAST_CPU, REFERENCE, Kernels

    model = Discriminator(model_preset("tiny", vocab_size=50, num_layers=1))
    kinds = lambda m: {x.kernels for x in m.modules()  # noqa: E731
                       if isinstance(getattr(x, "kernels", None), Kernels)}
    assert kinds(runtime.placed(model, "cpu")) == {FAST_CPU}
    monkeypatch.setattr(runtime, "resolve_device", lambda name: torch.device("meta"))
    placed = runtime.placed(model, "cuda")
    assert kinds(placed) == {REFERENCE}
    assert {p.device.type for p in placed.parameters()} == {"meta"}
