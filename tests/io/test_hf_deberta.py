"""DeBERTa-V3 both ways with transformers (issue 43), random weights in the released layout,
nothing downloaded: every exported class's outputs within 1e-5 of ours in fp32 on padded rows
of mixed lengths, distances past the bucket range included; import -> export bitwise; a
released-layout folder (DebertaV2 weights with microsoft/DeBERTa's RTD head, the generator in
``pytorch_model.generator.bin``, a SentencePiece ``spm.model``) imported and pretrained on."""

from __future__ import annotations

import json

import pytest
import torch
from helpers import cli_error, make_batch, make_run, write_corpus, write_sentiment
from safetensors.torch import load_file

from electra.cli import main
from electra.saved import folders

transformers = pytest.importorskip("transformers")

SHAPE = {"num_layers": 2, "hidden_size": 64, "embedding_size": 64, "num_heads": 4,
         "intermediate_size": 128, "max_position_embeddings": 128, "position_buckets": 16,
         "max_relative_positions": 64, "generator_layers": 1}


def rtd_logits(hidden: torch.Tensor, state: dict[str, torch.Tensor], eps: float) -> torch.Tensor:
    """microsoft/DeBERTa's replaced-token head by hand on transformers' states:
    classifier(GELU(dense(LayerNorm(h + h[CLS]))))."""
    w = {k.removeprefix("mask_predictions."): v for k, v in state.items()
         if k.startswith("mask_predictions.")}
    h = torch.nn.functional.layer_norm(hidden + hidden[:, :1], hidden.shape[-1:],
                                       w["LayerNorm.weight"], w["LayerNorm.bias"], eps)
    h = torch.nn.functional.gelu(h @ w["dense.weight"].T + w["dense.bias"])
    return (h @ w["classifer.weight"].T + w["classifer.bias"]).squeeze(-1)


def test_a_debertav3_run_exports_as_debertav2_and_reads_back_bitwise(tmp_path, capsys):
    """debertav3-xsmall's recipe, shrunk: the discriminator is DebertaV2Model (its states
    and, by DeBERTa's own head formula, its RTD logits equal ours) with the RTD head the only
    weights it leaves aside; the half-depth generator is DebertaV2ForMaskedLM with nothing
    missing or left aside, logits equal. Both import back bitwise, and import -> export
    writes the same tensors."""
    run, model = make_run(tmp_path, "debertav3-xsmall", **SHAPE)
    assert model.generator.config.num_layers == 1
    assert main(["export", str(run), "--out", str(tmp_path / "hf")]) == 0
    assert "no DeBERTa class for replaced-token detection" in capsys.readouterr().err
    disc, info = transformers.DebertaV2Model.from_pretrained(tmp_path / "hf/discriminator",
                                                             output_loading_info=True)
    assert not info["missing_keys"] and not info["mismatched_keys"]
    assert {k.rsplit(".", 1)[0] for k in info["unexpected_keys"]} == {
        "mask_predictions.LayerNorm", "mask_predictions.dense", "mask_predictions.classifer"}
    gen, info = transformers.AutoModelForMaskedLM.from_pretrained(tmp_path / "hf/generator",
                                                                  output_loading_info=True)
    assert type(gen).__name__ == "DebertaV2ForMaskedLM" and not any(info.values()), info
    ids, mask, _ = make_batch([100, 37, 64], 100, vocab_size=model.config.vocab_size)
    real = mask.bool()
    saved = load_file(tmp_path / "hf/discriminator/model.safetensors")
    with torch.no_grad():
        hidden = disc.eval()(input_ids=ids, attention_mask=mask).last_hidden_state
        torch.testing.assert_close(model.discriminator.encoder(ids, mask)[real], hidden[real],
                                   atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(model.discriminator(ids, mask)[real],
                                   rtd_logits(hidden, saved, 1e-7)[real], atol=1e-5,
                                   rtol=1e-5)
        theirs = gen.eval()(input_ids=ids, attention_mask=mask).logits
        torch.testing.assert_close(model.generator(ids, mask)[real], theirs[real], atol=1e-5,
                                   rtol=1e-5)
    assert main(["import", str(tmp_path / "hf/discriminator"), "--generator",
                 str(tmp_path / "hf/generator"), "--out", str(tmp_path / "imp")]) == 0
    for part in ("discriminator", "generator"):
        back, _ = folders.load(tmp_path / "imp", part)
        state = getattr(model, part).state_dict()
        assert back.state_dict().keys() == state.keys()
        assert all(torch.equal(v, state[k]) for k, v in back.state_dict().items())
    assert main(["export", str(tmp_path / "imp"), "--out", str(tmp_path / "hf2")]) == 0
    for part in ("discriminator", "generator"):
        first = load_file(tmp_path / f"hf/{part}/model.safetensors")
        again = load_file(tmp_path / f"hf2/{part}/model.safetensors")
        assert first.keys() == again.keys() and all(torch.equal(first[k], again[k])
                                                    for k in first)


HEADS = [  # (head meta, our part, transformers class, how to read its output)
    ({"task": "custom", "labels": {"neg": 0, "pos": 1, "mid": 2}},
     "DebertaV2ForSequenceClassification", lambda o: o.logits),
    ({"head": "tagging", "task": "tagging", "labels": {"O": 0, "B": 1, "I": 2}},
     "DebertaV2ForTokenClassification", lambda o: o.logits),
    ({"head": "qa", "task": "squad1"}, "DebertaV2ForQuestionAnswering",
     lambda o: torch.stack([o.start_logits, o.end_logits], -1)),
    ({"head": "choice", "task": "copa"}, "DebertaV2ForMultipleChoice", lambda o: o.logits),
]


@pytest.mark.parametrize(("meta", "cls", "read"), HEADS, ids=[h[1] for h in HEADS])
def test_every_finetuned_head_exports_as_its_debertav2_class(tmp_path, meta, cls, read):
    """A fine-tuned DeBERTa-body model of each head exports as its DebertaV2For* class with
    nothing missing or left aside; outputs equal ours within 1e-5 on padded rows (the
    sequence and choice heads' dense layer is DeBERTa's ContextPooler)."""
    run, model = make_run(tmp_path, "debertav3-xsmall", **SHAPE)
    from electra.data.tokenizer import load_tokenizer

    cfg = model.config.replace(hidden_dropout=0.0, attention_dropout=0.0)
    torch.manual_seed(1)
    ours = folders.build("classifier", cfg, meta)
    with torch.no_grad():
        for p in ours.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    folders.write(tmp_path / "ft", ours, "classifier", load_tokenizer(run / "discriminator"),
                  regression=False, **meta)
    assert main(["export", str(tmp_path / "ft"), "--out", str(tmp_path / "hf")]) == 0
    hf, info = getattr(transformers, cls).from_pretrained(tmp_path / "hf",
                                                          output_loading_info=True)
    assert not any(info.values()), info
    ids, mask, _ = make_batch([90, 41, 70], 90, vocab_size=cfg.vocab_size)
    if meta.get("head") == "choice":  # 3 questions x 2 choices
        ids, mask = (t[:, None].repeat(1, 2, 1) for t in (ids, mask))
        ids[:, 1, 5:9] = 7
    with torch.no_grad():
        a = ours.eval()(ids, mask)
        b = read(hf.eval()(input_ids=ids, attention_mask=mask))
    if meta.get("head") in ("tagging", "qa"):  # a row per token: the real ones
        a, b = a[mask.bool()], b[mask.bool()]
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def released_folder(tmp_path, tok_dir, vocab: int, pad: int, generator: bool = True):
    """A folder laid out as microsoft/deberta-v3-*'s on the hub, random weights: config.json
    (no architectures), pytorch_model.bin (DebertaV2Model's weights under ``deberta.``, the
    RTD head ``mask_predictions.*``, an MLM head ``lm_predictions.*``), the generator's in
    pytorch_model.generator.bin (half depth), spm.model and tokenizer_config.json."""
    cfg = transformers.DebertaV2Config(
        vocab_size=vocab, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=128, max_position_embeddings=128, type_vocab_size=0,
        relative_attention=True, position_biased_input=False, layer_norm_eps=1e-7,
        position_buckets=16, max_relative_positions=64, pos_att_type="p2c|c2p",
        share_att_key=True, norm_rel_ebd="layer_norm", pad_token_id=pad, legacy=False)
    folder = tmp_path / "deberta-v3-released"
    folder.mkdir()
    torch.manual_seed(3)
    mlm = transformers.DebertaV2ForMaskedLM(cfg).eval()
    with torch.no_grad():
        for p in mlm.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    state = dict(mlm.state_dict())
    H = 64
    for name, shape in (("dense.weight", (H, H)), ("dense.bias", (H,)),
                        ("LayerNorm.weight", (H,)), ("LayerNorm.bias", (H,)),
                        ("classifer.weight", (1, H)), ("classifer.bias", (1,))):
        state[f"mask_predictions.{name}"] = torch.randn(shape) * 0.1 + (
            1.0 if name == "LayerNorm.weight" else 0.0)
    torch.save(state, folder / "pytorch_model.bin")
    if generator:
        cfg.num_hidden_layers = 1
        gen = transformers.DebertaV2ForMaskedLM(cfg)
        torch.save(gen.state_dict(), folder / "pytorch_model.generator.bin")
        cfg.num_hidden_layers = 2
    config = cfg.to_dict()
    config.pop("architectures", None)
    (folder / "config.json").write_text(json.dumps(config))
    for name in ("spm.model", "tokenizer_config.json"):
        (folder / name).write_bytes((tok_dir / name).read_bytes())
    return folder, mlm, state


@pytest.fixture(scope="module")
def spm_dir(tmp_path_factory):
    """A 64-piece SentencePiece model with DeBERTa-V3's specials, and its tokenizer config."""
    spm = pytest.importorskip("sentencepiece")
    pytest.importorskip("google.protobuf")
    root = tmp_path_factory.mktemp("spm")
    write_corpus(root / "c.txt", n_docs=80)
    spm.SentencePieceTrainer.train(
        input=str(root / "c.txt"), model_prefix=str(root / "spm"), vocab_size=64,
        model_type="unigram", pad_id=0, bos_id=1, eos_id=2, unk_id=3, bos_piece="[CLS]",
        eos_piece="[SEP]", pad_piece="[PAD]", unk_piece="[UNK]", character_coverage=1.0,
        minloglevel=2)
    (root / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "DebertaV2Tokenizer", "do_lower_case": False}))
    return root


def test_a_released_v3_folder_imports_and_continues_pretraining_with_rtd(
        tmp_path, spm_dir, capsys):
    """`import` reads the released layout: the discriminator's states equal transformers',
    `finetune --model` takes the folder as it is,
    its RTD head is the folder's ``mask_predictions`` (logits by DeBERTa's formula), the
    generator comes from pytorch_model.generator.bin at its own depth, the tokenizer from
    spm.model. `pretrain --init` continues from the folder itself with RTD and GDES on data
    prepared with that tokenizer; without the generator file a fresh half-depth one is built.
    A convolution layer, which V3 has not, is refused."""
    from electra.data.tokenizer import SpecialTokens, load_tokenizer

    tok = load_tokenizer(spm_dir / "spm.model")
    vocab, pad = tok.get_vocab_size(), SpecialTokens.of(tok).pad
    folder, mlm, state = released_folder(tmp_path, spm_dir, vocab, pad)
    capsys.readouterr()
    assert main(["import", str(folder), "--out", str(tmp_path / "imp")]) == 0
    assert (f"import {folder}: loaded the discriminator (deberta body 2 x 64, with its "
            f"replaced-token head) and the generator (1 x 64, from pytorch_model.generator.bin"
            f"); nothing built fresh") in capsys.readouterr().out
    disc, _ = folders.load(tmp_path / "imp", "discriminator")
    gen, _ = folders.load(tmp_path / "imp", "generator")
    assert (disc.config.num_layers, gen.config.num_layers) == (2, 1)
    ids, mask, _ = make_batch([100, 45], 100, vocab_size=vocab)
    real = mask.bool()
    with torch.no_grad():
        hidden = mlm.deberta(input_ids=ids, attention_mask=mask).last_hidden_state
        torch.testing.assert_close(disc.eval().encoder(ids, mask)[real], hidden[real],
                                   atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(disc(ids, mask)[real], rtd_logits(hidden, state, 1e-7)[
            real], atol=1e-5, rtol=1e-5)
    assert load_tokenizer(tmp_path / "imp/discriminator").encode("aaa bb").ids == tok.encode(
        "aaa bb").ids
    write_sentiment(tmp_path / "train.csv", 40, 0)  # the folder fine-tunes as it is
    assert main(["finetune", "--model", str(folder), "--task", "custom", "--train",
                 str(tmp_path / "train.csv"), "--dev", str(tmp_path / "train.csv"), "--out",
                 str(tmp_path / "ft"), "--quiet", "--set", "epochs=1", "--set",
                 "precision=fp32"]) == 0
    assert json.loads((tmp_path / "ft/seed-1/config.json").read_text())["model"][
        "body"] == "deberta"
    write_corpus(tmp_path / "c.txt")
    assert main(["prepare", "--input", str(tmp_path / "c.txt"), "--tokenizer",
                 str(folder / "spm.model"), "--seq-len", "32", "--out",
                 str(tmp_path / "data")]) == 0
    train = ["--data", str(tmp_path / "data"), "--quiet", "--set", "train.max_steps=2",
             "--set", "train.batch_size=4", "--set", "train.precision=fp32"]
    assert main(["pretrain", "--preset", "debertav3-xsmall", "--init", str(folder), "--out",
                 str(tmp_path / "more"), *train]) == 0
    more, _ = folders.load(tmp_path / "more", "generator")
    assert more.config.num_layers == 1 and more.config.hidden_size == 64
    (folder / "pytorch_model.generator.bin").unlink()
    assert main(["pretrain", "--preset", "debertav3-xsmall", "--init", str(folder), "--out",
                 str(tmp_path / "fresh"), *train]) == 0
    fresh, _ = folders.load(tmp_path / "fresh", "generator")
    # the preset's 6 blocks are deeper than the folder's 2: V3's half depth instead
    assert (fresh.config.num_layers, fresh.config.hidden_size) == (1, 64)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "conv_kernel_size": 3}))
    assert "conv_kernel_size=3; electra's DeBERTa body is DeBERTa-V3's" in cli_error(
        capsys, "import", folder, "--out", tmp_path / "imp2")
    (folder / "config.json").write_text(json.dumps({**config, "position_biased_input": True,
                                                    "type_vocab_size": 2}))
    assert "position_biased_input=True, type_vocab_size=2;" in cli_error(
        capsys, "import", folder, "--out", tmp_path / "imp2")
    (folder / "config.json").write_text(json.dumps({**config, "model_type": "roberta"}))
    assert ("model_type is 'roberta', not one electra reads ('electra', 'modernbert', "
            "'deberta-v2')") in cli_error(capsys, "import", folder, "--out", tmp_path / "imp2")
    assert not (tmp_path / "imp2").exists()


def test_starting_from_a_plain_pair_under_gdes_keeps_the_discriminators_table():
    """`pretrain --init` into a GDES model: the generator's weights as they are, and E_Δ the
    discriminator's table less the generator's, so the discriminator reads its own table."""
    from electra.model import Discriminator, Generator
    from electra.model.bodies import model_preset
    from electra.objectives.config import ObjectiveConfig
    from electra.objectives.pretraining import ElectraPretrainingModel

    cfg = model_preset("debertav3-xsmall", vocab_size=90, **SHAPE)
    torch.manual_seed(0)
    disc, gen = Discriminator(cfg), Generator(cfg.generator_config())
    model = ElectraPretrainingModel(cfg, ObjectiveConfig(sharing="gdes"))
    model.start_from(disc, gen)
    assert all(torch.equal(v, gen.state_dict()[k])
               for k, v in model.generator.state_dict().items())
    torch.testing.assert_close(model.discriminator.encoder.embeddings.word_table(),
                               disc.encoder.embeddings.word_embeddings.weight, rtol=0,
                               atol=1e-6)
    plain = model.parts()["discriminator"].state_dict()
    assert all(torch.equal(v, plain[k]) for k, v in disc.state_dict().items()
               if "word_embeddings" not in k)
