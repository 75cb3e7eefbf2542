"""Hub ids wherever a model or tokenizer goes (issue 61): ``org/name`` and
``org/name@revision`` resolved by huggingface_hub from its cache, offline
(``HF_HUB_OFFLINE``), on a cache laid out as huggingface_hub lays it out
(``models--ORG--NAME/refs/main``, ``snapshots/COMMIT/``): an ELECTRA, a ModernBERT and a
released DeBERTa-V3 folder (``pytorch_model.bin``, read with ``weights_only=True``). The cards
name the id and its revision; a missing id is one line naming HF_HUB_OFFLINE and the
cache."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from helpers import cli_error, make_run, write_sentiment
from test_hf_deberta import spm_dir  # noqa: F401  (the fixture: a SentencePiece model)

from electra.cli import main

transformers = pytest.importorskip("transformers")
hub = pytest.importorskip("huggingface_hub")

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def cached(cache: Path, repo: str, folder: Path, commit: str = COMMIT,
           branch: str = "main") -> Path:
    """``folder``'s files as huggingface_hub keeps a download of ``repo`` at ``commit``:
    the snapshot (files linked to blobs, as it stores them) and the branch's ref."""
    org, name = repo.split("/")
    root = cache / f"models--{org}--{name}"
    snap = root / "snapshots" / commit
    snap.mkdir(parents=True, exist_ok=True)
    (root / "blobs").mkdir(exist_ok=True)
    for f in folder.iterdir():
        blob = root / "blobs" / f"{commit[:8]}-{f.name}"
        shutil.copyfile(f, blob)
        (snap / f.name).symlink_to(Path("../../blobs") / blob.name)
    (root / "refs").mkdir(exist_ok=True)
    (root / "refs" / branch).write_text(commit)
    return snap


@pytest.fixture
def offline(tmp_path, monkeypatch) -> Path:
    """An empty hub cache of this test's own, and no network: HF_HUB_OFFLINE."""
    cache = tmp_path / "hub"
    cache.mkdir()
    monkeypatch.setattr(hub.constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return cache


def electra_folder(tmp_path: Path) -> tuple[Path, Path]:
    """A transformers ElectraForPreTraining folder with random weights and the vocabulary of
    a letters corpus (and that corpus)."""
    from electra.model.bodies import model_preset
    from electra.model.bodies.bert.hf import to_config as to_hf_config

    (tmp_path / "src").mkdir()
    run, _ = make_run(tmp_path / "src", "tiny")
    vocab = (run / "discriminator/vocab.txt").read_text()
    folder = tmp_path / "electra-tiny"
    torch.manual_seed(1)
    transformers.ElectraForPreTraining(to_hf_config(model_preset(
        "tiny", vocab_size=len(vocab.splitlines())))).save_pretrained(folder)
    (folder / "vocab.txt").write_text(vocab)
    (folder / "README.md").write_text("---\nlicense: apache-2.0\n---\n# ELECTRA\n")
    return folder, tmp_path / "src/c.txt"


def test_an_electra_id_imports_fine_tunes_and_prepares_offline(tmp_path, offline, capsys):
    folder, corpus = electra_folder(tmp_path)
    snap = cached(offline, "google/electra-tiny", folder)
    assert main(["import", "google/electra-tiny", "--out", str(tmp_path / "imp")]) == 0
    assert f"import {snap}: loaded the discriminator" in capsys.readouterr().out
    card = hub.ModelCard.load(tmp_path / "imp/discriminator/README.md")
    assert (card.data.base_model, card.data.license) == ("google/electra-tiny", "apache-2.0")
    assert f"at revision `{COMMIT}`" in card.text

    # --model at a revision (the commit), and --tokenizer by id
    write_sentiment(tmp_path / "train.csv", 40, 0)
    assert main(["finetune", "--model", f"google/electra-tiny@{COMMIT}", "--task", "custom",
                 "--train", str(tmp_path / "train.csv"), "--dev", str(tmp_path / "train.csv"),
                 "--out", str(tmp_path / "ft"), "--quiet", "--set", "epochs=1", "--set",
                 "precision=fp32"]) == 0
    results = json.loads((tmp_path / "ft/results.json").read_text())
    assert results["model"] == f"google/electra-tiny@{COMMIT}"  # as the user named it
    card = hub.ModelCard.load(tmp_path / "ft/seed-1/README.md")
    assert card.data.base_model == "google/electra-tiny"
    assert main(["prepare", "--input", str(corpus), "--tokenizer", "google/electra-tiny",
                 "--seq-len", "32", "--out", str(tmp_path / "data")]) == 0
    meta = json.loads((tmp_path / "data/meta.json").read_text())
    assert meta["vocab_size"] == len((folder / "vocab.txt").read_text().splitlines())

    # Not in the cache, offline: one line naming HF_HUB_OFFLINE and the cache.
    err = cli_error(capsys, "finetune", "--model", "google/electra-huge", "--task", "custom",
                    "--train", tmp_path / "train.csv", "--dev", tmp_path / "train.csv",
                    "--out", tmp_path / "ft2")
    assert ("--model google/electra-huge: no such local folder, and google/electra-huge is "
            f"not in the hub's cache ({offline}) while HF_HUB_OFFLINE is set") in err
    assert "hf download google/electra-huge" in err and not (tmp_path / "ft2").exists()
    assert "not in the hub's cache" in cli_error(
        capsys, "import", "google/electra-tiny@v2", "--out", tmp_path / "imp2")
    # A local path wins over the hub's form: a folder named like an id is that folder.
    local = tmp_path / "org" / "model"
    shutil.copytree(folder, local)
    from electra.io.hub import resolve

    assert resolve(local, "--model") == str(local)


def test_a_modernbert_id_continues_pretraining_with_rtd(tmp_path, offline):
    from test_hf import tiny_modernbert

    tok, cfg = tiny_modernbert(tmp_path)
    torch.manual_seed(0)
    folder = tmp_path / "mb"
    transformers.ModernBertForMaskedLM(cfg).save_pretrained(folder)
    (folder / "tokenizer.json").write_text(tok.to_str())
    cached(offline, "answerdotai/ModernBERT-tiny", folder)
    assert main(["prepare", "--input", str(tmp_path / "c.txt"), "--tokenizer",
                 "answerdotai/ModernBERT-tiny", "--seq-len", "32", "--out",
                 str(tmp_path / "data")]) == 0
    assert main(["pretrain", "--preset", "tiny", "--set", "model.body=modernbert", "--init",
                 "answerdotai/ModernBERT-tiny", "--data", str(tmp_path / "data"), "--out",
                 str(tmp_path / "more"), "--quiet", "--set", "train.max_steps=2", "--set",
                 "train.batch_size=4", "--set", "train.precision=fp32"]) == 0
    card = hub.ModelCard.load(tmp_path / "more/discriminator/README.md")
    assert card.data.base_model == "answerdotai/ModernBERT-tiny"
    assert f"at revision `{COMMIT}`" in card.text


def test_a_released_deberta_v3_id_imports_with_its_generator(tmp_path, offline,
                                                             spm_dir):  # noqa: F811
    """The released layout by id: pytorch_model.bin read with weights_only=True (a pickle
    that would run code is refused, tests/test_faults.py), the generator beside it."""
    from test_hf_deberta import released_folder

    from electra.data.tokenizer import SpecialTokens, load_tokenizer
    from electra.saved import folders

    tok = load_tokenizer(spm_dir / "spm.model")
    folder, _, _ = released_folder(tmp_path, spm_dir, tok.get_vocab_size(),
                                   SpecialTokens.of(tok).pad)
    cached(offline, "microsoft/deberta-v3-tiny", folder)
    assert main(["import", "microsoft/deberta-v3-tiny", "--out", str(tmp_path / "imp")]) == 0
    gen, _ = folders.load(tmp_path / "imp", "generator")
    assert gen.config.body == "deberta" and gen.config.num_layers == 1


@pytest.mark.parametrize(("ref", "rule"), [
    ("org/na..me", "Cannot have -- or .. in repo_id"),
    ("org/name--x", "Cannot have -- or .. in repo_id"),
    ("org/name.", "The name cannot start or end with '-' or '.'"),
])
def test_an_id_the_hub_rejects_is_one_line_by_the_hubs_own_rules(ref, rule, offline, tmp_path,
                                                                  capsys):
    """An id of the org/name form that huggingface_hub's own validation rejects is one line
    naming the rule, wherever a model or tokenizer goes (it was HFValidationError's
    traceback)."""
    for args in (("detect", "--model", ref, "a text"),
                 ("import", ref, "--out", tmp_path / "i"),
                 ("prepare", "--input", tmp_path, "--tokenizer", ref, "--out", tmp_path / "p")):
        err = cli_error(capsys, *args)
        assert f"{ref}: no such local folder, and {ref.split('@')[0]!r} is no hub id" in err
        assert rule in err
