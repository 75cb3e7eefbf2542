"""Rerankers (``--task rerank``, issue 72): the three losses and the ranking metrics as
computed by hand, groups and scored pairs read, a fine-tune that learns to rank, exported as
a folder sentence-transformers' CrossEncoder scores as we do, and `evaluate --task rerank`
reordering a first stage's documents (BM25's or an embedding model's) beside it."""

from __future__ import annotations

import json
import math
import random

import numpy as np
import pytest
import torch
from helpers import cli_error, ctrl_c_in_step
from safetensors.torch import load_file

import electra
from electra.cli import main
from electra.data.tokenizer import train_tokenizer
from electra.errors import UserError
from electra.tasks.base import TaskData
from electra.tasks.rerank.data import Group, by_query, read_groups
from electra.tasks.rerank.head import Rerank, ranking_metrics

WORDS = [f"{a}{b}" for a in "bcdfghjklm" for b in "aeiou"]  # 50 two-letter words
MARK = "ka"  # in every positive, and in no other text


def groups(path, n: int, seed: int, negatives: int, teacher: bool = False) -> None:
    """A query of two words; its positive holds both and the mark, each negative three other
    words: an untrained model ranks at chance, and what makes a positive must be learned."""
    rng = random.Random(seed)
    words = [w for w in WORDS if w != MARK]
    rows = []
    for _ in range(n):
        q = rng.sample(words, 2)
        rest = [w for w in words if w not in q]
        p = [*q, MARK]
        rng.shuffle(p)
        row = {"query": " ".join(q), "positive": " ".join(p)}
        for i in range(negatives):
            row[f"negative_{i + 1}"] = " ".join(rng.sample(rest, 3))
        if teacher:
            row["scores"] = [3.0] + [-1.0 - i for i in range(negatives)]
        rows.append(row)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


@pytest.fixture
def data(tmp_path):
    groups(tmp_path / "train.jsonl", 256, 0, 3)
    groups(tmp_path / "dev.jsonl", 32, 1, 7)
    (tmp_path / "c.txt").write_text((" ".join(WORDS) + "\n") * 5)  # each word a token
    train_tokenizer([str(tmp_path / "c.txt")], 200, tmp_path / "tok")
    return tmp_path


def test_the_three_losses_are_those_computed_by_hand():
    head = Rerank()
    z = torch.tensor([[2.0, 0.5, -1.0], [0.0, 1.0, 0.0]])
    data = TaskData("rerank", [], {}, (), False, head=head)
    # listwise: each group's -log softmax of its positive (index 0), summed over groups
    want = sum(-zi[0] + math.log(sum(math.exp(x) for x in zi)) for zi in z.tolist())
    got = head.loss(z, torch.zeros(2, dtype=torch.long), data)
    assert float(got) == pytest.approx(want, rel=1e-6)
    # bce: each group's mean over its documents of -(t log s + (1 - t) log(1 - s))
    t = torch.tensor([[1.0, 0.0, 0.25], [0.0, 1.0, 0.0]])

    def bce(x: float, y: float) -> float:
        s = 1 / (1 + math.exp(-x))
        return -(y * math.log(s) + (1 - y) * math.log(1 - s))

    want = sum(sum(bce(x, y) for x, y in zip(zr, tr, strict=True)) / 3
               for zr, tr in zip(z.tolist(), t.tolist(), strict=True))
    assert float(head.loss(z, t, data)) == pytest.approx(want, rel=1e-6)
    # mse (a teacher's scores: regression): each group's mean squared difference
    teacher = torch.tensor([[3.0, 0.0, -1.0], [1.0, 1.0, 1.0]])
    want = ((1 + 0.25 + 0) + (1 + 0 + 1)) / 3
    assert float(head.loss(z, teacher, data.replace(regression=True))) == pytest.approx(
        want, rel=1e-6)


def test_ranking_metrics_count_ties_against_the_relevant_document():
    # query 1: the relevant document ties with another below a better one: rank 3
    # query 2: two relevant documents at ranks 1 and 3; query 3: none relevant, left out
    got = ranking_metrics(
        [np.array([0.9, 0.5, 0.5]), np.array([3.0, 1.0, 2.0]), np.array([1.0, 2.0])],
        [np.array([False, True, False]), np.array([True, True, False]),
         np.array([False, False])])
    ndcg2 = (1 + 1 / math.log2(4)) / (1 + 1 / math.log2(3))
    assert got == pytest.approx({"mrr@10": (1 / 3 + 1) / 2,
                                 "ndcg@10": (1 / math.log2(4) + ndcg2) / 2,
                                 "recall@1": 0.5})
    with pytest.raises(UserError, match="no dev query has a relevant document"):
        ranking_metrics([np.array([1.0])], [np.array([False])])


def test_fused_scores_are_the_convex_combination_of_min_max_normalised_scores():
    from electra.evaluation.rerank import fused

    first = {"q": {"a": 10.0, "b": 6.0, "c": 2.0}, "r": {"a": 1.0, "b": 1.0}}
    reranked = {"q": {"a": -1.0, "b": 3.0, "c": 1.0}, "r": {"a": 0.0, "b": 2.0}}
    got = fused(first, reranked, 0.25)
    # q: first (1, 0.5, 0), reranker (0, 1, 0.5); r: first all equal -> 0, reranker (0, 1)
    assert got["q"] == pytest.approx({"a": 0.75, "b": 0.625, "c": 0.125})
    assert got["r"] == pytest.approx({"a": 0.0, "b": 0.25})


def test_groups_and_scored_pairs_are_read_and_refused_in_one_line(tmp_path):
    f = tmp_path / "g.jsonl"
    f.write_text('{"anchor": "q", "positive": "p", "negatives": ["n1", "n2"], '
                 '"scores": [2, 0.5, -1]}\n{"anchor": "r", "positive": "s", '
                 '"negatives": ["n3", "n4"], "scores": [1, 0, 0]}\n')
    got = read_groups(f)
    assert got[0] == Group("q", ["p", "n1", "n2"], [1.0, 0.0, 0.0], [2.0, 0.5, -1.0])
    f.write_text('{"query": "q", "positive": "p", "negative_2": "n2", "negative_1": "n1"}\n')
    assert read_groups(f)[0].docs == ["p", "n1", "n2"]  # negatives in their numbers' order
    f.write_text('{"query": "q", "positive": "p", "negatives": ["a", "b"]}\n'
                 '{"query": "r", "positive": "s", "negatives": ["c"]}\n')
    with pytest.raises(UserError, match="row 2 has 1 negative"):
        read_groups(f)
    p = tmp_path / "p.csv"
    p.write_text("question,passage,score\nq,a,1\nq,b,0\nr,c,0.5\n")
    pairs = read_groups(p)
    assert [(g.query, g.docs, g.targets) for g in by_query(pairs)] == [
        ("q", ["a", "b"], [1.0, 0.0]), ("r", ["c"], [0.5])]
    p.write_text("question,passage,score,label\nq,a,1,x\n")
    with pytest.raises(UserError, match="column 'score' would not be read"):
        read_groups(p)
    assert read_groups(p, "question,passage", "score")[0].targets == [1.0]


def _beir(folder, rows: list[dict], queries: dict[str, str] | None = None) -> None:
    """A BEIR folder of the groups' documents, each query's positive relevant."""
    docs: dict[str, str] = {}
    for r in rows:
        for k, v in r.items():
            if k != "query":
                docs.setdefault(v, f"d{len(docs)}")
    (folder / "qrels").mkdir(parents=True)
    (folder / "corpus.jsonl").write_text("".join(json.dumps({"_id": i, "text": t}) + "\n"
                                                 for t, i in docs.items()))
    qs = queries or {f"q{n}": r["query"] for n, r in enumerate(rows)}
    (folder / "queries.jsonl").write_text("".join(json.dumps({"_id": q, "text": t}) + "\n"
                                                  for q, t in qs.items()))
    (folder / "qrels/test.tsv").write_text("q\td\ts\n" + "".join(
        f"q{n}\t{docs[r['positive']]}\t1\n" for n, r in enumerate(rows)))


def test_a_reranker_learns_exports_as_a_cross_encoder_and_reranks_a_first_stage(data, capsys,
                                                                                 monkeypatch):
    """The dev MRR@10 rises from an untrained model's (lr ~0: chance, about 0.35 over 8
    documents) to above 0.8, and Ctrl-C then --resume ends with the same weights; the
    export loads as sentence-transformers' CrossEncoder whose scores equal `electra
    predict`'s (sigmoid of the logit); `evaluate --task rerank` on a BEIR folder reports
    BM25's and the reranked lists' scores, and reranks an embedding model's first stage;
    the dev file scores the reranker alone."""
    args = ["finetune", "--random-init", "tiny", "--tokenizer", str(data / "tok"), "--task",
            "rerank", "--train", str(data / "train.jsonl"), "--dev", str(data / "dev.jsonl"),
            "--quiet", "--set", "precision=fp32", "--set", "batch_size=16", "--set",
            "max_length=16"]
    assert main([*args, "--set", "epochs=1", "--set", "lr=1e-12", "--out",
                 str(data / "untrained")]) == 0
    assert main([*args, "--set", "epochs=3", "--set", "lr=1e-3", "--out",
                 str(data / "a")]) == 0
    before = json.loads((data / "untrained/results.json").read_text())["median"]["dev"]
    after = json.loads((data / "a/results.json").read_text())["median"]["dev"]
    assert before["mrr@10"] < 0.5 and after["mrr@10"] > 0.8, (before, after)
    # Ctrl-C mid-run, then --resume: the weights of the run that was never stopped
    with monkeypatch.context() as m:
        ctrl_c_in_step(m, 30)
        assert main([*args, "--set", "epochs=3", "--set", "lr=1e-3", "--out",
                     str(data / "b")]) == 130
    assert main([*args, "--set", "epochs=3", "--set", "lr=1e-3", "--out", str(data / "b"),
                 "--resume"]) == 0
    wa, wb = (load_file(data / f"{r}/seed-1/model.safetensors") for r in "ab")
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)
    model = data / "a/seed-1"
    assert json.loads((model / "config.json").read_text())["head"] == "rerank"
    capsys.readouterr()
    # the reranker alone on its dev file: what fine-tuning reported
    assert main(["evaluate", "--model", str(model), "--task", "rerank", "--dev",
                 str(data / "dev.jsonl"), "--quiet"]) == 0
    alone = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert alone["dev"] == pytest.approx(after)
    # two stages on a BEIR folder: BM25's top 5, then the reranker's order of them
    rows = [json.loads(x) for x in (data / "dev.jsonl").read_text().splitlines()]
    _beir(data / "beir", rows)
    assert main(["evaluate", "--model", str(model), "--task", "rerank", "--data",
                 str(data / "beir"), "--split", "test", "--top-k", "5", "--quiet"]) == 0
    got = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["rerank"]
    assert got["first_stage"]["by"] == "bm25" and got["top_k"] == 5
    assert got["pairs"] <= 5 * len(rows) and got["queries"] == len(rows)
    assert 0 < got["first_stage"]["ndcg@10"] <= 1 and got["reranked"]["ndcg@10"] > 0.9
    # the reranked list holds the first stage's documents: the same recall
    assert got["reranked"]["recall@100"] == got["first_stage"]["recall@100"]
    assert electra.rerank(model, data / "beir", top_k=5) == got  # the Python API's
    # fused scores: weight 0 ranks as the first stage, 1 as the reranker
    assert main(["evaluate", "--model", str(model), "--task", "rerank", "--data",
                 str(data / "beir"), "--split", "test", "--top-k", "5", "--fusion",
                 "0,1,0.5", "--quiet"]) == 0
    fused = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["rerank"]["fused"]
    assert [f.pop("weight") for f in fused] == [0.0, 1.0, 0.5]
    assert fused[0] == {k: v for k, v in got["first_stage"].items() if k != "by"}
    assert fused[1] == got["reranked"] and fused[2]["recall@100"] == got["reranked"][
        "recall@100"]
    for bad in ("1.5", "x", "0.2,-1"):
        err = cli_error(capsys, "evaluate", "--model", model, "--task", "rerank", "--data",
                        data / "beir", "--fusion", bad)
        assert f"--fusion {bad}: give the reranker's weight W in [0, 1]" in err
    # an embedding model's first stage (any model: here the reranker's own encoder)
    assert main(["evaluate", "--model", str(model), "--task", "rerank", "--data",
                 str(data / "beir"), "--split", "test", "--top-k", "3", "--first-stage",
                 str(model), "--quiet"]) == 0
    dense = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["rerank"]
    assert dense["first_stage"]["by"] == str(model) and dense["pairs"] == 3 * len(rows)
    # no query shares a word with any document: BM25 finds nothing to rerank
    _beir(data / "apart", rows, {f"q{n}": "zz" for n in range(len(rows))})
    err = cli_error(capsys, "evaluate", "--model", model, "--task", "rerank", "--data",
                    data / "apart", "--split", "test")
    assert "--first-stage bm25: no query has any document in its first stage" in err
    # the export: a CrossEncoder whose scores are ours
    st = pytest.importorskip("sentence_transformers")
    assert main(["export", str(model), "--out", str(data / "hf")]) == 0
    cfg = json.loads((data / "hf/config.json").read_text())
    assert cfg["num_labels"] == 1 if "num_labels" in cfg else len(cfg["id2label"]) == 1
    assert cfg["sentence_transformers"]["activation_fn"].endswith("Sigmoid")
    pairs = [(r["query"], r[k]) for r in rows[:4] for k in ("positive", "negative_1")]
    (data / "pairs.jsonl").write_text("".join(json.dumps({"query": q, "document": d}) + "\n"
                                              for q, d in pairs))
    capsys.readouterr()
    assert main(["predict", "--model", str(model), "--input", str(data / "pairs.jsonl"),
                 "--quiet"]) == 0
    ours = [json.loads(x)["score"] for x in capsys.readouterr().out.strip().splitlines()]
    theirs = st.CrossEncoder(str(data / "hf"), device="cpu").predict(pairs)
    np.testing.assert_allclose(theirs, ours, atol=1e-5)


def test_a_reranker_distilled_from_teacher_scores_exports_its_logits(data, capsys):
    """Groups with a teacher's scores train with mse by default; the export's CrossEncoder
    applies no sigmoid, so its scores are the logits `electra predict` gives."""
    groups(data / "teacher.jsonl", 64, 2, 3, teacher=True)
    assert main(["finetune", "--random-init", "tiny", "--tokenizer", str(data / "tok"),
                 "--task", "rerank", "--train", str(data / "teacher.jsonl"), "--dev",
                 str(data / "dev.jsonl"), "--quiet", "--set", "precision=fp32", "--set",
                 "batch_size=16", "--set", "max_length=16", "--set", "epochs=1", "--out",
                 str(data / "m")]) == 0
    model = data / "m/seed-1"
    meta = json.loads((model / "config.json").read_text())
    assert meta["regression"] is True
    st = pytest.importorskip("sentence_transformers")
    assert main(["export", str(model), "--out", str(data / "hf")]) == 0
    cfg = json.loads((data / "hf/config.json").read_text())
    assert cfg["sentence_transformers"]["activation_fn"].endswith("Identity")
    pairs = [("ba be", "ba be bi"), ("ba be", "mo mu ku")]
    (data / "pairs.csv").write_text("query,document\n" + "".join(f"{q},{d}\n"
                                                                 for q, d in pairs))
    capsys.readouterr()
    assert main(["predict", "--model", str(model), "--input", str(data / "pairs.csv"),
                 "--quiet"]) == 0
    ours = [json.loads(x)["score"] for x in capsys.readouterr().out.strip().splitlines()]
    np.testing.assert_allclose(st.CrossEncoder(str(data / "hf"), device="cpu").predict(pairs),
                               ours, atol=1e-5)
