"""The body seam: every registered body's recipes build, its transformers export reads back
bitwise, its ``model_type`` is found on import; and a fourth body (tests/toy_body/, one
folder) joins with one registry line: --preset lists its recipe, a run pretrains it, export
and import carry it."""

from __future__ import annotations

import json

import pytest
import torch
from helpers import tiny_config

from electra.model import Discriminator, Generator, count_parameters
from electra.model.bodies import BODIES, model_types, preset_names, recipe, register, remove
from electra.run_config import run_preset
from electra.saved.hf_format import export_of, read_hf_folder


@pytest.mark.parametrize("name", preset_names())
def test_each_recipe_builds_its_models(name):
    """On the meta device (no memory): the recipe's run settings hold together and its body
    builds the discriminator and the generator it names."""
    run, made = run_preset(name), recipe(name)
    body = BODIES[run.model.body]  # the body's own, or a file in its published/ folder
    assert name in body.recipes or (made.file is not None and body.folder in made.file.parents)
    with torch.device("meta"):
        disc, gen = Discriminator(run.model), Generator(run.model.generator_config())
    assert count_parameters(disc) > count_parameters(gen) > 0 or run.model.generator_size == 1


def _small(body: str):
    extra = {"deberta": dict(generator_size=1.0, generator_layers=1, position_buckets=8,
                             max_relative_positions=32),
             "modernbert": dict(local_attention=8, global_every=2, generator_size=1.0)
             }.get(body, {})
    return tiny_config(body=body, embedding_size=32, **BODIES[body].defaults | {
        "hidden_dropout": 0.0, "attention_dropout": 0.0}, **extra)


def _write(folder, cfg, state, part):
    from safetensors.torch import save_file

    fmt = export_of(cfg)
    folder.mkdir(parents=True)
    hf_cfg = fmt.config(cfg)
    hf_cfg.architectures = [fmt.cls(part)]
    hf_cfg.save_pretrained(folder)
    save_file({k: v.contiguous().clone() for k, v in fmt.state(state, part).items()},
              str(folder / "model.safetensors"))


@pytest.mark.parametrize("body", [b for b in BODIES if BODIES[b].adapter is not None])
def test_each_export_reads_back_bitwise_by_its_model_type(body, tmp_path):
    """Each part exported by the body's adapter, read back by ``read_hf_folder`` (which finds
    the body by config.json's model_type): the same weights, bitwise, and the same body."""
    cfg = _small(body)
    torch.manual_seed(0)
    for part, model in (("discriminator", Discriminator(cfg)),
                        ("generator", Generator(cfg.generator_config()))):
        state = model.state_dict()
        _write(tmp_path / part, model.config, state, part)
        hf = json.loads((tmp_path / part / "config.json").read_text())
        assert model_types()[hf["model_type"]] is BODIES[body]
        read = read_hf_folder(tmp_path / part, part)
        assert read.config.body == body and not read.head_fresh
        assert read.state.keys() == state.keys()
        for k, v in state.items():
            assert torch.equal(read.state[k], v), (part, k)


@pytest.fixture
def toy_body():
    import toy_body

    register(toy_body.BODY)  # the one line a plug-in adds
    yield toy_body.BODY
    remove("toy")


def test_a_fourth_body_is_one_folder_and_one_registry_line(toy_body, letters_data, tmp_path,
                                                           capsys):
    """tests/toy_body/: --preset lists its recipe, its own check refuses its own setting, its
    own setting (model.mlp_gate, declared in its folder) is checked, trained with and kept,
    `pretrain` trains it (its loss falls), `export` writes its transformers folders and
    `import` reads them back into a run with the same weights."""
    from electra.cli import main
    from electra.saved.models import open_model

    assert "toy-tiny" in preset_names() and recipe("toy-tiny").model.body == "toy"
    run = tmp_path / "run"
    argv = ["pretrain", "--preset", "toy-tiny", "--data", str(letters_data), "--out", str(run),
            "--set", "train.log_every=5", "--set", "train.precision=fp32"]
    assert main([*argv[:-2], "--set", "model.intermediate_size=63"]) == 2
    assert "SwiGLU needs an even width" in capsys.readouterr().err
    assert main([*argv, "--set", "model.mlp_gate=relu"]) == 2  # its own setting's range
    assert "model.mlp_gate must be one of silu, gelu, got 'relu'" in capsys.readouterr().err
    argv += ["--set", "model.mlp_gate=gelu"]  # its own setting (config.py knows nothing of it)
    assert main(argv) == 0
    assert json.loads((run / "config.json").read_text())["model"]["mlp_gate"] == "gelu"
    assert "position_buckets" not in json.loads((run / "config.json").read_text())["model"]
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    losses = [x["loss"] for x in lines if "loss" in x]
    assert losses[-1] < losses[0]
    assert main(["export", str(run), "--out", str(tmp_path / "hf")]) == 0
    hf = json.loads((tmp_path / "hf/discriminator/config.json").read_text())
    assert hf["model_type"] == "toy-neo" and hf["architectures"] == ["ToyDiscriminator"]
    assert main(["import", str(tmp_path / "hf/discriminator"), "--generator",
                 str(tmp_path / "hf/generator"), "--out", str(tmp_path / "back")]) == 0
    before, after = open_model(run), open_model(tmp_path / "back")
    assert after["discriminator"].config.mlp_gate == "gelu"  # through transformers' config
    for part in ("discriminator", "generator"):
        a, b = before[part].state_dict(), after[part].state_dict()
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), part
