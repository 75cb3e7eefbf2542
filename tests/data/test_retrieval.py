"""Retrieval sets (``electra.data.retrieval``) and their scores (``score_run``): BEIR's
layout and SQuAD's set read as written, bad files refused in one line, and the measures
equal to hand-computed ones on a small run."""

from __future__ import annotations

import json
import math

import pytest
from helpers import cli_error, shared_data, snapshot

from electra.data.retrieval import read_retrieval, squad_retrieval
from electra.errors import UserError

pytrec_eval = pytest.importorskip("pytrec_eval")


def beir(folder, corpus, queries, qrels, split="test"):
    folder.mkdir(parents=True)
    (folder / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in corpus))
    (folder / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in queries))
    (folder / "qrels").mkdir()
    (folder / "qrels" / f"{split}.tsv").write_text(
        "query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{d}\t{s}\n" for q, d, s in qrels))
    return folder


def test_a_beir_folder_is_read_as_written(tmp_path):
    folder = beir(tmp_path / "b", [{"_id": "d1", "title": "Oslo", "text": "a city"},
                                   {"_id": 2, "text": "a river"}],
                  [{"_id": "q1", "text": "where"}, {"_id": "q2", "text": "unjudged"}],
                  [("q1", "d1", 1), ("q1", "2", 0)])
    got = read_retrieval(folder, "test")
    assert got.corpus == {"d1": "Oslo a city", "2": "a river"}  # title + text, BEIR's way
    assert got.queries == {"q1": "where"}  # only judged queries are asked
    assert got.qrels == {"q1": {"d1": 1}}  # a score of 0 is not relevant
    assert read_retrieval(folder, "dev").qrels == got.qrels  # evaluate's default: the only one


def test_squad_becomes_its_questions_against_its_unique_paragraphs():
    path = shared_data("squad") / "dev-v1.1.json"
    got = squad_retrieval(path)
    data = json.loads(path.read_text())["data"]
    contexts = {p["context"] for a in data for p in a["paragraphs"]}
    questions = [q for a in data for p in a["paragraphs"] for q in p["qas"]]
    assert len(got.corpus) == len(contexts) and len(got.queries) == len(questions)
    q = questions[0]
    (doc,) = got.qrels[q["id"]]
    assert got.corpus[doc] == data[0]["paragraphs"][0]["context"]


@pytest.mark.parametrize("case, expect", [
    ("empty corpus", "corpus.jsonl: the corpus is empty"),
    ("unknown document", "test.tsv:2: document 'd9' is not in corpus.jsonl"),
    ("unknown query", "test.tsv:2: query 'q9' is not in queries.jsonl"),
    ("no split", "no qrels/train.tsv; give --split test"),
    ("repeated document", "corpus.jsonl:2: document 'd1' is given twice; give each document "
                          "its own \"_id\""),
    ("repeated query", "queries.jsonl:2: query 'q1' is given twice"),
])
def test_bad_retrieval_sets_are_one_line(case, expect, tmp_path, capsys):
    corpus = [] if case == "empty corpus" else [{"_id": "d1", "text": "a"}] * (
        2 if case == "repeated document" else 1)  # (a second text would replace the first)
    qrels = {"unknown document": [("q1", "d9", 1)], "unknown query": [("q9", "d1", 1)]}.get(
        case, [("q1", "d1", 1)])
    queries = [{"_id": "q1", "text": "a"}] * (2 if case == "repeated query" else 1)
    folder = beir(tmp_path / "b", corpus, queries, qrels)
    with pytest.raises(UserError) as caught:
        read_retrieval(folder, "train" if case == "no split" else "test")
    assert expect in str(caught.value)
    before = snapshot(tmp_path)
    # (the model is read after the data, so any folder will do; a missing one is refused first)
    err = cli_error(capsys, "evaluate", "--model", tmp_path, "--task", "retrieval",
                    "--data", folder, "--split", "train" if case == "no split" else "test")
    assert expect in err and snapshot(tmp_path) == before


def test_the_measures_are_trec_evals_on_a_run_scored_by_hand():
    """nDCG@10, MRR@10 (0 past the 10th document) and Recall@100, each query's by hand."""
    from electra.evaluation.retrieval import score_run

    qrels = {"q1": {"d1": 1}, "q2": {"d3": 1, "d4": 1}, "q3": {"d5": 1}}
    filler = {f"x{i}": 0.5 - i / 100 for i in range(12)}
    run = {"q1": {"d2": 0.9, "d1": 0.8},  # rank 2
           "q2": {"d3": 0.99, **dict(list(filler.items())[:9]), "d4": 0.3},  # ranks 1, 11
           "q3": {**filler, "d5": 0.1}}  # rank 13
    got = score_run(qrels, run)
    ndcg = [1 / math.log2(3), 1 / (1 + 1 / math.log2(3)), 0.0]
    mrr = [0.5, 1.0, 0.0]
    recall = [1.0, 1.0, 1.0]
    assert got == pytest.approx({"ndcg@10": sum(ndcg) / 3, "mrr@10": sum(mrr) / 3,
                                 "recall@100": sum(recall) / 3}, abs=1e-12)
    # a query the run leaves out counts 0
    assert score_run(qrels, {"q1": run["q1"]})["mrr@10"] == pytest.approx(0.5 / 3)


def test_bm25_ranks_as_the_library_scores_and_by_hand():
    """BM25 (bm25s): every score our search returns is the library's own score of that
    document (``get_scores``), in its order; a query's one rare word puts the one document
    holding it first; k <= 0 and an empty corpus are one line each."""
    bm25s = pytest.importorskip("bm25s")
    import numpy as np

    from electra.evaluation.bm25 import BM25

    corpus = {"d1": "the river flows past the old mill", "d2": "a glacier carved the fjord",
              "d3": "the mill grinds grain by the river", "d4": "grain prices rose in autumn"}
    queries = {"q1": "fjord", "q2": "river mill", "q3": "grain"}
    index = BM25(corpus)
    run = index.search(queries, k=3)
    own = bm25s.BM25()
    own.index(bm25s.tokenize(list(corpus.values()), stopwords="en", show_progress=False),
              show_progress=False)
    for q, text in queries.items():
        tokens = bm25s.tokenize([text], stopwords="en", return_ids=False,
                                show_progress=False)[0]
        expected = own.get_scores(tokens)
        for d, s in run[q].items():
            assert s == pytest.approx(float(expected[list(corpus).index(d)]), rel=1e-6)
        assert list(run[q]) == sorted(run[q], key=lambda d: -run[q][d])
        assert len(run[q]) == int(np.count_nonzero(expected > 0)) or len(run[q]) == 3
    assert list(run["q1"]) == ["d2"]  # only d2 holds "fjord"
    assert set(run["q2"]) == {"d1", "d3"} and set(run["q3"]) == {"d3", "d4"}
    # words of one letter are no BM25 terms: a corpus of them ranks nothing, without error
    assert BM25({"d1": "a a", "d2": "b"}).search({"q": "a"}) == {"q": {}}
    with pytest.raises(UserError, match="k=0; give how many"):
        index.search(queries, k=0)
    with pytest.raises(UserError, match="the corpus is empty"):
        BM25({})
