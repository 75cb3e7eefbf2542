"""SentencePiece tokenizers (DeBERTa-V3's ``spm.model``, issue 43): read through sentencepiece
and transformers' conversion, they give sentencepiece's own ids inside [CLS] ... [SEP], the
five roles DeBERTa's folders name, and data prepared with them pretrains."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import cli_error, write_corpus

from electra.cli import main
from electra.data.tokenizer import load_tokenizer

spm = pytest.importorskip("sentencepiece")
pytest.importorskip("transformers")

TEXTS = ["the default file mode is 'r', meaning read mode.", "Hello  World — naïve café",
         "a", "x" * 40]


@pytest.fixture(scope="module")
def deberta_spm(tmp_path_factory) -> Path:
    """A unigram model laid out as DeBERTa-V3's: [PAD] 0, [CLS] 1, [SEP] 2, [UNK] 3."""
    root = tmp_path_factory.mktemp("spm")
    write_corpus(root / "c.txt", n_docs=80)
    with open(root / "c.txt", "a", encoding="utf-8") as f:
        f.write("Hello World naïve café — the default file mode\n")
    spm.SentencePieceTrainer.train(
        input=str(root / "c.txt"), model_prefix=str(root / "spm"), vocab_size=80,
        model_type="unigram", pad_id=0, pad_piece="[PAD]", bos_id=1, bos_piece="[CLS]",
        eos_id=2, eos_piece="[SEP]", unk_id=3, unk_piece="[UNK]", character_coverage=1.0,
        minloglevel=2)
    return root / "spm.model"


def test_an_spm_model_encodes_as_sentencepiece_does(deberta_spm, tmp_path):
    sp = spm.SentencePieceProcessor(model_file=str(deberta_spm))
    folder = tmp_path / "released"  # a released folder: spm.model beside its config
    folder.mkdir()
    (folder / "spm.model").write_bytes(deberta_spm.read_bytes())
    for source in (deberta_spm, folder):
        tok = load_tokenizer(source)
        for text in TEXTS:
            assert tok.encode(text).ids == [1, *sp.encode(text), 2], (source, text)
        pair = tok.encode("a b", "c")
        assert pair.ids == [1, *sp.encode("a b"), 2, *sp.encode("c"), 2]
        assert pair.type_ids == [0] * (len(sp.encode("a b")) + 2) + [1] * (
            len(sp.encode("c")) + 1)
        roles = {r: tok.token_to_id(n) for r, n in tok.electra_roles.items()}
        assert roles == {"pad": 0, "cls": 1, "sep": 2, "unk": 3, "mask": len(sp)}


def test_prepared_with_an_spm_model_the_data_pretrains(deberta_spm, tmp_path):
    assert main(["prepare", "--input", str(deberta_spm.parent / "c.txt"), "--tokenizer",
                 str(deberta_spm), "--seq-len", "32", "--out", str(tmp_path / "data")]) == 0
    assert main(["pretrain", "--preset", "tiny", "--data", str(tmp_path / "data"), "--out",
                 str(tmp_path / "run"), "--quiet", "--set", "train.max_steps=2", "--set",
                 "train.batch_size=4"]) == 0
    again = load_tokenizer(tmp_path / "run/discriminator")  # its tokenizer.json now
    assert again.encode(TEXTS[0]).ids == load_tokenizer(deberta_spm).encode(TEXTS[0]).ids


def test_a_file_that_is_no_spm_model_or_a_missing_library_is_one_line(tmp_path, capsys,
                                                                      monkeypatch):
    (tmp_path / "spm.model").write_bytes(b"not a model")
    (tmp_path / "c.txt").write_text("some text\n")
    args = ("prepare", "--input", tmp_path / "c.txt", "--tokenizer", tmp_path / "spm.model",
            "--out", tmp_path / "data")
    assert "not a SentencePiece model" in cli_error(capsys, *args)
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "sentencepiece" else real(name, *a))
    assert "needs sentencepiece; pip install 'electra[spm]'" in cli_error(capsys, *args)
    assert not (tmp_path / "data").exists()
