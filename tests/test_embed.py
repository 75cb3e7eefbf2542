"""Sentence embeddings and STS-B zero-shot (issue 62's first part, ``electra.commands.embed``):
the embeddings equal transformers' ElectraModel's last states pooled the same way on the
exported folder (within 1e-5, fp32), and STS-B's score equals an independent Spearman of the
same cosines."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import make_run, shared_data

import electra
from electra.errors import UserError

transformers = pytest.importorskip("transformers")

TEXTS = ["the file is opened in binary mode", "a b c", "aaa bbb ccc ddd eee", "x"]


def test_embeddings_equal_transformers_pooled_alike(tmp_path):
    from electra.data.tokenizer import load_tokenizer

    run, _ = make_run(tmp_path, "tiny")
    assert electra.export(run, tmp_path / "hf") == tmp_path / "hf"
    hf = transformers.ElectraForPreTraining.from_pretrained(tmp_path / "hf/discriminator")
    hf.eval()
    tok = load_tokenizer(run / "discriminator")
    encs = [tok.encode(t) for t in TEXTS]
    T = max(len(e.ids) for e in encs)
    ids = torch.zeros(len(encs), T, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for r, e in enumerate(encs):
        ids[r, :len(e.ids)], mask[r, :len(e.ids)] = torch.tensor(e.ids), 1
    with torch.no_grad():
        h = hf.electra(input_ids=ids, attention_mask=mask).last_hidden_state
    m = mask[..., None].float()
    mean = torch.nn.functional.normalize((h * m).sum(1) / m.sum(1), dim=-1).numpy()
    cls = torch.nn.functional.normalize(h[:, 0], dim=-1).numpy()
    for source in (run, tmp_path / "hf/discriminator"):  # ours, and the transformers folder
        got = electra.encode(source, TEXTS, batch_size=3)  # batches of other lengths
        assert got.dtype == np.float32 and got.shape == (4, 128)
        np.testing.assert_allclose(got, mean, atol=1e-5)
        np.testing.assert_allclose(electra.encode(source, TEXTS, pooling="cls"), cls,
                                   atol=1e-5)
    raw = electra.Encoder(run, normalize=False).encode(TEXTS[:1])
    assert abs(float(np.linalg.norm(raw)) - 1) > 1e-3  # not normalised when asked not to be
    with pytest.raises(UserError, match="pooling='max': choose one of mean, cls"):
        electra.encode(run, TEXTS, pooling="max")
    with pytest.raises(UserError, match="a list of texts"):
        electra.encode(run, "one text")


def test_sts_is_the_spearman_of_the_cosines(tmp_path):
    glue = shared_data("glue/STS-B")
    folder = tmp_path / "STS-B"
    folder.mkdir()
    for split in ("train", "dev"):
        rows = (glue / f"{split}.tsv").read_text(encoding="utf-8-sig").splitlines()[:81]
        (folder / f"{split}.tsv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    from electra.data.tokenizer import train_tokenizer

    (tmp_path / "c.txt").write_text("\n".join(r.split("\t")[7] + " " + r.split("\t")[8]
                                              for r in rows[1:]) + "\n")
    tok = train_tokenizer([str(tmp_path / "c.txt")], 300, tmp_path / "tok")
    from electra.model import Discriminator
    from electra.model.bodies import model_preset
    from electra.saved import folders

    torch.manual_seed(0)
    folders.save(Discriminator(model_preset("tiny", vocab_size=tok.get_vocab_size())),
                 "discriminator", tmp_path / "run/discriminator", tok)
    got = electra.sts(tmp_path / "run", folder)
    # The same cosines ranked by hand: Pearson's r of the ranks (ties averaged).
    pairs = [r.split("\t") for r in rows[1:]]
    a = electra.encode(tmp_path / "run", [p[7] for p in pairs])
    b = electra.encode(tmp_path / "run", [p[8] for p in pairs])

    def ranks(x: np.ndarray) -> np.ndarray:
        order = np.argsort(x, kind="stable")
        r = np.empty(len(x))
        r[order] = np.arange(1, len(x) + 1)
        for v in np.unique(x):  # ties: their mean rank
            r[x == v] = r[x == v].mean()
        return r

    gold = np.array([float(p[9]) for p in pairs])
    expected = np.corrcoef(ranks((a * b).sum(1)), ranks(gold))[0, 1]
    assert got["dev"]["spearman"] == pytest.approx(expected, abs=1e-9)
    assert -1 <= got["dev"]["spearman"] <= 1


def test_a_sentence_transformers_export_embeds_as_electra_does(tmp_path):
    """`electra export --sentence-transformers mean` writes a folder
    sentence_transformers.SentenceTransformer loads, whose encode equals electra.encode's
    (within 1e-5, fp32), for a run and for a fine-tuned model's encoder."""
    st = pytest.importorskip("sentence_transformers")
    from electra.cli import main

    run, _ = make_run(tmp_path, "tiny")
    for pooling in ("mean", "cls"):
        out = tmp_path / f"st-{pooling}"
        assert main(["export", str(run), "--out", str(out), "--sentence-transformers",
                     pooling]) == 0
        model = st.SentenceTransformer(str(out), device="cpu")
        theirs = model.encode(TEXTS, convert_to_numpy=True)
        np.testing.assert_allclose(theirs, electra.encode(run, TEXTS, pooling=pooling),
                                   atol=1e-5)
    assert main(["export", str(run), "--out", str(tmp_path / "bad"),
                 "--sentence-transformers", "max"]) == 2
    # A fine-tuned model: its encoder, its head left out.
    from helpers import write_sentiment

    write_sentiment(tmp_path / "train.csv", 32, 0)
    assert main(["finetune", "--model", str(run), "--task", "custom", "--train",
                 str(tmp_path / "train.csv"), "--dev", str(tmp_path / "train.csv"), "--out",
                 str(tmp_path / "ft"), "--quiet", "--set", "epochs=1", "--set",
                 "precision=fp32"]) == 0
    assert main(["export", str(tmp_path / "ft/seed-1"), "--out", str(tmp_path / "st-ft"),
                 "--sentence-transformers", "mean"]) == 0
    theirs = st.SentenceTransformer(str(tmp_path / "st-ft"), device="cpu").encode(TEXTS)
    np.testing.assert_allclose(theirs, electra.encode(tmp_path / "ft/seed-1", TEXTS),
                               atol=1e-5)
