"""Model cards (issue 44): every model folder electra writes has a README.md the hub's own
reader parses, its results equal to the run's files, its lineage carried from a downloaded
model through import, continued pretraining, fine-tuning and export."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from helpers import make_run, write_sentiment

from electra.cli import main
from electra.model.bodies import model_preset
from electra.saved import cards
from electra.train.metrics import iter_metrics

transformers = pytest.importorskip("transformers")
hub = pytest.importorskip("huggingface_hub")


def card(folder: Path):
    """The folder's card as huggingface_hub reads it: (metadata, {metric: value})."""
    c = hub.ModelCard.load(folder / "README.md")
    results = {r.metric_type: r.metric_value for r in c.data.eval_results or []}
    return c.data, results


def downloaded(tmp_path: Path) -> Path:
    """A random-weight ELECTRA discriminator where the hub's cache keeps google's, with the
    README (license) the hub serves beside it."""
    from electra.model.bodies.bert.hf import to_config as to_hf_config

    folder = tmp_path / "hub/models--google--electra-tiny-discriminator/snapshots/0a1b2c"
    run, _ = make_run(tmp_path, "tiny")  # a vocabulary of the corpus c.txt
    vocab = (run / "discriminator/vocab.txt").read_text()
    torch.manual_seed(1)
    transformers.ElectraForPreTraining(to_hf_config(model_preset(
        "tiny", vocab_size=len(vocab.splitlines())))).save_pretrained(folder)
    (folder / "vocab.txt").write_text(vocab)
    (folder / "README.md").write_text("---\nlicense: apache-2.0\nlanguage: en\n---\n# ELECTRA\n")
    return folder


@pytest.mark.slow
def test_cards_from_a_downloaded_model_to_an_exported_fine_tune(tmp_path):
    from electra.data.prepare import PrepareOptions, prepare

    assert main(["import", str(downloaded(tmp_path)), "--out", str(tmp_path / "imp")]) == 0
    meta, _ = card(tmp_path / "imp/discriminator")
    assert (meta.library_name, meta.base_model, meta.license) == (
        "electra", "google/electra-tiny-discriminator", "apache-2.0")

    # Continued pretraining: the held-out figures of its last line, the lineage kept.
    prepare(PrepareOptions(inputs=[str(tmp_path / "c.txt")], tokenizer=str(
        tmp_path / "imp/discriminator"), out=str(tmp_path / "data"), seq_len=32,
        val_fraction=0.2, quiet=True))
    assert main(["pretrain", "--preset", "tiny", "--init", str(tmp_path / "imp"), "--data",
                 str(tmp_path / "data"), "--out", str(tmp_path / "cont"), "--quiet", "--set",
                 "max_steps=3", "--set", "batch_size=4", "--set", "precision=fp32"]) == 0
    last = list(iter_metrics(tmp_path / "cont"))[-1]
    meta, results = card(tmp_path / "cont/discriminator")
    assert results == {"accuracy": last["val_disc_acc"], "roc_auc": last["val_disc_auc"]}
    assert meta.base_model == "google/electra-tiny-discriminator"
    text = (tmp_path / "cont/discriminator/README.md").read_text()
    assert f"| tokens | {last['tokens']:,} (real" in text  # the run's own count
    assert "| steps | 3 steps of 4 examples; adamw, linear schedule" in text
    prepared = json.loads((tmp_path / "data/meta.json").read_text())
    assert (f"| data | c.txt ({prepared['documents']:,} documents, "
            f"{prepared['bytes'] / 1e6:.1f} MB): ") in text  # what it was made from, no paths
    assert str(tmp_path) not in text
    meta, results = card(tmp_path / "cont/generator")
    assert meta.pipeline_tag == "fill-mask" and results == {"accuracy": last["val_gen_acc"]}

    # A fine-tune of it: its seed's dev scores, as results.json has them; a license set.
    write_sentiment(tmp_path / "train.csv", 64, 0)
    write_sentiment(tmp_path / "dev.csv", 32, 1)
    assert main(["finetune", "--model", str(tmp_path / "cont"), "--task", "custom", "--train",
                 str(tmp_path / "train.csv"), "--dev", str(tmp_path / "dev.csv"), "--out",
                 str(tmp_path / "ft"), "--seeds", "3", "--quiet", "--set", "epochs=1",
                 "--set", "precision=fp32", "--set", "license=mit"]) == 0
    scores = json.loads((tmp_path / "ft/results.json").read_text())["seeds"]["3"]["dev"]
    meta, results = card(tmp_path / "ft/seed-3")
    assert results == scores and meta.pipeline_tag == "text-classification"
    assert (meta.base_model, meta.license) == ("google/electra-tiny-discriminator", "mit")

    # Exported: the same card for transformers.
    assert main(["export", str(tmp_path / "ft/seed-3"), "--out", str(tmp_path / "hfc")]) == 0
    meta, results = card(tmp_path / "hfc")
    assert (meta.library_name, meta.pipeline_tag, results) == (
        "transformers", "text-classification", scores)
    assert "ElectraForSequenceClassification.from_pretrained" in (
        tmp_path / "hfc/README.md").read_text()
    assert main(["export", str(tmp_path / "cont"), "--out", str(tmp_path / "hf")]) == 0
    assert card(tmp_path / "hf/generator")[0].pipeline_tag == "fill-mask"
    assert card(tmp_path / "hf/discriminator")[0].base_model == (
        "google/electra-tiny-discriminator")


def test_a_benchmark_task_names_its_hub_dataset_and_a_card_renders_valid_yaml():
    """GLUE's SST-2 as the hub names it; values with YAML's special characters survive."""
    from electra.tasks.registry import head_for_task as head_for

    assert head_for("sst2").hub_datasets.get("sst2") == ("nyu-mll/glue", "sst2")
    assert head_for("custom").hub_datasets.get("custom") is None
    assert head_for("squad1").hub_datasets.get("squad1") == ("rajpurkar/squad", "plain_text")
    text = cards.render({"title": "t", "what": "w", "license": "apache-2.0",
                         "results": [cards.result("a: b # c", "data: 'x'", "accuracy", 0.5,
                                                  task_type="text-classification", seed=1)]},
                        "name: with colon", "electra")
    c = hub.ModelCard(text)
    (r,) = c.data.eval_results
    assert (r.task_name, r.dataset_name, r.metric_value) == ("a: b # c", "data: 'x'", 0.5)


def test_hub_ids_come_only_from_the_hubs_cache_layout(tmp_path):
    assert cards.hub_id("/x/models--google--electra-small-discriminator/snapshots/ab") == (
        "google/electra-small-discriminator")
    assert cards.hub_id(tmp_path / "my-model") is None


def test_the_command_a_card_shows_is_electras_own(monkeypatch):
    monkeypatch.setattr("sys.argv", ["/venv/bin/electra", "pretrain", "--data", "my data"])
    assert cards.command_line() == "electra pretrain --data 'my data'"
    monkeypatch.setattr("sys.argv", ["/x/electra/__main__.py", "export", "run"])
    assert cards.command_line() == "electra export run"
    monkeypatch.setattr("sys.argv", ["/x/pytest/__main__.py", "-q"])  # electra from Python
    assert cards.command_line() == ""
