"""Sentence embeddings and STS-B zero-shot (issue 62's first part, ``electra.evaluation``):
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


def _batch(run) -> tuple[torch.Tensor, torch.Tensor]:
    """TEXTS as the run's tokenizer encodes them, padded: ids and a float mask."""
    from electra.data.tokenizer import load_tokenizer

    encs = [load_tokenizer(run / "discriminator").encode(t) for t in TEXTS]
    T = max(len(e.ids) for e in encs)
    ids, mask = torch.zeros(len(encs), T, dtype=torch.long), torch.zeros(len(encs), T)
    for r, e in enumerate(encs):
        ids[r, :len(e.ids)], mask[r, :len(e.ids)] = torch.tensor(e.ids), 1
    return ids, mask


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


def test_a_layers_states_and_the_generator_embed_as_transformers_and_their_exports_do(
        tmp_path, capsys):
    """--layer N pools block N's states: transformers' hidden_states[N] of the exported
    discriminator pooled alike (within 1e-5, fp32); -1 is the default, the last; the
    generator's encoder embeds as transformers' ElectraModel of the exported generator; a
    sentence-transformers export with --layer or --generator embeds as we do; bad layers and
    misplaced flags are one line."""
    from electra.cli import main

    run, _ = make_run(tmp_path, "tiny")
    electra.export(run, tmp_path / "hf")
    ids, mask = _batch(run)

    def pooled(h: torch.Tensor) -> np.ndarray:
        m = mask[..., None]
        return torch.nn.functional.normalize((h * m).sum(1) / m.sum(1), dim=-1).numpy()

    with torch.no_grad():
        disc = transformers.ElectraModel.from_pretrained(tmp_path / "hf/discriminator")
        states = disc.eval()(input_ids=ids, attention_mask=mask.long(),
                             output_hidden_states=True).hidden_states
        gen = transformers.ElectraModel.from_pretrained(tmp_path / "hf/generator")
        g_last = gen.eval()(input_ids=ids, attention_mask=mask.long()).last_hidden_state
    for layer in (1, 2, -2):
        np.testing.assert_allclose(electra.encode(run, TEXTS, layer=layer),
                                   pooled(states[layer if layer > 0 else 4 + 1 + layer]),
                                   atol=1e-5)
    assert np.array_equal(electra.encode(run, TEXTS, layer=-1), electra.encode(run, TEXTS))
    np.testing.assert_allclose(electra.encode(run, TEXTS, generator=True), pooled(g_last),
                               atol=1e-5)
    st = pytest.importorskip("sentence_transformers")
    for name, flags, kw in (("l2", ["--layer", "2"], {"layer": 2}),
                            ("gen", ["--generator"], {"generator": True})):
        assert main(["export", str(run), "--out", str(tmp_path / name),
                     "--sentence-transformers", "mean", *flags]) == 0
        np.testing.assert_allclose(
            st.SentenceTransformer(str(tmp_path / name), device="cpu").encode(TEXTS),
            electra.encode(run, TEXTS, **kw), atol=1e-5)
    for args, words in (
            (["evaluate", "--model", run, "--task", "sts", "--dev", tmp_path / "x.csv",
              "--layer", "5"], "--layer 5: "),
            (["export", run, "--out", tmp_path / "y", "--layer", "2"],
             "--layer: chooses the encoder of a sentence-transformers export"),
            (["evaluate", "--model", run, "--task", "sts", "--dev", tmp_path / "x.csv",
              "--layer", "1,1"], "--layer 1,1: names a state twice; give each once"),
            (["evaluate", "--model", run, "--task", "custom", "--dev", tmp_path / "x.csv",
              "--generator"], "--generator: --task custom does not read it")):
        (tmp_path / "x.csv").write_text("sentence1,sentence2,label\na b,a c,1\nb c,c d,2\n")
        assert main([str(a) for a in args]) == 2
        assert words in capsys.readouterr().err
    with pytest.raises(UserError, match=r"--layer 0: .* has 4 blocks; give 1 to 4"):
        electra.encode(run, TEXTS, layer=0)


@pytest.mark.parametrize("body", ["bert", "modernbert", "deberta"])
def test_the_mean_of_several_layers_embeds_as_transformers_and_the_export(body, tmp_path):
    """--layer 0,2 (or [2, 0]) pools the mean of
    transformers' hidden_states[0] and [2] of the encoder cut after block 2 (ModernBERT's top
    state after its final norm, as transformers gives it), within 1e-5 (fp32), for every
    body; the sentence-transformers export (WeightedLayerPooling) embeds alike, and electra
    reads the exported folder back to the same vectors; repeated or unreadable layers are
    one line."""
    st = pytest.importorskip("sentence_transformers")
    from electra.cli import main

    extra = {"bert": {}, "modernbert": dict(embedding_size=128, local_attention=8,
                                            global_every=2),
             "deberta": dict(embedding_size=128, generator_size=1.0, generator_layers=1,
                             position_buckets=16)}[body]
    run, _ = make_run(tmp_path, "tiny", body=body, num_layers=3, **extra)
    assert main(["export", str(run), "--out", str(tmp_path / "hf")]) == 0
    ids, mask = _batch(run)
    cfg = transformers.AutoConfig.from_pretrained(tmp_path / "hf/discriminator")
    cfg.num_hidden_layers = 2  # the cut the mean of states 0 and 2 reads
    if body == "modernbert":
        cfg.layer_types = cfg.layer_types[:2]
    hf = transformers.AutoModel.from_pretrained(tmp_path / "hf/discriminator", config=cfg)
    with torch.no_grad():
        states = hf.eval()(input_ids=ids, attention_mask=mask.long(),
                           output_hidden_states=True).hidden_states
    h, m = (states[0] + states[2]) / 2, mask[..., None]
    want = torch.nn.functional.normalize((h * m).sum(1) / m.sum(1), dim=-1).numpy()
    for spec in ("0,2", [2, 0], "0,-2"):  # (-2: block 2 of 3)
        np.testing.assert_allclose(electra.encode(run, TEXTS, layer=spec), want, atol=1e-5)
    assert main(["export", str(run), "--out", str(tmp_path / "st"),
                 "--sentence-transformers", "mean", "--layer", "0,2"]) == 0
    theirs = st.SentenceTransformer(str(tmp_path / "st"), device="cpu").encode(TEXTS)
    np.testing.assert_allclose(theirs, want, atol=1e-5)
    np.testing.assert_allclose(electra.encode(tmp_path / "st", TEXTS), want, atol=1e-5)
    if body == "bert":  # a folder whose layers are weighted unequally: not ours to read
        from sentence_transformers.sentence_transformer import modules as models
        model = st.SentenceTransformer(str(tmp_path / "st"), device="cpu")
        with torch.no_grad():
            model[1].layer_weights.copy_(torch.tensor([1.0, 0.0, 2.0]))
        model.save(str(tmp_path / "weighted"))
        assert isinstance(model[1], models.WeightedLayerPooling)
        with pytest.raises(UserError, match=r"weighs the layers \[1.0, 0.0, 2.0\]"):
            electra.encode(tmp_path / "weighted", TEXTS)
    for spec, words in (("2,2", "names a state twice"), ("a,b", "--layer a,b: give a block"),
                        ("0,4", "has 3 blocks"), ("0", "--layer 0: ")):
        with pytest.raises(UserError, match=words):
            electra.encode(run, TEXTS, layer=spec)


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


def test_a_sentence_transformers_export_embeds_as_electra_does(tmp_path, capsys):
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
    # Such a folder read back: electra embeds with its pooling and normaliser, and it
    # imports as a run (its encoder; a fresh replaced-token head)
    for pooling in ("mean", "cls"):
        np.testing.assert_allclose(electra.encode(tmp_path / f"st-{pooling}", TEXTS),
                                   electra.encode(run, TEXTS, pooling=pooling), atol=1e-6)
    assert main(["import", str(tmp_path / "st-cls"), "--out", str(tmp_path / "back")]) == 0
    from electra.saved.models import open_model

    a = open_model(run)["discriminator"].encoder.state_dict()
    b = open_model(tmp_path / "back")["discriminator"].encoder.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    from helpers import cli_error

    assert "an encoder without a replaced-token head" in cli_error(
        capsys, "detect", "--model", tmp_path / "st-mean", "some text")
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


def test_retrieval_scores_equal_trec_evals_on_the_whole_ranking(tmp_path, capsys):
    """`electra evaluate --task retrieval` on a SQuAD file (its first articles): each
    question against every unique paragraph; the scores equal pytrec_eval's on the full
    ranking of the same embeddings (nDCG@10, Recall@100; MRR@10 on its first 10)."""
    import json

    pytrec_eval = pytest.importorskip("pytrec_eval")
    from electra.cli import main

    squad = json.loads((shared_data("squad") / "dev-v1.1.json").read_text())
    (tmp_path / "sq.json").write_text(json.dumps({"data": squad["data"][:2]}))
    run, _ = make_run(tmp_path, "tiny")
    capsys.readouterr()
    assert main(["evaluate", "--model", str(run), "--task", "retrieval", "--data",
                 str(tmp_path / "sq.json")]) == 0
    got = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["retrieval"]
    paragraphs = [p for a in squad["data"][:2] for p in a["paragraphs"]]
    docs = {f"p{i}": p["context"] for i, p in enumerate(paragraphs)}
    questions = {q["id"]: (q["question"], f"p{i}") for i, p in enumerate(paragraphs)
                 for q in p["qas"]}
    assert (got["queries"], got["documents"]) == (len(questions), len(docs))
    D = electra.encode(run, list(docs.values()))
    Q = electra.encode(run, [q for q, _ in questions.values()])
    sims = Q @ D.T
    full = {qid: {d: float(s) for d, s in zip(docs, row, strict=True)}
            for qid, row in zip(questions, sims, strict=True)}
    qrels = {qid: {doc: 1} for qid, (_, doc) in questions.items()}
    ev = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10", "recall.100"}).evaluate(full)
    top10 = {q: dict(sorted(r.items(), key=lambda kv: -kv[1])[:10]) for q, r in full.items()}
    rr = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank"}).evaluate(top10)
    n = len(qrels)
    assert got["ndcg@10"] == pytest.approx(sum(v["ndcg_cut_10"] for v in ev.values()) / n,
                                           abs=1e-6)
    assert got["recall@100"] == pytest.approx(sum(v["recall_100"] for v in ev.values()) / n,
                                              abs=1e-6)
    assert got["mrr@10"] == pytest.approx(sum(v["recip_rank"] for v in rr.values()) / n,
                                          abs=1e-6)


def test_sts_on_a_file_of_scored_pairs_and_its_bad_input(tmp_path, capsys):
    """`evaluate --task sts --dev FILE` (sentence1, sentence2, score): the Spearman of the
    cosines, as `electra.sts` gives; a file without a second text column is one line."""
    import json

    from helpers import cli_error

    from electra.cli import main

    run, _ = make_run(tmp_path, "tiny")
    rows = [("a b c", "a b d", 4.0), ("x y", "q r s", 0.5), ("the cat", "a cat", 3.0),
            ("one two", "three", 1.0)]
    (tmp_path / "pairs.csv").write_text("sentence1,sentence2,score\n" + "".join(
        f"{a},{b},{s}\n" for a, b, s in rows))
    capsys.readouterr()
    assert main(["evaluate", "--model", str(run), "--task", "sts", "--dev",
                 str(tmp_path / "pairs.csv"), "--label-column", "score"]) == 0
    got = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert got == electra.sts(run, dev=tmp_path / "pairs.csv", label_column="score")
    # the documented layout needs no --label-column: a score column is read where there is
    # no label column
    assert main(["evaluate", "--model", str(run), "--task", "sts", "--dev",
                 str(tmp_path / "pairs.csv"), "--quiet"]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1]) == got
    (tmp_path / "one.csv").write_text("sentence1,score\na,1\nb,2\n")
    err = cli_error(capsys, "evaluate", "--model", run, "--task", "sts", "--dev",
                    tmp_path / "one.csv", "--label-column", "score")
    assert "sentence2" in err
    assert "one of them" in cli_error(capsys, "evaluate", "--model", run, "--task", "sts")


@pytest.mark.parametrize("body", ["modernbert", "deberta"])
def test_every_body_embeds_fine_tunes_and_exports_alike(body, tmp_path):
    """The ModernBERT and DeBERTa bodies: an embedding fine-tune runs (InfoNCE on pairs),
    and its sentence-transformers export (ModernBertModel, DebertaV2Model inside) embeds as
    electra does, within 1e-5 (fp32)."""
    import json

    st = pytest.importorskip("sentence_transformers")
    from electra.cli import main

    extra = {"modernbert": dict(embedding_size=128, local_attention=8, global_every=2,
                                hidden_dropout=0.0, attention_dropout=0.0),
             "deberta": dict(embedding_size=128, generator_size=1.0, generator_layers=1,
                             position_buckets=16, hidden_dropout=0.0,
                             attention_dropout=0.0)}[body]
    run, _ = make_run(tmp_path, "tiny", body=body, num_layers=2, **extra)
    rows = [{"query": t, "positive": t + " again"} for t in TEXTS * 4]
    (tmp_path / "pairs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main(["finetune", "--model", str(run), "--task", "embedding", "--train",
                 str(tmp_path / "pairs.jsonl"), "--dev", str(tmp_path / "pairs.jsonl"),
                 "--out", str(tmp_path / "ft"), "--quiet", "--set", "epochs=1", "--set",
                 "precision=fp32", "--set", "batch_size=4", "--set", "max_length=32"]) == 0
    assert main(["export", str(tmp_path / "ft/seed-1"), "--out", str(tmp_path / "st")]) == 0
    theirs = st.SentenceTransformer(str(tmp_path / "st"), device="cpu").encode(TEXTS)
    np.testing.assert_allclose(theirs, electra.encode(tmp_path / "ft/seed-1", TEXTS),
                               atol=1e-5)


def test_a_sentence_transformers_folders_own_settings_are_honoured(tmp_path):
    """A folder saved with max_seq_length 8, lowercasing and query/document prompts:
    electra.encode and retrieval embed as sentence-transformers does with it (its length, its
    lowercasing; the query prompt on queries, the document prompt on documents), within
    1e-5; a prompt name it lacks is one line."""
    st = pytest.importorskip("sentence_transformers")
    from sentence_transformers.sentence_transformer import modules as models

    from electra.cli import main
    from electra.evaluation.encoder import Encoder

    run, _ = make_run(tmp_path, "tiny")
    assert main(["export", str(run), "--out", str(tmp_path / "st"),
                 "--sentence-transformers", "mean"]) == 0
    first = models.Transformer(str(tmp_path / "st"), max_seq_length=8, do_lower_case=True)
    model = st.SentenceTransformer(modules=[first, models.Pooling(
        first.get_embedding_dimension(), "mean"), models.Normalize()],
        prompts={"query": "query: ", "document": "passage: "}, device="cpu")
    model.save(str(tmp_path / "own"))
    long = ["The File Is Opened In Binary Mode And Read In Blocks Of Bytes " * 3, "a b c"]
    enc = Encoder(tmp_path / "own")
    assert enc.max_length == 8  # (6.x saves the lowercasing in tokenizer.json's normaliser)
    np.testing.assert_allclose(enc.encode(long), model.encode(long), atol=1e-5)
    np.testing.assert_allclose(enc.encode(long, prompt_name="query"),
                               model.encode(long, prompt_name="query"), atol=1e-5)
    with pytest.raises(UserError, match="prompt_name='title'"):
        enc.encode(long, prompt_name="title")
    # at the folder's length, not the model's 64 positions
    assert not np.allclose(Encoder(tmp_path / "st").encode(long), enc.encode(long))
    # the layout of sentence-transformers before 6 (both in sentence_bert_config.json)
    (tmp_path / "own/sentence_bert_config.json").write_text(
        '{"max_seq_length": 12, "do_lower_case": true}')
    old = Encoder(tmp_path / "own")
    assert (old.max_length, old.lowercase) == (12, True)
    np.testing.assert_allclose(old.encode(long), st.SentenceTransformer(
        str(tmp_path / "own"), device="cpu").encode(long), atol=1e-5)


def test_an_embedding_model_exports_its_own_pooling_and_length_with_usual_modes(tmp_path,
                                                                                capsys):
    """A fine-tuned embedding model (mean pooling, max_length 16) exports with its own
    pooling and the length it was fine-tuned at (sentence-transformers cuts there, as
    electra.encode does); another pooling is one line; every file of the export is written
    with the mode open() gives (transformers writes its weights 0600)."""
    import os

    st = pytest.importorskip("sentence_transformers")
    from helpers import cli_error

    from electra.cli import main

    run, _ = make_run(tmp_path, "tiny")
    rows = [{"query": f"{a} {b}", "positive": f"{b} {a}"} for a in "abcdefgh" for b in "xyz"]
    import json

    (tmp_path / "p.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main(["finetune", "--model", str(run), "--task", "embedding", "--train",
                 str(tmp_path / "p.jsonl"), "--dev", str(tmp_path / "p.jsonl"), "--out",
                 str(tmp_path / "ft"), "--quiet", "--set", "epochs=1", "--set",
                 "precision=fp32", "--set", "max_length=16"]) == 0
    model = tmp_path / "ft/seed-1"
    err = cli_error(capsys, "export", model, "--out", tmp_path / "cls",
                    "--sentence-transformers", "cls")
    assert "was fine-tuned to embed with mean pooling, and cls pooling would give" in err
    assert main(["export", str(model), "--out", str(tmp_path / "st")]) == 0
    assert "texts cut at 16 tokens" in capsys.readouterr().out
    theirs = st.SentenceTransformer(str(tmp_path / "st"), device="cpu")
    assert theirs.max_seq_length == 16
    long = [" ".join("abcdefghxyz") * 4, "a x"]
    np.testing.assert_allclose(theirs.encode(long), electra.encode(model, long), atol=1e-5)
    np.testing.assert_allclose(electra.encode(tmp_path / "st", long),
                               electra.encode(model, long), atol=1e-6)
    umask = os.umask(0)
    os.umask(umask)
    modes = {p.name: p.stat().st_mode & 0o777 for p in (tmp_path / "st").rglob("*")
             if p.is_file()}
    assert set(modes.values()) == {0o666 & ~umask}, modes
