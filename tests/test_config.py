"""Configs: every field validated with a message naming it, presets, shipped files, --set,
and the help generated from the fields' docstrings."""

from __future__ import annotations

import re

import pytest
from helpers import ROOT

from electra.config import FinetuneConfig, ModelConfig, TrainConfig
from electra.errors import UserError
from electra.model.bodies import model_preset
from electra.objectives.config import ObjectiveConfig
from electra.run_config import load_run_config


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
    # Each size's file says what its preset is (the paper's Table 6: Large masks 25%).
    for size in ("small", "base", "large"):
        assert load_run_config(config_file=str(ROOT / f"configs/{size}.toml")) == \
            load_run_config(size), size
    assert load_run_config("large").objective.mask_prob == 0.25


def test_the_mask30_presets_are_modernberts_recipe_on_its_bodies():
    """30% masking and the trapezoid (wsd, the last 10% falling as 1 - sqrt); the body and
    the rest as the plain modernbert presets."""
    for size in ("small", "base"):
        plain, m30 = load_run_config(f"modernbert-{size}"), load_run_config(
            f"modernbert-{size}-mask30")
        assert m30.model == plain.model and m30.objective.mask_prob == 0.3
        assert (m30.train.schedule, m30.train.decay_fraction, m30.train.decay_shape) == (
            "wsd", 0.1, "1-sqrt")
        assert m30.train.lr == plain.train.lr and m30.train.max_steps == plain.train.max_steps


def test_the_debertav3_presets_are_the_released_shapes_and_recipe():
    """microsoft/DeBERTa's rtd_{xsmall,small,base}.json: the discriminator's blocks, a
    generator as wide and half as deep; RTD with GDES, 15% chosen and all [MASK], λ = 50.
    xsmall on V3's 128,100 tokens, counted by hand: 21M parameters in its blocks beside 49M
    in its token table."""
    import torch

    from electra.model import Discriminator, count_parameters

    for size, (L, H, heads, gen_layers) in {"xsmall": (12, 384, 6, 6),
                                            "small": (6, 768, 12, 3),
                                            "base": (12, 768, 12, 6)}.items():
        run = load_run_config(f"debertav3-{size}")
        m, g = run.model, run.model.generator_config()
        assert (m.body, m.num_layers, m.hidden_size, m.num_heads, m.intermediate_size) == (
            "deberta", L, H, heads, 4 * H)
        assert (g.num_layers, g.hidden_size, g.num_heads) == (gen_layers, H, heads)
        assert (m.position_buckets, m.max_position_embeddings, m.layer_norm_eps) == (
            256, 512, 1e-7)
        o = run.objective
        assert (o.kind, o.sharing, o.mask_prob, o.mask_token_prob, o.disc_weight) == (
            "electra", "gdes", 0.15, 1.0, 50.0)
    with torch.device("meta"):
        disc = Discriminator(load_run_config("debertav3-xsmall").model.replace(
            vocab_size=128_100))
    H, I = 384, 1536
    block = 4 * (H * H + H) + 2 * H * I + I + H + 2 * 2 * H  # Q/K/V/out, FFN, two norms
    rel, head = 2 * 256 * H + 2 * H, (H * H + H) + 2 * H + (H + 1)  # table + norm; RTD head
    assert count_parameters(disc) == 128_100 * H + 2 * H + 12 * block + rel + head
    assert round(12 * block / 1e6) == 21 and round(128_100 * H / 1e6) == 49


def test_set_overrides_and_unknown_keys():
    cfg = load_run_config("small", sets=["train.lr=1e-3", "num_layers=4", "precision=fp32",
                                         "objective.sampling=inverse_cdf"])
    assert (cfg.train.lr, cfg.model.num_layers, cfg.train.precision) == (1e-3, 4, "fp32")
    assert cfg.objective.sampling == "inverse_cdf"
    with pytest.raises(UserError, match=r"unknown key 'lrr' in \[train\] \(did you mean "
                                        r"'lr'\?\); valid keys: lr"):
        load_run_config("small", sets=["train.lrr=1"])
    with pytest.raises(UserError, match="batch_size=10 is not divisible"):
        load_run_config("small", sets=["batch_size=10", "grad_accum=4"])


def _families():
    """Every registered task family's own settings class (``Head.Settings``)."""
    from electra.tasks.base import HEADS

    return list({h.Settings: None for h in HEADS.values()})


CONFIGS = [ModelConfig, ObjectiveConfig, TrainConfig, FinetuneConfig, *_families()]


@pytest.mark.parametrize("cls", CONFIGS, ids=lambda c: c.__name__)
def test_every_setting_is_documented_once_where_the_help_reads_it(cls):
    """The CLI's --set help is generated from each field's docstring: every field has one
    (FinetuneConfig's ``family`` holds the families' own, each documented in its class)."""
    from dataclasses import fields

    from electra.config import config_keys, field_docs, settings_help

    docs = field_docs(cls)  # the class's own keys first, then the loops' shared ones
    assert list(docs) == config_keys(cls) and set(docs) == {
        f.name for f in fields(cls) if not f.metadata.get("flat")}
    assert all(len(d.split()) >= 3 for d in docs.values()), docs
    shown = settings_help(cls)
    assert all(f"{name}: " in shown for name in docs)


def test_finetune_help_lists_every_setting(capsys):
    from electra.cli import main

    with pytest.raises(SystemExit):
        main(["finetune", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert all(f"{f}:" in text for f in ("lr", "layer_decay", "doc_stride", "article_split",
                                         "double_pairs", "pooling"))


def _outside(spec, value_type):
    """Values just outside a range spec (or a choice that is not one)."""
    if isinstance(spec, tuple):
        return ["not-a-choice"]
    step = 1 if value_type == "int" else 0.5
    if spec[0] in "<>":
        op, bound = spec.split()
        b = float(bound)
        wrong = {">=": b - step, ">": b, "<=": b + step, "<": b}[op]
        return [int(wrong) if value_type == "int" else wrong]
    lo, hi = (float(x) for x in spec[1:-1].split(","))
    values = [lo - step if spec[0] == "[" else lo, hi + step if spec[-1] == "]" else hi]
    return [int(v) if value_type == "int" else v for v in values]


@pytest.mark.parametrize("cls", CONFIGS, ids=lambda c: c.__name__)
def test_every_number_and_choice_has_its_range_and_it_is_what_is_checked(cls):
    """``RANGES`` is what the configuration reference shows; every number (and every choice
    but the objective's kind, whose choices are the registry's) has one, the defaults are in
    it, and a value just outside it is refused naming the key."""
    from dataclasses import fields

    for f in fields(cls):
        kinds = {k.strip() for k in str(f.type).split("|")} - {"None"}
        numeric = kinds & {"int", "float"}
        if numeric:
            assert f.name in cls.RANGES, f"{cls.__name__}.{f.name} has no range"
        spec = cls.RANGES.get(f.name)
        if spec is None:
            continue
        if isinstance(spec, tuple):
            assert f.default in spec
        elif f.default is not None:
            from electra.config import within

            assert within(spec, f.default), (f.name, spec, f.default)
        kind = "int" if "int" in kinds else "float"
        for bad in _outside(spec, kind):
            with pytest.raises(UserError, match=re.escape(f.name)):
                cls(**{f.name: bad})


def test_every_numeric_setting_declares_its_range():
    """A number the user sets has a range the run survives, declared once in its class's
    RANGES (what validation checks and the configuration reference shows)."""
    from dataclasses import fields


    missing = [f"{cls.__name__}.{f.name}" for cls in CONFIGS
               for f in fields(cls)
               if ("int" in str(f.type) or "float" in str(f.type)) and f.name not in cls.RANGES]
    assert missing == []


@pytest.mark.parametrize("base, sets, expect", [
    ("tiny", ["model.body=modernbert"], ("modernbert", 0.0, 0.0, 1e-5)),
    ("tiny", ["model.body=deberta"], ("deberta", 0.1, 0.1, 1e-7)),
    ("tiny", ["model.body=modernbert", "model.hidden_dropout=0.2"],
     ("modernbert", 0.2, 0.0, 1e-5)),
    ("modernbert-small", ["model.body=bert"], ("bert", 0.1, 0.1, 1e-12)),
    ("modernbert-small", ["model.hidden_dropout=0.1"], ("modernbert", 0.1, 0.0, 1e-5)),
])
def test_another_body_brings_its_own_defaults_unless_set(base, sets, expect):
    """`--set model.body=X` on a preset of another body takes X's published dropout and
    layer-norm epsilon (ModernBERT: 0 and 1e-5), except what the same config sets."""
    from electra.run_config import load_run_config

    m = load_run_config(base, None, sets).model
    assert (m.body, m.hidden_dropout, m.attention_dropout, m.layer_norm_eps) == expect


def test_a_config_file_switching_body_takes_its_defaults(tmp_path):
    from electra.run_config import load_run_config

    path = tmp_path / "c.toml"
    path.write_text('preset = "tiny"\n[model]\nbody = "modernbert"\nlayer_norm_eps = 1e-6\n')
    m = load_run_config(None, str(path)).model
    assert (m.hidden_dropout, m.attention_dropout, m.layer_norm_eps) == (0.0, 0.0, 1e-6)
