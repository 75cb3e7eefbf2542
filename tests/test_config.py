"""Configs: every field validated with a message naming it, presets, shipped files, --set,
and the help generated from the fields' docstrings."""

from __future__ import annotations

import pytest
from helpers import ROOT

from electra.config import (
    FinetuneConfig,
    ModelConfig,
    ObjectiveConfig,
    TrainConfig,
    load_run_config,
    model_preset,
)
from electra.errors import UserError


@pytest.mark.parametrize("kwargs, words", [
    ({"hidden_sise": 3}, ["hidden_sise", "valid keys", "hidden_size"]),
    ({"hidden_size": 100, "num_heads": 3}, ["hidden_size=100", "num_heads=3"]),
    ({"hidden_dropout": 1.5}, ["hidden_dropout", "1.5"]),
])
def test_bad_model_config_names_the_value(kwargs, words):
    with pytest.raises(ValueError) as err:
        model_preset("tiny", **kwargs)
    assert all(w in str(err.value) for w in words), str(err.value)


@pytest.mark.parametrize("kwargs, words", [
    ({"mask_prob": 0.0}, ["mask_prob", "(0, 1)"]),
    ({"mask_prob": 1.2}, ["mask_prob", "1.2"]),
    ({"disc_weight": -1.0}, ["disc_weight", "-1.0"]),
    ({"sampling": "beam"}, ["sampling", "gumbel", "beam"]),
])
def test_bad_objective_config_names_the_value(kwargs, words):
    with pytest.raises(ValueError) as err:
        ObjectiveConfig(**kwargs)
    assert all(w in str(err.value) for w in words), str(err.value)


def test_unknown_preset_lists_valid_ones():
    with pytest.raises(UserError, match="tiny, small, base, large"):
        model_preset("huge")


def test_default_config_is_small():
    assert ModelConfig() == model_preset("small")


def test_every_shipped_config_loads():
    files = sorted((ROOT / "configs").glob("*.toml"))
    assert len(files) >= 4
    for f in files:
        cfg = load_run_config(config_file=str(f))
        assert cfg.model.hidden_size % cfg.model.num_heads == 0
    assert load_run_config(config_file=str(ROOT / "configs/small.toml")) == load_run_config(
        "small")


def test_set_overrides_and_unknown_keys():
    cfg = load_run_config("small", sets=["train.lr=1e-3", "num_layers=4", "precision=fp32",
                                         "objective.sampling=inverse_cdf"])
    assert (cfg.train.lr, cfg.model.num_layers, cfg.train.precision) == (1e-3, 4, "fp32")
    assert cfg.objective.sampling == "inverse_cdf"
    with pytest.raises(UserError, match=r"unknown key 'lrr' in \[train\]; valid keys: lr"):
        load_run_config("small", sets=["train.lrr=1"])
    with pytest.raises(UserError, match="batch_size=10 is not divisible"):
        load_run_config("small", sets=["batch_size=10", "grad_accum=4"])


@pytest.mark.parametrize("cls", [ModelConfig, ObjectiveConfig, TrainConfig, FinetuneConfig])
def test_every_setting_is_documented_once_where_the_help_reads_it(cls):
    """The CLI's --set help is generated from each field's docstring: every field has one."""
    from dataclasses import fields

    from electra.config import field_docs, settings_help

    docs = field_docs(cls)
    assert list(docs) == [f.name for f in fields(cls)]
    assert all(len(d.split()) >= 3 for d in docs.values()), docs
    shown = settings_help(cls)
    assert all(f"{name}: " in shown for name in docs)


def test_finetune_help_lists_every_setting(capsys):
    from electra.cli import main

    with pytest.raises(SystemExit):
        main(["finetune", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert all(f"{f}:" in text for f in ("lr", "layer_decay", "doc_stride", "article_split"))
