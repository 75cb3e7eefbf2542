"""`electra mine` (issue 72): hard negatives from BM25 or a model's embeddings, with
sentence-transformers' controls (skip the top n, a margin or ratio to the positive's score,
how many, duplicates and relevant documents out), written as the groups `finetune --task
rerank` reads; a --corpus file streamed in chunks gives what the whole corpus at once gives;
bad controls one line each."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from helpers import cli_error, make_run, snapshot

import electra
from electra.cli import main
from electra.commands import mine as mining
from electra.evaluation.bm25 import BM25
from electra.tasks.rerank.data import read_groups

pytest.importorskip("bm25s")

CORPUS = {"d1": "the river flows past the old mill", "d2": "a glacier carved the fjord",
          "d3": "the mill grinds grain by the river", "d4": "grain prices rose in autumn",
          "d5": "the river mill grinds grain", "d6": "autumn leaves on the river",
          "d7": "the river flows past the old mill"}  # d7: d1's text again


def beir(folder, qrels: dict[str, list[str]], queries: dict[str, str]) -> None:
    (folder / "qrels").mkdir(parents=True)
    (folder / "corpus.jsonl").write_text("".join(json.dumps({"_id": d, "text": t}) + "\n"
                                                 for d, t in CORPUS.items()))
    (folder / "queries.jsonl").write_text("".join(json.dumps({"_id": q, "text": t}) + "\n"
                                                  for q, t in queries.items()))
    (folder / "qrels/test.tsv").write_text("q\td\ts\n" + "".join(
        f"{q}\t{d}\t1\n" for q, docs in qrels.items() for d in docs))


def rows(path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def test_bm25_negatives_follow_the_controls(tmp_path, capsys):
    """The negatives are the query's best BM25 candidates in order, never a relevant
    document nor a copy of the positive's text, after --skip-top; --max-ratio and --margin
    drop those scoring too near the positive; a query left with too few is left out and
    said; every format writes the same choice."""
    beir(tmp_path / "b", {"q1": ["d1"], "q2": ["d4"]},
         {"q1": "river mill", "q2": "grain autumn prices"})
    index = BM25(CORPUS)
    ranked = index.search({"q1": "river mill"}, 10)["q1"]
    assert main(["mine", "--data", str(tmp_path / "b"), "--out", str(tmp_path / "g.jsonl"),
                 "--negatives", "2", "--quiet"]) == 0
    got = rows(tmp_path / "g.jsonl")
    expected = [CORPUS[d] for d in ranked if d not in ("d1", "d7")][:2]  # d7: d1's copy
    assert got[0] == {"query": "river mill", "positive": CORPUS["d1"],
                      "negative_1": expected[0], "negative_2": expected[1]}
    assert next(g.docs for g in read_groups(tmp_path / "g.jsonl")) == [CORPUS["d1"], *expected]
    # --skip-top 2 drops the two best candidates (the positive and its copy here)
    assert main(["mine", "--data", str(tmp_path / "b"), "--out", str(tmp_path / "s.jsonl"),
                 "--negatives", "1", "--skip-top", "2", "--quiet"]) == 0
    skipped = next(d for d in list(ranked)[2:] if d not in ("d1", "d7"))
    assert rows(tmp_path / "s.jsonl")[0]["negative_1"] == CORPUS[skipped]
    # --max-ratio: at most 0.5 of the positive's score
    pos = index.score("river mill", "d1")
    keep = [d for d, s in ranked.items() if d not in ("d1", "d7") and s <= 0.5 * pos]
    capsys.readouterr()
    assert main(["mine", "--data", str(tmp_path / "b"), "--out", str(tmp_path / "r.jsonl"),
                 "--negatives", str(len(keep)), "--max-ratio", "0.5", "--quiet"]) == 0
    assert [rows(tmp_path / "r.jsonl")[0][f"negative_{i + 1}"] for i in range(len(keep))] \
        == [CORPUS[d] for d in keep]
    assert "queries had fewer than" in capsys.readouterr().err or len(rows(
        tmp_path / "r.jsonl")) == 2
    # --margin larger than any score: no negative passes anywhere: one line, no file
    err = cli_error(capsys, "mine", "--data", tmp_path / "b", "--out", tmp_path / "m.jsonl",
                    "--margin", "1000")
    assert "no query has 7 negative(s) that pass the controls" in err
    assert not (tmp_path / "m.jsonl").exists()
    # triplets and labelled pairs hold the same negatives
    for fmt in ("triplets", "pairs"):
        assert main(["mine", "--data", str(tmp_path / "b"), "--out",
                     str(tmp_path / f"{fmt}.jsonl"), "--negatives", "2", "--format", fmt,
                     "--quiet"]) == 0
    assert [r["negative"] for r in rows(tmp_path / "triplets.jsonl")][:2] == expected
    pairs = rows(tmp_path / "pairs.jsonl")
    assert [(r["document"], r["label"]) for r in pairs[:3]] == [
        (CORPUS["d1"], 1), (expected[0], 0), (expected[1], 0)]


def test_a_streamed_corpus_mines_what_the_whole_corpus_mines(tmp_path, monkeypatch):
    """A pairs file with a --corpus read two documents at a time gives the BM25 negatives
    the whole corpus gives; a model's negatives are its best cosines (electra.encode's,
    ranked by hand; within 1e-5: a text's embedding depends on the batch it is padded in);
    each query's best candidates merged chunk by chunk are torch.topk's of the whole."""
    (tmp_path / "pairs.csv").write_text("query,positive\nriver mill,the river flows past the "
                                        "old mill\ngrain prices,grain prices rose in autumn\n")
    (tmp_path / "corpus.jsonl").write_text("".join(json.dumps({"_id": d, "text": t}) + "\n"
                                                   for d, t in CORPUS.items()))
    outs = []
    for chunk in (10_000, 2):
        monkeypatch.setattr(mining, "CHUNK", chunk)
        out = tmp_path / f"{chunk}.jsonl"
        assert main(["mine", "--data", str(tmp_path / "pairs.csv"), "--corpus",
                     str(tmp_path / "corpus.jsonl"), "--out", str(out), "--negatives", "2",
                     "--quiet"]) == 0
        outs.append(rows(out))
    assert outs[0] == outs[1] and len(outs[0]) == 2
    run, _ = make_run(tmp_path, "tiny")
    assert main(["mine", "--data", str(tmp_path / "pairs.csv"), "--corpus",
                 str(tmp_path / "corpus.jsonl"), "--out", str(tmp_path / "m.jsonl"), "--by",
                 str(run), "--negatives", "3", "--quiet"]) == 0
    got = rows(tmp_path / "m.jsonl")[0]
    texts = list(dict.fromkeys(t for t in CORPUS.values() if t != got["positive"]))
    cos = (electra.encode(run, ["river mill"]) @ electra.encode(run, texts).T)[0]
    mine_cos = sorted((cos[texts.index(got[f"negative_{i + 1}"])] for i in range(3)),
                      reverse=True)
    np.testing.assert_allclose(mine_cos, np.sort(cos)[::-1][:3], atol=1e-5)
    g = torch.Generator().manual_seed(0)
    scores, ids = torch.randn(3, 11, generator=g), [f"d{i}" for i in range(11)]
    cand = mining.Candidates(3, 4)
    for start in range(0, 11, 3):
        cand.add(scores[:, start:start + 3], ids[start:start + 3])
    top, index = scores.topk(4, dim=1)
    assert torch.equal(cand.scores, top)
    assert cand.ids == [[ids[i] for i in row] for row in index.tolist()]


@pytest.mark.parametrize("flags, words", [
    (("--negatives", "0"), "--negatives 0: give how many negatives a query to write"),
    (("--max-ratio", "2"), "--max-ratio 2: give a number in (0, 1]"),
    (("--range", "3"), "--range 3: the candidates a query must be at least --negatives 7"),
    (("--skip-top", "-1"), "--skip-top -1: give 0 or more"),
    (("--margin", "-1"), "--margin -1: give 0 or more"),
    (("--corpus", "{t}/c.txt"), "--data {t}/b is a retrieval set with its own corpus"),
])
def test_bad_mining_controls_are_one_line(tmp_path, capsys, flags, words):
    beir(tmp_path / "b", {"q1": ["d1"]}, {"q1": "river mill"})
    (tmp_path / "c.txt").write_text("a\n")
    before = snapshot(tmp_path)
    flags = tuple(f.replace("{t}", str(tmp_path)) for f in flags)
    err = cli_error(capsys, "mine", "--data", tmp_path / "b", "--out", tmp_path / "x.jsonl",
                    *flags)
    assert words.replace("{t}", str(tmp_path)) in err, err
    assert snapshot(tmp_path) == before


def test_a_margin_by_bm25_needs_the_positives_in_the_corpus(tmp_path, capsys):
    (tmp_path / "pairs.csv").write_text("query,positive\nriver mill,a text of its own\n")
    (tmp_path / "c.txt").write_text("\n".join(CORPUS.values()) + "\n")
    err = cli_error(capsys, "mine", "--data", tmp_path / "pairs.csv", "--corpus",
                    tmp_path / "c.txt", "--out", tmp_path / "x.jsonl", "--margin", "0.1")
    assert "the positive 'a text of its own' is not in --corpus" in err
