"""Embedding fine-tuning (``--task embedding``, issue 62): InfoNCE over a micro-batch's
documents as written by hand, a temperature learned or fixed, a fine-tune that learns,
resumes bitwise after Ctrl-C, exports as a sentence-transformers folder whose embeddings
equal ours, and is scored by `evaluate --task sts|retrieval` with its own pooling."""

from __future__ import annotations

import json
import math
import random

import numpy as np
import pytest
import torch
from helpers import cli_error, ctrl_c_in_step, snapshot, tiny_config
from safetensors.torch import load_file

import electra
from electra.cli import main
from electra.data.tokenizer import train_tokenizer
from electra.io.checkpoint import latest_checkpoint
from electra.tasks.embedding.head import Embedding, EmbeddingModel, ranks
from electra.tasks.embedding.loss import InfoNCE

WORDS = [f"{a}{b}" for a in "bcdfghjklm" for b in "aeiou"]  # 50 two-letter words
_shuffled = random.Random(42).sample(WORDS, len(WORDS))
IMAGE = dict(zip(WORDS, _shuffled, strict=True))  # each word's counterpart


def pairs(path, n: int, seed: int, negatives: bool = False) -> None:
    """Queries of two words; the positive holds their counterparts (a fixed permutation of
    the words), the negative two other words: no text shares a word with its positive, so
    an untrained model ranks at chance and what matches must be learned."""
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        q = rng.sample(WORDS, 2)
        p = [IMAGE[w] for w in q]
        rng.shuffle(p)
        row = {"query": " ".join(q), "positive": " ".join(p)}
        if negatives:
            row["negative"] = " ".join(rng.sample([w for w in WORDS if w not in p], 2))
        rows.append(row)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


@pytest.fixture
def data(tmp_path):
    pairs(tmp_path / "train.jsonl", 512, 0, negatives=True)
    pairs(tmp_path / "dev.jsonl", 48, 1)
    (tmp_path / "c.txt").write_text((" ".join(WORDS) + "\n") * 5)  # each word a token
    train_tokenizer([str(tmp_path / "c.txt")], 200, tmp_path / "tok")
    return tmp_path


def test_infonce_is_each_querys_cross_entropy_over_the_micro_batchs_documents():
    """(B, 3, T) rows of query, positive, negative: the logits are every query's cosine to
    every positive then every negative, over the temperature; the loss the summed
    cross-entropy towards the query's own positive (column i)."""
    torch.manual_seed(0)
    cfg = tiny_config(hidden_dropout=0.0, attention_dropout=0.0)
    model = EmbeddingModel(cfg).eval()
    ids = torch.randint(5, 100, (4, 3, 9))
    mask = torch.ones_like(ids)
    mask[1, 2, 6:] = 0
    logits = InfoNCE(temperature=0.1)(model(ids, mask, torch.zeros_like(ids)))
    assert logits.shape == (4, 8)
    e = [[model.embed(ids[b, k][None], mask[b, k][None])[0] for k in range(3)]
         for b in range(4)]
    docs = [e[b][1] for b in range(4)] + [e[b][2] for b in range(4)]
    by_hand = torch.stack([torch.stack([torch.dot(e[b][0], d) / 0.1 for d in docs])
                           for b in range(4)])
    torch.testing.assert_close(logits, by_hand, atol=1e-5, rtol=1e-5)
    loss = Embedding().loss(logits, torch.zeros(4, dtype=torch.long), None)
    expect = sum(-torch.log_softmax(by_hand[b], 0)[b] for b in range(4))
    torch.testing.assert_close(loss, expect, atol=1e-5, rtol=1e-5)
    assert all(abs(float(v.detach().norm()) - 1) < 1e-5 for row in e for v in row)


@pytest.mark.parametrize("learn", [False, True])
def test_a_learned_temperature_moves_and_a_fixed_one_does_not(learn):
    torch.manual_seed(0)
    model = EmbeddingModel(tiny_config())
    infonce = InfoNCE(temperature=0.05, learn_temperature=learn)
    assert infonce.temperature() == pytest.approx(0.05)
    ids = torch.randint(5, 100, (4, 2, 7))
    loss = Embedding().loss(infonce(model(ids, torch.ones_like(ids))), None, None)
    loss.backward()
    assert (infonce.log_scale.grad is not None) == learn
    assert not any("log_scale" in k for k in model.state_dict())  # the loss's, not the model's


def test_the_exported_model_holds_no_training_machinery(tmp_path):
    """The embedding model is encoder + pooling + normaliser: no temperature among its
    weights, no torch.distributed in its module; a folder written before the temperature
    moved to the loss object (a ``log_scale`` weight beside the encoder) still loads."""
    import inspect

    from electra.tasks.embedding import head

    assert "torch.distributed" not in inspect.getsource(head)
    model = EmbeddingModel(tiny_config())
    old = {**model.state_dict(), "log_scale": torch.tensor(math.log(20.0))}
    EmbeddingModel(tiny_config()).load_state_dict(old)  # strict: the old weight left out


def test_ranks_count_ties_against_the_query():
    q = np.array([[1.0, 0.0], [0.0, 1.0]])
    d = np.array([[1.0, 0.0], [0.5, 0.5], [0.0, 1.0], [0.0, 1.0]])
    assert ranks(q, d, [0, 3]).tolist() == [1, 2]


def test_embedding_finetune_learns_resumes_exports_and_is_scored(data, monkeypatch, capsys):
    """Triplets in training, pairs in dev: the dev MRR@10 rises from an untrained model's
    (lr ~0: chance, about 0.07) to above 0.6; Ctrl-C mid-run and --resume give the same
    weights; export writes a sentence-transformers folder whose embeddings equal ours (mean
    pooling, and cls for a model trained with it); `evaluate --task sts` embeds with the
    model's own pooling."""
    args = ["finetune", "--random-init", "tiny", "--tokenizer", str(data / "tok"), "--task",
            "embedding", "--train", str(data / "train.jsonl"), "--dev",
            str(data / "dev.jsonl"), "--quiet", "--set", "precision=fp32", "--set",
            "batch_size=16", "--set", "temperature=0.1", "--set", "max_length=16"]
    trained = [*args, "--set", "epochs=4", "--set", "lr=1e-3", "--set",
               "learn_temperature=true", "--set", "save_every=10"]
    assert main([*args, "--set", "epochs=1", "--set", "lr=1e-12", "--out",
                 str(data / "untrained")]) == 0
    assert main([*trained, "--out", str(data / "a")]) == 0
    before = json.loads((data / "untrained/results.json").read_text())["median"]["dev"]
    after = json.loads((data / "a/results.json").read_text())["median"]["dev"]
    assert before["mrr@10"] < 0.2 and after["mrr@10"] > 0.6, (before, after)
    ctrl_c_in_step(monkeypatch, 45)
    assert main([*trained, "--out", str(data / "b")]) == 130
    monkeypatch.undo()
    kept = load_file(latest_checkpoint(data / "b.partial/seed-1/checkpoints")
                     / "model.safetensors")  # the loss object's temperature, learned
    assert float(kept["log_scale"]) != pytest.approx(math.log(10.0))
    assert main([*trained, "--out", str(data / "b"), "--resume"]) == 0
    wa, wb = load_file(data / "a/seed-1/model.safetensors"), load_file(
        data / "b/seed-1/model.safetensors")
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)
    assert "log_scale" not in wa  # the loss object's: in the checkpoints alone
    st = pytest.importorskip("sentence_transformers")
    texts = [json.loads(x)["query"] for x in (data / "dev.jsonl").read_text().splitlines()]
    assert main([*args, "--set", "epochs=1", "--set", "pooling=cls", "--out",
                 str(data / "c")]) == 0
    for model, pooling in (("a", "mean"), ("c", "cls")):
        out = data / f"st-{model}"
        assert main(["export", str(data / model / "seed-1"), "--out", str(out)]) == 0
        modules = json.loads((out / "modules.json").read_text())
        assert [m["type"].rpartition(".")[2] for m in modules] == [
            "Transformer", "Pooling", "Normalize"]
        pool = json.loads((out / "1_Pooling/config.json").read_text())
        old = f"pooling_mode_{'cls_token' if pooling == 'cls' else 'mean_tokens'}"
        assert pool.get("pooling_mode") == pooling or pool.get(old), pool  # 5.x's, or 3.x's
        theirs = st.SentenceTransformer(str(out), device="cpu").encode(texts[:8])
        np.testing.assert_allclose(theirs, electra.encode(data / model / "seed-1", texts[:8]),
                                   atol=1e-5)
    sts = data / "sts.csv"
    sts.write_text("sentence1,sentence2,score\n" + "".join(
        f"{a},{b},{s}\n" for a, b, s in [("ba be", "ba be bi", 5), ("ba be", "mo mu", 0),
                                           ("ka ke", "ka ke ki", 4), ("ka", "la", 1)]))
    capsys.readouterr()
    assert main(["evaluate", "--model", str(data / "c/seed-1"), "--task", "sts", "--dev",
                 str(sts), "--label-column", "score"]) == 0
    got = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert got == electra.sts(data / "c/seed-1", dev=sts, label_column="score",
                              pooling="cls")


@pytest.mark.parametrize("setting, words", [
    ("temperature=0", "temperature must be > 0, got 0"),
    ("temperature=-0.5", "temperature must be > 0"),
    ("pooling=max", "pooling must be one of mean, cls"),
    ("freeze=encoder", "freeze=encoder leaves no weight to train for embedding"),
])
def test_bad_embedding_settings_are_one_line(data, capsys, setting, words):
    before = snapshot(data)
    err = cli_error(capsys, "finetune", "--random-init", "tiny", "--tokenizer", data / "tok",
                    "--task", "embedding", "--train", data / "train.jsonl", "--dev",
                    data / "dev.jsonl", "--out", data / "x", "--set", setting)
    assert words in err, err
    assert snapshot(data) == before


def test_a_pairs_file_with_one_text_column_is_one_line(data, capsys):
    (data / "one.csv").write_text("query\nwhere\nwhat\n")
    err = cli_error(capsys, "finetune", "--random-init", "tiny", "--tokenizer", data / "tok",
                    "--task", "embedding", "--train", data / "one.csv", "--dev",
                    data / "dev.jsonl", "--out", data / "x")
    assert "one.csv: no pair columns (found 'query')" in err
    (data / "short.csv").write_text("query,positive\nwhere,there\nwhat,\n")
    err = cli_error(capsys, "finetune", "--random-init", "tiny", "--tokenizer", data / "tok",
                    "--task", "embedding", "--train", data / "short.csv", "--dev",
                    data / "dev.jsonl", "--out", data / "x")
    assert "short.csv: row 2 has no text in 'positive'" in err


def _ft(data, train, *more) -> list:
    return ["finetune", "--random-init", "tiny", "--tokenizer", data / "tok", "--task",
            "embedding", "--train", train, "--dev", data / "dev.jsonl", "--out", data / "x",
            *more]


def test_no_column_of_a_pairs_file_is_dropped_silently(data, capsys):
    """STS-B's layout (sentence1, sentence2, score) read as pairs would make every row a
    positive, the 0-scored ones too: refused, naming the score and both ways to read it
    (--min-score keeps the high ones; named columns take every row); a label beside
    triplets, a second negative, a row lacking the negative a later row has, a file of one
    document, and flags the family does not read: each one line, nothing written."""
    rows = [("a b", "b a", 5.0), ("c d", "d c", 4.2), ("e f", "g h", 0.4), ("i j", "j i", 4.8)]
    (data / "scored.tsv").write_text("sentence1\tsentence2\tscore\n" + "".join(
        f"{a}\t{b}\t{s}\n" for a, b, s in rows))
    bad = (("tri.jsonl", '{"query": "a", "positive": "b", "negative": "c", "label": 1}\n',
            "column 'label' would not be read"),
           ("two.jsonl", '{"query": "a", "positive": "b", "negative": "c", '
                         '"negative_2": "d"}\n', "column 'negative_2' would not be read"),
           ("ragged.jsonl", '{"query": "a", "positive": "b"}\n'
                            '{"query": "c", "positive": "d", "negative": "e"}\n',
            "ragged.jsonl: row 1 has no text in 'negative'"),
           ("same.jsonl", '{"query": "a", "positive": "b"}\n' * 64,
            "same.jsonl: 64 row(s) with 1 different document(s); InfoNCE's negatives are "
            "the other rows' documents"))
    for name, text, _ in bad:
        (data / name).write_text(text)
    before = snapshot(data)
    err = cli_error(capsys, *_ft(data, data / "scored.tsv"))
    assert "scored.tsv: column 'score' would not be read (this task reads 'sentence1', " \
           "'sentence2'); --task embedding takes every row as a positive pair, whatever its " \
           "score; train on the pairs scored high with --min-score X (--label-column score)" \
           ", or name the columns to take every row: --text-columns sentence1,sentence2" in err
    for name, _, words in bad:
        assert words in cli_error(capsys, *_ft(data, data / name)), name
    for flags, words in ((("--regression",), "--regression: --task embedding reads pairs"),
                         (("--label-column", "score"), "--label-column score: --task "
                          "embedding reads a score only to keep the pairs scored at least "
                          "--min-score X"),
                         (("--min-score", "4", "--task", "custom"), "--min-score: --task "
                          "custom does not read it (--task embedding does); drop it")):
        assert words in cli_error(capsys, *_ft(data, data / "scored.tsv"), *flags)
    assert snapshot(data) == before
    from electra.tasks.embedding.data import read_pairs

    kept = read_pairs(data / "scored.tsv", min_score=4)
    assert [(p.query, p.positive) for p in kept] == [("a b", "b a"), ("c d", "d c"),
                                                     ("i j", "j i")]
    assert "1 of 4 pairs scored below --min-score 4 are left out" in capsys.readouterr().err
    every = read_pairs(data / "scored.tsv", "sentence1,sentence2")  # named: every row
    assert len(every) == 4


def test_a_retrieval_set_as_dev_picks_the_epoch_by_ndcg_and_reaches_the_card(data, capsys):
    """--dev a BEIR folder: each epoch scores the model's retrieval of the folder's whole
    corpus (nDCG@10, MRR@10, Recall@100, what `evaluate --task retrieval` reports of the
    kept model), nDCG@10 picks the epoch, and the model card lists the three."""
    rows = [json.loads(x) for x in (data / "dev.jsonl").read_text().splitlines()]
    beir = data / "beir"
    (beir / "qrels").mkdir(parents=True)
    (beir / "corpus.jsonl").write_text("".join(
        json.dumps({"_id": f"d{i}", "text": r["positive"]}) + "\n" for i, r in enumerate(rows)))
    (beir / "queries.jsonl").write_text("".join(
        json.dumps({"_id": f"q{i}", "text": r["query"]}) + "\n" for i, r in enumerate(rows)))
    (beir / "qrels/dev.tsv").write_text("q\td\ts\n" + "".join(f"q{i}\td{i}\t1\n"
                                                             for i in range(len(rows))))
    assert main(["finetune", "--random-init", "tiny", "--tokenizer", str(data / "tok"),
                 "--task", "embedding", "--train", str(data / "train.jsonl"), "--dev",
                 str(beir), "--quiet", "--set", "precision=fp32", "--set", "batch_size=16",
                 "--set", "max_length=16", "--set", "epochs=2", "--set", "lr=1e-3",
                 "--set", "select=best", "--out", str(data / "r")]) == 0
    result = json.loads((data / "r/seed-1/result.json").read_text())
    dev = result["dev"]["dev"]
    assert list(dev) == ["ndcg@10", "mrr@10", "recall@100"] and dev["ndcg@10"] > 0.3
    assert result["select"] == "best" and dev["ndcg@10"] == max(
        e["dev"]["dev"]["ndcg@10"] for e in result["evaluations"])
    scored = electra.retrieval(data / "r/seed-1", beir, split="dev")
    assert dev == pytest.approx({k: scored[k] for k in dev}, abs=1e-6)
    card = (data / "r/seed-1/README.md").read_text()
    assert all(f'type: "{m}"' in card for m in dev)


def test_prompts_go_before_queries_and_documents_and_into_the_export(data, monkeypatch):
    """query_prompt and document_prompt go before every query and document in training
    (the encoded rows hold them), in `electra.Encoder` of the model (its prompts by
    sentence-transformers' names) and in the sentence-transformers export, whose encode
    with each prompt name equals ours within 1e-5."""
    from electra.tasks.embedding.data import Pair, encode_pairs
    tok = train_tokenizer([str(data / "c.txt")], 200, data / "tok2")
    rows = encode_pairs(tok, [Pair("ba be", "ka ke", "mo mu")], 16, "bi ", "bo ")
    ids = {tok.id_to_token(i) for i in rows["input_ids"][0, 0].tolist()}
    assert {"bi", "ba", "be"} <= ids and "bo" not in ids
    assert tok.id_to_token(int(rows["input_ids"][0, 2, 1])) == "bo"  # [CLS] bo mo mu
    assert main(["finetune", "--random-init", "tiny", "--tokenizer", str(data / "tok"),
                 "--task", "embedding", "--train", str(data / "train.jsonl"), "--dev",
                 str(data / "dev.jsonl"), "--quiet", "--set", "precision=fp32", "--set",
                 "batch_size=16", "--set", "max_length=16", "--set", "epochs=1", "--set",
                 "query_prompt=bi", "--set", "document_prompt=bo", "--out",
                 str(data / "p")]) == 0
    enc = electra.Encoder(data / "p/seed-1")
    assert enc.prompts == {"query": "bi ", "document": "bo "}
    texts = ["ba be", "ka ke ki"]
    assert not np.allclose(enc.encode(texts, prompt_name="query"), enc.encode(texts))
    st = pytest.importorskip("sentence_transformers")
    assert main(["export", str(data / "p/seed-1"), "--out", str(data / "p-st")]) == 0
    theirs = st.SentenceTransformer(str(data / "p-st"), device="cpu")
    assert theirs.prompts == {"query": "bi ", "document": "bo "}
    for name in ("query", "document"):
        np.testing.assert_allclose(theirs.encode(texts, prompt_name=name),
                                   enc.encode(texts, prompt_name=name), atol=1e-5)


def test_embedding_trains_beside_another_task(data, monkeypatch):
    """Multi-task (--task embedding,custom): one encoder; the embedding task's learned
    temperature (its loss object's) is kept in the checkpoints, not its folder, which embeds
    as electra.encode does."""
    from helpers import write_sentiment

    write_sentiment(data / "s.csv", 32, 0)
    run = ["finetune", "--random-init", "tiny", "--tokenizer", str(data / "tok"),
           "--task", "embedding,custom", "--train", f"{data / 'train.jsonl'},{data / 's.csv'}",
           "--dev", f"{data / 'dev.jsonl'},{data / 's.csv'}", "--out", str(data / "mt"),
           "--quiet", "--set", "epochs=1", "--set", "precision=fp32", "--set",
           "max_length=16", "--set", "learn_temperature=true"]
    ctrl_c_in_step(monkeypatch, 6)
    assert main(run) == 130
    monkeypatch.undo()
    kept = load_file(latest_checkpoint(data / "mt.partial/seed-1/checkpoints")
                     / "model.safetensors")  # the loss object's temperature, learned
    assert float(kept["losses.embedding.log_scale"]) != pytest.approx(math.log(20))
    assert main([*run, "--resume"]) == 0
    saved = load_file(data / "mt/seed-1/embedding/model.safetensors")
    assert "log_scale" not in saved
    assert electra.encode(data / "mt/seed-1/embedding", ["ba be"]).shape == (1, 128)


def test_a_checkpoint_from_before_the_loss_object_resumes():
    """The trained module holds the loss object's temperature where the model held it (one
    task: ``log_scale``), and a multi-task checkpoint that held it in the task's head
    (``heads.TASK.log_scale``) loads into ``losses.TASK.log_scale``: a run stopped before
    this change resumes."""
    from electra.train.multitask import MultiTaskModel, WithLosses

    def trained(single: bool) -> WithLosses:
        torch.manual_seed(0)
        if single:
            return WithLosses(EmbeddingModel(tiny_config()), {"e": InfoNCE(0.05, True)}, True)
        heads = MultiTaskModel({"e": EmbeddingModel(tiny_config()),
                                "f": EmbeddingModel(tiny_config())})
        return WithLosses(heads, {"e": InfoNCE(0.05, True)}, False)

    one = trained(True)
    assert next(one.named_parameters())[0] == "log_scale"  # where the model had it
    state = {**one.state_dict(), "log_scale": torch.tensor(3.0)}
    one.load_state_dict(state)
    assert float(one.log_scale.detach()) == 3.0
    several = trained(False)
    state = several.state_dict()
    state["heads.e.log_scale"] = torch.tensor(3.0)
    del state["losses.e.log_scale"]
    several.load_state_dict(state)  # strict
    assert float(several.losses.e.log_scale.detach()) == 3.0


def _cached_and_reference(dropout: float, learn: bool, accum: int):
    """One step's gradients by the cached loss over ``accum`` micro-batches of 8 rows (query,
    positive, negative), and by a reference: the same micro-batches embedded with their
    graphs in the same order (the same dropout draws), the loss over all of them at once."""
    from electra.runtime import Runtime
    from electra.tasks.embedding.cache import CachedStep
    from electra.train.multitask import WithLosses

    torch.manual_seed(0)
    cfg = tiny_config(hidden_dropout=dropout, attention_dropout=dropout)
    ids = torch.randint(5, 100, (8, 3, 10))
    mask = torch.ones_like(ids)
    mask[1, 2, 6:], mask[5, 0, 3:] = 0, 0
    rows = {"input_ids": ids, "attention_mask": mask, "token_type_ids": torch.zeros_like(ids)}
    micro = 8 // accum

    def chunk(j):
        return {k: v[j * micro:(j + 1) * micro] for k, v in rows.items()}

    grads, losses, states = [], [], []
    for cached in (True, False):
        torch.manual_seed(1)
        model = WithLosses(EmbeddingModel(cfg), {"t": InfoNCE(0.1, learn)}, True).train()
        torch.manual_seed(2)
        if cached:
            step = CachedStep(chunk, accum, 8, model.criteria["t"], Runtime(), {})
            loss = torch.zeros((), dtype=torch.float64)
            for j in range(accum):
                part, _ = step(model, j)
                part.backward()
                loss += part.detach().double()
        else:
            e = torch.cat([model(*chunk(j).values(), embed=True) for j in range(accum)])
            loss = InfoNCE.loss(model.criteria["t"](e)) / 8
            loss.backward()
        states.append(torch.get_rng_state())
        grads.append({n: p.grad for n, p in model.named_parameters() if p.grad is not None})
        losses.append(float(loss.detach()))
    return grads, losses, states


@pytest.mark.parametrize(("dropout", "learn", "accum"),
                         [(0.0, False, 4), (0.1, True, 4), (0.1, False, 2), (0.0, True, 1)])
def test_the_cached_loss_has_the_whole_batchs_gradients(dropout, learn, accum):
    """GradCache: every micro-batch's documents the negatives of every query, the gradients
    (encoder's and a learned temperature's) the whole batch's loss's within 1e-5 (fp32),
    dropout drawing the same masks in both passes, and the random state left as one pass
    over the batch leaves it; the step's loss is the whole loss."""
    (cached, whole), (l_cached, l_whole), (s_cached, s_whole) = _cached_and_reference(
        dropout, learn, accum)
    assert set(cached) == set(whole) and ("log_scale" in whole) == learn
    for name in whole:
        torch.testing.assert_close(cached[name], whole[name], atol=1e-5, rtol=1e-5, msg=name)
    assert l_cached == pytest.approx(l_whole, abs=1e-6) and torch.equal(s_cached, s_whole)


def test_matryoshka_adds_each_prefixs_infonce_to_the_whole_embeddings():
    """matryoshka_dims: the loss is the whole embeddings' InfoNCE plus, for each d, the
    InfoNCE of each embedding's first d dimensions renormalised (weight 1 each,
    sentence-transformers' MatryoshkaLoss); off, the logits are the one InfoNCE's."""
    torch.manual_seed(0)
    e = torch.nn.functional.normalize(torch.randn(4, 3, 8), dim=-1)
    plain = InfoNCE(0.1)
    whole = InfoNCE.loss(plain(e))
    by_hand = whole + sum(InfoNCE.loss(plain(torch.nn.functional.normalize(e[..., :d], dim=-1)))
                          for d in (4, 2))
    nested = InfoNCE(0.1, dims=(4, 2))
    assert nested(e).shape == (3, 4, 8) and plain(e).shape == (4, 8)
    torch.testing.assert_close(InfoNCE.loss(nested(e)), by_hand, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(nested(e)[0], plain(e))
    from electra.tasks.embedding.head import EmbeddingSettings
    assert EmbeddingSettings(matryoshka_dims="16, 64,16").dims() == (64, 16)


def test_a_matryoshka_model_is_scored_and_exported_at_a_smaller_dimension(data, capsys):
    """Fine-tuned with matryoshka_dims, a model embeds at its first D dimensions
    (electra.encode / evaluate --truncate-dim: renormalised); its sentence-transformers
    export with --truncate-dim keeps D as the folder's truncate_dim, which
    sentence-transformers and electra both embed with (equal within 1e-5, normalised)."""
    assert main(["finetune", "--random-init", "tiny", "--tokenizer", str(data / "tok"),
                 "--task", "embedding", "--train", str(data / "train.jsonl"), "--dev",
                 str(data / "dev.jsonl"), "--quiet", "--set", "precision=fp32", "--set",
                 "batch_size=16", "--set", "max_length=16", "--set", "epochs=1", "--set",
                 "matryoshka_dims=32,16", "--out", str(data / "m")]) == 0
    texts = ["ba be", "ka ke ki", "mo"]
    full = electra.encode(data / "m/seed-1", texts)
    cut = electra.encode(data / "m/seed-1", texts, truncate_dim=16)
    expect = full[:, :16] / np.linalg.norm(full[:, :16], axis=1, keepdims=True)
    np.testing.assert_allclose(cut, expect, atol=1e-6)
    pairs = [("ba be", "ka ke"), ("mo", "mo mu"), ("ki", "ba be bi"), ("ke ko", "ke")]
    (data / "sts.csv").write_text("sentence1,sentence2,label\n" + "".join(
        f"{a},{b},{i}\n" for i, (a, b) in enumerate(pairs)))
    capsys.readouterr()
    assert main(["evaluate", "--model", str(data / "m/seed-1"), "--task", "sts", "--dev",
                 str(data / "sts.csv"), "--truncate-dim", "16"]) == 0
    rho = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["dev"]["spearman"]
    a, b = (electra.encode(data / "m/seed-1", [p[k] for p in pairs], truncate_dim=16)
            for k in (0, 1))
    from scipy.stats import spearmanr
    assert rho == pytest.approx(spearmanr((a * b).sum(1), range(4)).statistic)
    st = pytest.importorskip("sentence_transformers")
    assert main(["export", str(data / "m/seed-1"), "--out", str(data / "m-st"),
                 "--truncate-dim", "16"]) == 0
    theirs = st.SentenceTransformer(str(data / "m-st"), device="cpu")
    assert theirs.truncate_dim == 16
    got = theirs.encode(texts)
    np.testing.assert_allclose(got / np.linalg.norm(got, axis=1, keepdims=True), cut,
                               atol=1e-5)
    np.testing.assert_allclose(electra.encode(data / "m-st", texts), cut, atol=1e-5)
