"""Export to and import from transformers' ELECTRA folders (random weights, no download)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import torch
from helpers import cli_error, make_batch, make_run, write_corpus
from safetensors.torch import load_file

from electra.cli import main
from electra.data.tokenizer import SpecialTokens, load_tokenizer, train_tokenizer
from electra.model.bodies import model_preset
from electra.saved import folders

transformers = pytest.importorskip("transformers")


@pytest.mark.parametrize("preset", ["tiny", "small"])
def test_export_loads_in_transformers_with_equal_logits(tmp_path, preset):
    run, model = make_run(tmp_path, preset)
    assert main(["export", str(run), "--out", str(tmp_path / "hf")]) == 0
    disc, info = transformers.AutoModelForPreTraining.from_pretrained(
        tmp_path / "hf/discriminator", output_loading_info=True)
    assert not any(info.values()), info
    gen, info = transformers.AutoModelForMaskedLM.from_pretrained(
        tmp_path / "hf/generator", output_loading_info=True)
    assert not any(info.values()), info
    import json

    tok_cfg = json.loads((tmp_path / "hf/discriminator/tokenizer_config.json").read_text())
    assert tok_cfg["do_lower_case"] is True  # the test tokenizer is uncased
    tok = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf/discriminator")
    assert tok("aaa bb")["input_ids"] == load_pretrained_tokenizer_ids(run, "aaa bb")
    ids, mask, types = make_batch([40, 17, 64], 64, vocab_size=model.config.vocab_size)
    types[:, 30:] = 1
    real = mask.bool()
    with torch.no_grad():
        ours = model.discriminator(ids, mask, types)
        theirs = disc.eval()(input_ids=ids, attention_mask=mask, token_type_ids=types).logits
        torch.testing.assert_close(ours[real], theirs[real], atol=1e-5, rtol=1e-5)
        positions = torch.tensor([[1, 5, 9], [2, 3, 15], [60, 7, 30]])
        ours_g = model.generator(ids, mask, types, positions)
        theirs_g = gen.eval()(input_ids=ids, attention_mask=mask, token_type_ids=types).logits
        V = model.config.vocab_size
        torch.testing.assert_close(
            ours_g, torch.gather(theirs_g, 1, positions[..., None].expand(-1, -1, V)),
            atol=1e-5, rtol=1e-5)


def load_pretrained_tokenizer_ids(run: Path, text: str) -> list[int]:
    from electra.data.tokenizer import load_tokenizer

    return load_tokenizer(run / "discriminator").encode(text).ids


def test_export_then_import_is_bitwise(tmp_path, capsys):
    run, _ = make_run(tmp_path, "tiny")
    main(["export", str(run), "--out", str(tmp_path / "hf")])
    capsys.readouterr()
    assert main(["import", str(tmp_path / "hf/discriminator"), "--generator",
                 str(tmp_path / "hf/generator"), "--out", str(tmp_path / "back")]) == 0
    assert (f"import {tmp_path / 'hf/discriminator'}: loaded the discriminator (bert body 4 x "
            f"128, with its replaced-token head) and the generator (4 x 32, from "
            f"{tmp_path / 'hf/generator'}); nothing built fresh") in capsys.readouterr().out
    for kind in ("discriminator", "generator"):
        a = load_file(run / kind / "model.safetensors")
        b = load_file(tmp_path / "back" / kind / "model.safetensors")
        assert a.keys() == b.keys()
        assert all(torch.equal(a[k], b[k]) for k in a), kind


def test_import_a_transformers_model_and_a_fresh_generator(tmp_path):
    from electra.model.bodies.bert.hf import to_config as to_hf_config

    cfg = model_preset("tiny", vocab_size=120)
    torch.manual_seed(1)
    hf = transformers.ElectraForPreTraining(to_hf_config(cfg)).eval()
    hf.save_pretrained(tmp_path / "hfd")
    run, _ = make_run(tmp_path, "tiny")  # only for a vocab.txt of 120 tokens
    (tmp_path / "hfd/vocab.txt").write_text((run / "discriminator/vocab.txt").read_text())
    assert main(["import", str(tmp_path / "hfd"), "--out", str(tmp_path / "ours")]) == 0
    disc = folders.load(tmp_path / "ours", "discriminator")[0].eval()
    gen = folders.load(tmp_path / "ours", "generator")[0]
    assert gen.config.hidden_size == cfg.hidden_size // 4
    assert torch.equal(gen.encoder.embeddings.word_embeddings.weight,
                       disc.encoder.embeddings.word_embeddings.weight)
    ids, mask, types = make_batch([30, 12], 32, vocab_size=120)
    with torch.no_grad():
        torch.testing.assert_close(disc(ids, mask, types)[mask.bool()], hf(
            input_ids=ids, attention_mask=mask, token_type_ids=types).logits[mask.bool()],
            atol=1e-5, rtol=1e-5)


def test_bad_input(tmp_path, capsys):
    def err(*args) -> str:
        return cli_error(capsys, *args)

    run, _ = make_run(tmp_path, "tiny")
    assert "neither a pretraining run" in err("export", tmp_path / "tok", "--out",
                                               tmp_path / "x")
    main(["export", str(run), "--out", str(tmp_path / "hf")])
    assert "--overwrite" in err("export", run, "--out", tmp_path / "hf")
    assert "no config.json" in err("import", tmp_path / "tok", "--out", tmp_path / "y")
    # A generator whose vocabulary differs from the discriminator's.
    from electra.model.bodies.bert.hf import to_config as to_hf_config

    g = transformers.ElectraForMaskedLM(to_hf_config(model_preset("tiny", vocab_size=99)
                                                     .generator_config()))
    g.save_pretrained(tmp_path / "g99")
    capsys.readouterr()  # transformers writes a progress bar
    assert "must match" in err("import", tmp_path / "hf/discriminator", "--generator",
                               tmp_path / "g99", "--out", tmp_path / "z")
    assert "not an ELECTRA discriminator" in err("import", tmp_path / "g99", "--out",
                                                 tmp_path / "w")


def test_export_from_a_checkpoint_folder(tmp_path):
    from electra.io.checkpoint import save_checkpoint

    run, model = make_run(tmp_path, "tiny")
    (run / "tokenizer.json").write_text((run / "discriminator/tokenizer.json").read_text())
    ck = save_checkpoint(run / "checkpoints", 3, model, {"step": 3},
                         {"model": model.config.to_dict()}, keep=1)
    assert main(["export", str(ck), "--out", str(tmp_path / "hf")]) == 0
    disc = transformers.AutoModelForPreTraining.from_pretrained(tmp_path / "hf/discriminator")
    ids, mask, types = make_batch([20, 32], 32, vocab_size=model.config.vocab_size)
    with torch.no_grad():
        torch.testing.assert_close(
            model.discriminator(ids, mask, types)[mask.bool()],
            disc.eval()(input_ids=ids, attention_mask=mask, token_type_ids=types
                        ).logits[mask.bool()], atol=1e-5, rtol=1e-5)


def test_pretrain_init_starts_from_imported_weights(tmp_path):
    from electra.data.prepare import PrepareOptions, prepare

    run, _ = make_run(tmp_path, "tiny")
    main(["export", str(run), "--out", str(tmp_path / "hf")])
    main(["import", str(tmp_path / "hf/discriminator"), "--out", str(tmp_path / "imp")])
    prepare(PrepareOptions(inputs=[str(tmp_path / "c.txt")], tokenizer=str(
        tmp_path / "imp/discriminator"), out=str(tmp_path / "data"), seq_len=32, quiet=True))
    # One step at learning rate 0 (the first warmup step) leaves the weights as imported.
    assert main(["pretrain", "--preset", "tiny", "--init", str(tmp_path / "imp"), "--data",
                 str(tmp_path / "data"), "--out", str(tmp_path / "cont"), "--quiet",
                 "--set", "max_steps=1", "--set", "warmup_steps=10", "--set",
                 "batch_size=4", "--set", "precision=fp32"]) == 0
    for kind in ("discriminator", "generator"):
        a = load_file(tmp_path / "imp" / kind / "model.safetensors")
        b = load_file(tmp_path / "cont" / kind / "model.safetensors")
        assert all(torch.equal(a[k], b[k]) for k in a), kind
    # A preset's shape is replaced by the imported model's (tiny here, whatever the preset).
    assert folders.load(tmp_path / "cont")[0].config.hidden_size == 128


def test_init_refuses_a_generator_that_is_not_a_width_multiple(tmp_path, capsys):
    run, _ = make_run(tmp_path, "tiny")
    gen = folders.load(run, "generator")[0]
    from electra.model import Generator

    odd = Generator(gen.config.replace(intermediate_size=100))
    folders.save(odd, "generator", run / "generator", load_tokenizer(run / "discriminator"))
    from electra.data.prepare import PrepareOptions, prepare

    prepare(PrepareOptions(inputs=[str(tmp_path / "c.txt")], tokenizer=str(
        run / "discriminator"), out=str(tmp_path / "data"), seq_len=32, quiet=True))
    assert main(["pretrain", "--preset", "tiny", "--init", str(run), "--data",
                 str(tmp_path / "data"), "--out", str(tmp_path / "c"), "--quiet"]) == 2
    assert "not a width multiple" in capsys.readouterr().err


@pytest.mark.parametrize("regression", [False, True])
def test_finetuned_classifier_exports_with_equal_predictions(tmp_path, regression):
    from electra.commands.finetune import load_classifier, save_classifier
    from electra.config import FinetuneConfig
    from electra.tasks.base import TaskData
    from electra.tasks.sequence.head import SequenceClassifier

    run, _ = make_run(tmp_path, "tiny")
    tok = load_tokenizer(run / "discriminator")
    labels = {} if regression else {"neg": 0, "neutral": 1, "pos": 2}
    torch.manual_seed(2)
    model = SequenceClassifier(model_preset("tiny", vocab_size=120), 1 if regression else 3)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.02)
    data = TaskData("custom", [], {}, ("accuracy",), regression, labels)
    save_classifier(model, tmp_path / "ft/seed-1", data, FinetuneConfig(), tok)
    assert main(["export", str(tmp_path / "ft/seed-1"), "--out", str(tmp_path / "hfc")]) == 0
    hf, info = transformers.AutoModelForSequenceClassification.from_pretrained(
        tmp_path / "hfc", output_loading_info=True)
    assert not any(info.values()), info
    assert type(hf).__name__ == "ElectraForSequenceClassification"
    if regression:
        assert hf.config.num_labels == 1 and hf.config.problem_type == "regression"
    else:
        assert hf.config.id2label == {0: "neg", 1: "neutral", 2: "pos"}
        assert hf.config.label2id == labels
    ours, _ = load_classifier(tmp_path / "ft/seed-1")
    ids, mask, types = make_batch([40, 17, 64], 64, vocab_size=120)
    types[:, 30:] = 1
    with torch.no_grad():
        a = ours.eval()(ids, mask, types)
        b = hf.eval()(input_ids=ids, attention_mask=mask, token_type_ids=types).logits
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    if not regression:
        assert torch.equal(a.argmax(-1), b.argmax(-1))
    tok = transformers.AutoTokenizer.from_pretrained(tmp_path / "hfc")
    assert tok("aaa bb")["input_ids"] == load_pretrained_tokenizer_ids(run, "aaa bb")


def test_export_without_transformers_says_how_to_install(tmp_path, capsys, monkeypatch):
    run, _ = make_run(tmp_path, "tiny")
    monkeypatch.setitem(__import__("sys").modules, "transformers", None)  # import fails
    assert "pip install 'electra[hf]'" in cli_error(capsys, "export", run, "--out",
                                                    tmp_path / "hf")
    assert not (tmp_path / "hf").exists()


def test_a_modernbert_run_exports_its_discriminator_and_reads_it_back(tmp_path, capsys):
    """modernbert-small (its generator 64 wide on the shared 256-wide embeddings): the
    discriminator exports as ModernBertModel, whose states equal ours within 1e-5 in fp32 on
    padded rows longer than the window, its RTD head beside it (the only weights
    transformers leaves aside); the generator's projection has no place in
    ModernBertForMaskedLM, so it is left out with a note. `detect` reads the export, and
    `import` brings back the discriminator bitwise."""
    run, model = make_run(tmp_path, "modernbert-small", local_attention=32)
    disc, _ = folders.load(run, "discriminator")
    assert disc.config.body == "modernbert"
    assert main(["export", str(run), "--out", str(tmp_path / "hf")]) == 0
    err = capsys.readouterr().err
    assert "generator/ not exported: its embeddings (256 wide) feed its 64-wide" in err
    assert "no ModernBERT class for replaced-token detection" in err
    assert not (tmp_path / "hf/generator").exists()
    hf, info = transformers.ModernBertModel.from_pretrained(tmp_path / "hf/discriminator",
                                                             output_loading_info=True)
    assert not info["missing_keys"] and not info["mismatched_keys"]
    assert {k.rsplit(".", 1)[0] for k in info["unexpected_keys"]} == {
        "discriminator_predictions.dense", "discriminator_predictions.dense_prediction"}
    ids, mask, _ = make_batch([100, 37, 64], 100, vocab_size=model.config.vocab_size)
    real = mask.bool()
    with torch.no_grad():
        ours = model.discriminator.eval().encoder(ids, mask)
        theirs = hf.eval()(input_ids=ids, attention_mask=mask).last_hidden_state
    torch.testing.assert_close(ours[real], theirs[real], atol=1e-5, rtol=1e-5)
    assert main(["detect", "--model", str(tmp_path / "hf/discriminator"), "aaa bb"]) == 0
    assert main(["import", str(tmp_path / "hf/discriminator"), "--out",
                 str(tmp_path / "imp")]) == 0
    back, _ = folders.load(tmp_path / "imp", "discriminator")
    state = model.discriminator.state_dict()
    assert all(torch.equal(v, state[k]) for k, v in back.state_dict().items())
    # import -> export: the same file's tensors, bit for bit
    assert main(["export", str(tmp_path / "imp"), "--out", str(tmp_path / "hf2")]) == 0
    first = load_file(tmp_path / "hf/discriminator/model.safetensors")
    again = load_file(tmp_path / "hf2/discriminator/model.safetensors")
    assert first.keys() == again.keys() and all(torch.equal(first[k], again[k])
                                                for k in first)


def test_a_modernbert_generator_of_the_blocks_width_exports_as_modernbert_for_masked_lm(
        tmp_path, capsys):
    """A full-width generator (generator_size 1: embeddings as wide as its blocks) is a
    ModernBertForMaskedLM: logits within 1e-5 of ours, nothing missing or left aside."""
    run, model = make_run(tmp_path, "modernbert-small", num_layers=4, generator_size=1.0,
                          local_attention=16)
    assert main(["export", str(run), "--out", str(tmp_path / "hf")]) == 0
    hf, info = transformers.ModernBertForMaskedLM.from_pretrained(
        tmp_path / "hf/generator", output_loading_info=True)
    assert not any(info.values()), info
    ids, mask, _ = make_batch([60, 21], 60, vocab_size=model.config.vocab_size)
    real = mask.bool()
    with torch.no_grad():
        ours = model.generator.eval()(ids, mask)
        theirs = hf.eval()(input_ids=ids, attention_mask=mask).logits
    torch.testing.assert_close(ours[real], theirs[real], atol=1e-5, rtol=1e-5)
    assert main(["import", str(tmp_path / "hf/discriminator"), "--generator",
                 str(tmp_path / "hf/generator"), "--out", str(tmp_path / "imp")]) == 0
    back, _ = folders.load(tmp_path / "imp", "generator")
    state = model.generator.state_dict()
    assert all(torch.equal(v, state[k]) for k, v in back.state_dict().items())


def tiny_modernbert(tmp_path: Path, **extra) -> tuple[Any, Any]:
    """A byte-level BPE tokenizer of a letters corpus (``tmp_path/c.txt``), as ModernBERT's,
    and a small ModernBertConfig over it (3 x 64, windows of 16)."""
    write_corpus(tmp_path / "c.txt")
    tok = train_tokenizer([str(tmp_path / "c.txt")], 120, tmp_path / "bpe", model="bpe")
    s = SpecialTokens.of(tok)
    return tok, transformers.ModernBertConfig(
        vocab_size=tok.get_vocab_size(), hidden_size=64, intermediate_size=96,
        num_hidden_layers=3, num_attention_heads=2, local_attention=16, pad_token_id=s.pad,
        cls_token_id=s.cls, sep_token_id=s.sep, bos_token_id=s.cls, eos_token_id=s.sep,
        **extra)


def test_any_modernbert_class_imports_to_continue_pretraining_with_rtd(tmp_path, capsys):
    """A transformers ModernBertForSequenceClassification folder (random weights) with a
    byte-level BPE tokenizer.json beside it, as ModernBERT's: `import` takes its encoder
    (states equal transformers' within 1e-5) with a fresh RTD head and generator, and
    `pretrain --init` continues from the folder itself with RTD, building the generator.
    A ModernBERT with biases, which the body has not, is refused."""
    tok, cfg = tiny_modernbert(tmp_path, num_labels=3)
    torch.manual_seed(0)
    hf = transformers.ModernBertForSequenceClassification(cfg).eval()
    hf.save_pretrained(tmp_path / "mb")
    (tmp_path / "mb/tokenizer.json").write_text(tok.to_str())
    os.mkfifo(tmp_path / "mb/README.md")  # a named pipe where the card goes: never read
    capsys.readouterr()
    assert main(["import", str(tmp_path / "mb"), "--out", str(tmp_path / "imp")]) == 0
    assert (f"import {tmp_path / 'mb'}: loaded the discriminator (modernbert body 3 x 64, its "
            f"encoder); built fresh: its replaced-token head and the generator (3 x 16, "
            f"sharing the discriminator's embeddings)") in capsys.readouterr().out
    disc, _ = folders.load(tmp_path / "imp", "discriminator")
    ids, mask, _ = make_batch([50, 33], 50, vocab_size=tok.get_vocab_size())
    real = mask.bool()
    with torch.no_grad():
        ours = disc.eval().encoder(ids, mask)
        theirs = hf.model(input_ids=ids, attention_mask=mask).last_hidden_state
    torch.testing.assert_close(ours[real], theirs[real], atol=1e-5, rtol=1e-5)
    assert main(["prepare", "--input", str(tmp_path / "c.txt"), "--tokenizer",
                 str(tmp_path / "mb/tokenizer.json"), "--seq-len", "32", "--out",
                 str(tmp_path / "data")]) == 0
    assert main(["pretrain", "--preset", "tiny", "--set", "model.body=modernbert", "--init",
                 str(tmp_path / "mb"), "--data", str(tmp_path / "data"), "--out",
                 str(tmp_path / "more"), "--quiet", "--set", "train.max_steps=2",
                 "--set", "train.batch_size=4", "--set", "train.precision=fp32"]) == 0
    more, _ = folders.load(tmp_path / "more", "discriminator")
    gen, _ = folders.load(tmp_path / "more", "generator")
    assert more.config.body == gen.config.body == "modernbert"
    assert gen.config.hidden_size == 16  # built at the run's generator_size (a quarter)
    config = json.loads((tmp_path / "mb/config.json").read_text())
    (tmp_path / "mb/config.json").write_text(json.dumps({**config, "mlp_bias": True}))
    assert "mlp_bias=True; electra's ModernBERT body has no biases" in cli_error(
        capsys, "import", tmp_path / "mb", "--out", tmp_path / "imp2")
    assert not (tmp_path / "imp2").exists()
