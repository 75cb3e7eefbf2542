"""SQuAD: reading, windows with a stride and the tokenizer's offsets, best spans, and the
official EM/F1 (1.1 and 2.0) against a from-scratch reimplementation of the official
scripts' rules on a hand-made prediction file."""

from __future__ import annotations

import collections
import importlib.util
import json
import re
import shutil
import string

import numpy as np
import pytest
from helpers import shared_data

from electra.data.tokenizer import load_tokenizer, train_tokenizer
from electra.errors import UserError
from electra.tasks.qa.data import (
    QAExample,
    best_answers,
    qa_features,
    read_squad,
    split_articles,
    squad_scores,
)


# -- the official scripts' rules, written again from their text ---------------------------
def official_normalize(s):
    def remove_articles(text):
        return re.sub(r"\b(a|an|the)\b", " ", text)

    def white_space_fix(text):
        return " ".join(text.split())

    def remove_punc(text):
        exclude = set(string.punctuation)
        return "".join(ch for ch in text if ch not in exclude)

    return white_space_fix(remove_articles(remove_punc(s.lower())))


def official_f1(gold, pred):
    g, p = official_normalize(gold).split(), official_normalize(pred).split()
    if len(g) == 0 or len(p) == 0:
        return int(g == p)
    common = collections.Counter(g) & collections.Counter(p)
    num_same = sum(common.values())
    if num_same == 0:
        return 0
    precision, recall = num_same / len(p), num_same / len(g)
    return (2 * precision * recall) / (precision + recall)


def official_v2(dataset, preds, na_probs):
    has = {}
    exact, f1 = {}, {}
    for qa in dataset:
        qid = qa["id"]
        golds = [a["text"] for a in qa["answers"] if official_normalize(a["text"])] or [""]
        has[qid] = bool(qa["answers"])
        exact[qid] = max(int(official_normalize(g) == official_normalize(preds[qid]))
                         for g in golds)
        f1[qid] = max(official_f1(g, preds[qid]) for g in golds)
    out = {"exact": 100.0 * sum(exact.values()) / len(exact),
           "f1": 100.0 * sum(f1.values()) / len(f1)}
    for name, scores in (("exact", exact), ("f1", f1)):
        num_no_ans = sum(1 for k in has if not has[k])
        cur = best = num_no_ans
        best_thresh = 0.0
        for qid in sorted(na_probs, key=lambda k: na_probs[k]):
            cur += scores[qid] if has[qid] else (-1 if preds[qid] else 0)
            if cur > best:
                best, best_thresh = cur, na_probs[qid]
        out[f"best_{name}"], out[f"best_{name}_thresh"] = 100.0 * best / len(scores), best_thresh
    return out


QAS = [  # (id, gold answers, our answer if it answers, no-answer minus best score)
    ("q1", ["Denver Broncos"], "the Denver Broncos!", -3.0),  # exact after normalisation
    ("q2", ["Santa Clara, California", "Levi's Stadium"], "Levi's Stadium in Santa Clara", -1.0),
    ("q3", ["gold"], "golden anniversary", 0.5),  # no overlap, and > threshold 0: ""
    ("q4", [], "Broncos", 2.0),  # unanswerable, rightly refused
    ("q5", [], "an", -0.5),  # unanswerable, answered with an article only ("" normalised)
    ("q6", [], "Carolina", -2.0),  # unanswerable, wrongly answered
    ("q7", ["24-10", "24–10"], "24 10", 1.5),  # answerable, refused at threshold 0
]


def test_scores_equal_the_official_rules_on_a_hand_made_file():
    examples = [QAExample(q, "?", "ctx", [(t, 0) for t in golds], impossible=not golds)
                for q, golds, _, _ in QAS]
    answers = {q: a for q, _, a, _ in QAS}
    null = {q: n for q, _, _, n in QAS}
    ours = squad_scores(examples, answers, null, threshold=0.0)
    submitted = {q: ("" if null[q] > 0 else a) for q, _, a, _ in QAS}
    dataset = [{"id": q, "answers": [{"text": t} for t in golds]} for q, golds, _, _ in QAS]
    theirs = official_v2(dataset, submitted, null)
    for k, v in theirs.items():
        assert ours[k] == pytest.approx(v), k
    # by hand: exact q1 q4 q5 (q3 and q7 refused: wrong, q6 wrong, q2 partial) = 3/7
    assert ours["exact"] == pytest.approx(100 * 3 / 7)
    f1_q2 = 2 * (2 / 5) * (2 / 2) / (2 / 5 + 1)  # "levi's stadium" in 5 predicted tokens
    assert ours["f1"] == pytest.approx(100 * (1 + f1_q2 + 0 + 1 + 1 + 0 + 0) / 7)
    assert ours["HasAns_total"] == 4 and ours["NoAns_exact"] == pytest.approx(200 / 3)
    # SQuAD 1.1: no thresholds, every question answered
    v1 = squad_scores(examples[:3], answers)
    assert v1["exact"] == pytest.approx(100 / 3) and "best_f1" not in v1


def test_reading_counts_misplaced_answers_and_refuses_training_without_answers(tmp_path):
    ctx = "Super Bowl 50 was played in Santa Clara."
    doc = {"version": "1.1", "data": [{"title": "A", "paragraphs": [{"context": ctx, "qas": [
        {"id": "a", "question": "Where?", "answers": [{"text": "Santa Clara",
                                                        "answer_start": 28}]},
        {"id": "b", "question": "What?", "answers": [{"text": "Super Bowl",
                                                       "answer_start": 3}]}]}]}]}
    (tmp_path / "t.json").write_text(json.dumps(doc))
    got, skipped, version = read_squad(tmp_path / "t.json", training=True)
    assert [e.qid for e in got] == ["a"] and skipped == 1 and version == "1.1"
    doc["data"][0]["paragraphs"][0]["qas"][0]["answers"] = []
    (tmp_path / "u.json").write_text(json.dumps(doc))
    with pytest.raises(UserError, match="question a has no answer"):
        read_squad(tmp_path / "u.json", training=True)
    assert len(read_squad(tmp_path / "u.json", training=False)[0]) == 2


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    root = tmp_path_factory.mktemp("squadtok")
    words = "the a of in was game team season bowl super denver broncos won played field"
    (root / "t.txt").write_text((words + "\n") * 30)
    return train_tokenizer([str(root / "t.txt")], 120, root / "tok")


def test_windows_overlap_by_the_stride_and_offsets_recover_the_answer(tok):
    filler = " ".join(["the game was played in the field"] * 12)
    context = f"{filler} the denver broncos won the super bowl . {filler}"
    start = context.index("denver broncos")
    e = QAExample("q", "who won the super bowl ?", context, [("denver broncos", start)])
    f = qa_features(tok, [e], max_length=64, stride=16, training=True)
    assert len(f["example"]) > 3 and f["input_ids"].shape[1] <= 64
    found = 0
    for w, offs in enumerate(f["offsets"]):
        s, t = int(f["start"][w]), int(f["end"][w])
        if s:
            found += 1
            assert context[offs[s][0] : offs[t][1]] == "denver broncos"
        ctx_tokens = [o for o in offs if o is not None]
        if w + 1 < len(f["offsets"]):  # the next window starts 16 tokens before this ends
            nxt = [o for o in f["offsets"][w + 1] if o is not None]
            assert ctx_tokens[-16:] == nxt[:16]
    assert found >= 1
    long_q = QAExample("q", " ".join(["bowl"] * 100), context, [("denver broncos", start)])
    g = qa_features(tok, [long_q], max_length=128, stride=16, max_query=64)
    assert sum(1 for o in g["offsets"][0] if o is None) == 64 + 3  # question cut to 64


def test_best_span_follows_the_logits_and_the_limits(tok):
    context = "the denver broncos won the super bowl"
    e = QAExample("q", "who won ?", context)
    f = qa_features(tok, [e], max_length=64, stride=16)
    offs = f["offsets"][0]
    pos = {context[o[0]:o[1]]: i for i, o in enumerate(offs) if o is not None}
    T = len(offs)
    s, t = np.zeros((1, T)), np.zeros((1, T))
    s[0, pos["denver"]], t[0, pos["broncos"]] = 5.0, 5.0
    s[0, 0], t[0, 0] = 1.0, 1.0  # [CLS]: no answer
    answers, null = best_answers(s, t, f, [e])
    assert answers == {"q": "denver broncos"} and null["q"] == pytest.approx(2.0 - 10.0)
    t[0, pos["bowl"]] = 9.0  # a longer span scores higher, unless it is too long
    assert best_answers(s, t, f, [e])[0]["q"] == "denver broncos won the super bowl"
    assert best_answers(s, t, f, [e], max_answer=3)[0]["q"] == "denver broncos"


def test_the_shared_dev_set_reads_and_splits_by_article():
    path = shared_data("squad/dev-v1.1.json")
    examples, skipped, version = read_squad(path, training=False)
    assert len(examples) == 10_570 and version == "1.1" and skipped == 0
    train, held = split_articles(examples, 0.5)
    assert {e.title for e in train}.isdisjoint({e.title for e in held})
    assert len({e.title for e in train}) == 24 and len(train) + len(held) == 10_570
    tok = load_tokenizer(shared_data("vocab/bert-base-uncased-vocab.txt"))
    f = qa_features(tok, train[:200], training=True)
    hits = [(i, w) for w, i in enumerate(f["example"]) if f["start"][w] > 0]
    ok = sum(train[i].context[f["offsets"][w][int(f["start"][w])][0]:
                              f["offsets"][w][int(f["end"][w])][1]].lower()
             == train[i].answers[0][0].lower() for i, w in hits)
    assert len({i for i, _ in hits}) == 200 and ok / len(hits) > 0.97


def write_qa(path, n_articles: int, seed: int = 0, impossible: bool = False) -> None:
    """Paragraphs holding one fact ("the city is rome") among filler words; the question asks
    for it. SQuAD 2.0: half the paragraphs state no fact, and their question is unanswerable."""
    import random

    rng = random.Random(seed)
    values = {"color": ["red", "blue", "green"], "city": ["paris", "rome", "oslo"],
              "fruit": ["apple", "pear", "plum"]}
    filler = ["the", "day", "was", "long", "and", "we", "walked", "home", "slowly"]
    articles = []
    for a in range(n_articles):
        paras = []
        for p in range(8):
            key = rng.choice(list(values))
            value = rng.choice(values[key])
            none = impossible and p % 2 == 1
            before = " ".join(rng.choices(filler, k=rng.randint(2, 10)))
            fact = "" if none else f" the {key} is {value} ."
            ctx = f"{before} .{fact} " + " ".join(rng.choices(filler, k=4))
            qa = {"id": f"{a}-{p}", "question": f"what is the {key} ?", "answers": [] if none
                  else [{"text": value, "answer_start": ctx.index(fact) + len(f" the {key} is ")}]}
            if impossible:
                qa["is_impossible"] = none
            paras.append({"context": ctx, "qas": [qa]})
        articles.append({"title": f"article {a}", "paragraphs": paras})
    path.write_text(json.dumps({"version": "v2.0" if impossible else "1.1",
                                "data": articles}))


@pytest.fixture(scope="module")
def qa_run(tmp_path_factory):
    import torch

    from electra.model import Discriminator
    from electra.model.bodies import model_preset
    from electra.saved import folders

    root = tmp_path_factory.mktemp("qa")
    write_qa(root / "v1.json", 30)
    write_qa(root / "v2.json", 30, impossible=True)
    words = "the day was long and we walked home slowly what is ? . color city fruit red " \
            "blue green paris rome oslo apple pear plum"
    (root / "t.txt").write_text((words + "\n") * 20)
    tok = train_tokenizer([str(root / "t.txt")], 120, root / "tok")
    torch.manual_seed(0)
    disc = Discriminator(model_preset("tiny", vocab_size=tok.get_vocab_size(), num_layers=2,
                                      hidden_size=64, num_heads=2, intermediate_size=128,
                                      embedding_size=64, max_position_embeddings=128))
    folders.save(disc, "discriminator", root / "run/discriminator", tok)
    return root


@pytest.mark.parametrize("body", ["modernbert", "deberta"])
def test_a_modern_body_learns_squad(qa_run, tmp_path, body):
    """The same synthetic SQuAD on a ModernBERT body of the same size (every third block
    global, the others a 16-token window: contexts are longer than it) and on a DeBERTa body
    (16 buckets: distances past 8 share log buckets); the DeBERTa model exports as
    DebertaV2ForQuestionAnswering with its start and end logits."""
    import torch

    from electra.model import Discriminator
    from electra.model.bodies import model_preset
    from electra.saved import folders

    tok = load_tokenizer(qa_run / "tok")
    torch.manual_seed(0)
    own = {"local_attention": 16} if body == "modernbert" else {"position_buckets": 16}
    disc = Discriminator(model_preset("tiny", body=body, vocab_size=tok.get_vocab_size(),
                                      num_layers=3, hidden_size=64, num_heads=2,
                                      intermediate_size=128, embedding_size=64,
                                      max_position_embeddings=128, **own))
    folders.save(disc, "discriminator", tmp_path / "run/discriminator", tok)
    shutil.copy(qa_run / "v1.json", tmp_path / "v1.json")
    dev = _finetune_qa(tmp_path, "squad1", "v1.json", "ft")
    assert dev["exact"] >= 90 and dev["total"] == 15 * 8
    if body == "deberta" and importlib.util.find_spec("transformers"):
        from transformers import DebertaV2ForQuestionAnswering

        from electra.cli import main

        assert main(["export", str(tmp_path / "ft/seed-1"), "--out", str(tmp_path / "hf")]) == 0
        hf, info = DebertaV2ForQuestionAnswering.from_pretrained(tmp_path / "hf",
                                                                 output_loading_info=True)
        assert not any(info.values()), info
        ours = folders.load(tmp_path / "ft/seed-1", "classifier")[0].eval()
        ids = torch.randint(5, ours.config.vocab_size, (2, 40))
        with torch.no_grad():
            out = hf.eval()(input_ids=ids, attention_mask=torch.ones_like(ids))
            logits = ours(ids, torch.ones_like(ids))
        torch.testing.assert_close(out.start_logits, logits[..., 0], rtol=0, atol=1e-5)
        torch.testing.assert_close(out.end_logits, logits[..., 1], rtol=0, atol=1e-5)


def _finetune_qa(root, task: str, data: str, out: str) -> dict:
    from electra.cli import main

    assert main(["finetune", "--model", str(root / "run"), "--task", task, "--train",
                 str(root / data), "--dev", str(root / data), "--out", str(root / out),
                 "--quiet", "--set", "article_split=0.5", "--set", "max_length=64", "--set",
                 "doc_stride=16", "--set", "epochs=10", "--set", "lr=3e-3", "--set",
                 "precision=fp32", "--set", "batch_size=16"]) == 0
    return json.loads((root / out / "results.json").read_text())["seeds"]["1"]["dev"]


def test_squad1_learns_and_evaluate_and_export_reproduce_it(qa_run, capsys):
    from electra.cli import main

    dev = _finetune_qa(qa_run, "squad1", "v1.json", "ft1")
    assert dev["exact"] >= 90 and dev["total"] == 15 * 8  # the held-out half of 30 articles
    capsys.readouterr()
    assert main(["evaluate", "--model", str(qa_run / "ft1/seed-1"), "--task", "squad1",
                 "--dev", str(qa_run / "v1.json")]) == 0
    assert json.loads(capsys.readouterr().out)["dev"] == pytest.approx(dev)
    pytest.importorskip("transformers")
    import torch
    from transformers import AutoModelForQuestionAnswering

    from electra.saved import folders

    assert main(["export", str(qa_run / "ft1/seed-1"), "--out", str(qa_run / "hf")]) == 0
    hf, info = AutoModelForQuestionAnswering.from_pretrained(qa_run / "hf",
                                                             output_loading_info=True)
    assert type(hf).__name__ == "ElectraForQuestionAnswering"
    assert not info["missing_keys"] and not info["unexpected_keys"]
    ours = folders.load(qa_run / "ft1/seed-1", "classifier")[0].eval()
    ids = torch.randint(5, ours.config.vocab_size, (2, 20))
    mask, types = torch.ones_like(ids), torch.zeros_like(ids)
    with torch.no_grad():
        out = hf.eval()(input_ids=ids, attention_mask=mask, token_type_ids=types)
        logits = ours(ids, mask, types)
    torch.testing.assert_close(out.start_logits, logits[..., 0], rtol=0, atol=1e-5)
    torch.testing.assert_close(out.end_logits, logits[..., 1], rtol=0, atol=1e-5)


def test_squad2_reports_no_answer_splits_and_thresholds(qa_run):
    dev = _finetune_qa(qa_run, "squad2", "v2.json", "ft2")
    assert dev["HasAns_total"] == dev["NoAns_total"] == 60
    assert dev["best_f1"] >= dev["f1"] and dev["best_exact"] >= dev["exact"]
    assert dev["best_f1"] >= 75  # answers the answerable, refuses the others


def test_predict_answers_questions_as_evaluation_does(qa_run):
    from electra.cli import main

    dev = _finetune_qa(qa_run, "squad1", "v1.json", "ft1p")
    assert main(["predict", "--model", str(qa_run / "ft1p/seed-1"), "--input",
                 str(qa_run / "v1.json"), "--out", str(qa_run / "answers.jsonl"),
                 "--quiet"]) == 0
    got = {r["id"]: r["answer"] for r in map(json.loads, (qa_run / "answers.jsonl")
                                             .read_text().splitlines())}
    held = split_articles(read_squad(qa_run / "v1.json", training=False)[0], 0.5)[1]
    assert squad_scores(held, {e.qid: got[e.qid] for e in held}) == pytest.approx(dev)
