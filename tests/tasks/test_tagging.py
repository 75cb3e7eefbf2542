"""Token tagging: the three file forms, labels on first pieces, entity and word metrics,
learning a tagging task, evaluate == finetune, transformers' ElectraForTokenClassification."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import torch
from helpers import shared_data

from electra.cli import main
from electra.data.tokenizer import train_tokenizer
from electra.model import Discriminator
from electra.model.bodies import model_preset
from electra.saved import folders
from electra.tasks.tagging.data import (
    IGNORE,
    Sentence,
    encode_tagged,
    is_entity_scheme,
    read_tagged,
    score,
    tag_map,
    word_predictions,
)

CONLLU = """# sent_id = 1
# text = I can't go.
1\tI\tI\tPRON\tPRP\t_\t3\tnsubj\t_\t_
2-3\tcan't\t_\t_\t_\t_\t_\t_\t_\t_
2\tca\tcan\tAUX\tMD\t_\t4\taux\t_\t_
3\tn't\tnot\tPART\tRB\t_\t4\tadvmod\t_\t_
4\tgo\tgo\tVERB\tVB\t_\t0\troot\t_\t_
4.1\tgone\tgo\tVERB\tVBN\t_\t_\t_\t_\t_
5\t.\t.\tPUNCT\t.\t_\t4\tpunct\t_\t_

1\tYes\tyes\tINTJ\tUH\t_\t0\troot\t_\t_
"""


def test_conllu_skips_ranges_empty_nodes_and_comments(tmp_path):
    (tmp_path / "a.conllu").write_text(CONLLU)
    upos = read_tagged(tmp_path / "a.conllu")
    assert [s.words for s in upos] == [["I", "ca", "n't", "go", "."], ["Yes"]]
    assert upos[0].tags == ["PRON", "AUX", "PART", "VERB", "PUNCT"]
    assert read_tagged(tmp_path / "a.conllu", "xpos")[0].tags == ["PRP", "MD", "RB", "VB", "."]


def test_conll_sentences_end_at_blank_or_whitespace_lines(tmp_path):
    # WNUT-17's train separates most sentences with a lone tab; CoNLL-2003 has -DOCSTART-
    (tmp_path / "a.conll").write_text("-DOCSTART- O\n\nAlice\tB-PER\nruns\tO\n\t\n"
                                      "in Paris B-LOC\n".replace("in Paris B-LOC",
                                                                  "in\tO\nParis\tB-LOC"))
    got = read_tagged(tmp_path / "a.conll")
    assert [(s.words, s.tags) for s in got] == [(["Alice", "runs"], ["B-PER", "O"]),
                                                (["in", "Paris"], ["O", "B-LOC"])]
    (tmp_path / "b.jsonl").write_text(json.dumps({"tokens": ["a", "b"], "tags": ["X", "Y"]})
                                      + "\n")
    assert read_tagged(tmp_path / "b.jsonl")[0].tags == ["X", "Y"]


def test_labels_sit_on_each_words_first_piece(tmp_path):
    text = tmp_path / "t.txt"
    rng = random.Random(0)
    text.write_text("\n".join(" ".join("".join(rng.choice("abc") for _ in range(
        rng.randint(1, 4))) for _ in range(8)) for _ in range(200)))
    tok = train_tokenizer([str(text)], 64, tmp_path / "tok")
    words = ["abcabcacb", "b", "cabbacab", "a"]  # long words: several pieces each
    labels = {"O": 0, "X": 1}
    enc = encode_tagged(tok, [Sentence(words, ["X", "O", "X", "O"])], 64, labels)
    e = tok.encode(words, is_pretokenized=True)
    starts = [e.word_ids.index(w) for w in range(4)]
    assert enc["first"][0].tolist() == starts and e.word_ids.count(0) > 1
    expected = [IGNORE] * len(e.ids)
    for w, tag in enumerate(["X", "O", "X", "O"]):
        expected[starts[w]] = labels[tag]
    assert enc["labels"][0].tolist() == expected
    # a word beyond max_length has no first piece, and is predicted as the fallback
    cut = encode_tagged(tok, [Sentence(words, ["X", "O", "X", "O"])], starts[3], labels)
    assert cut["first"][0, 3] == -1 and (cut["labels"][0] != IGNORE).sum() == 3
    logits = torch.zeros(1, cut["input_ids"].shape[1], 2)
    logits[..., 1] = 1.0  # every piece says X
    assert word_predictions(logits, cut["first"], [4], fallback=0) == [[1, 1, 1, 0]]


def test_entity_and_word_metrics_by_hand():
    gold = [["B-PER", "I-PER", "O", "B-LOC"], ["O", "B-ORG", "I-ORG"]]
    pred = [["B-PER", "I-PER", "O", "O"], ["O", "B-ORG", "O"]]
    # entities: gold PER, LOC, ORG(2 words); predicted PER (right), ORG(1 word, wrong span)
    got = score(("f1", "precision", "recall", "accuracy"), pred, gold)
    assert got["precision"] == pytest.approx(1 / 2) and got["recall"] == pytest.approx(1 / 3)
    assert got["f1"] == pytest.approx(2 * (1 / 2) * (1 / 3) / (1 / 2 + 1 / 3))
    assert got["accuracy"] == pytest.approx(5 / 7)
    # BIOES is scored strictly: an S- entity must be exactly one word
    bioes = score(("f1",), [["S-PER", "O"]], [["B-PER", "E-PER"]])
    assert bioes["f1"] == 0.0
    assert is_entity_scheme({"O": 0, "B-X": 1, "I-X": 2}) and not is_entity_scheme(["NOUN",
                                                                                       "VERB"])
    with pytest.raises(Exception, match="dev tags 'Z' never occur"):
        tag_map([Sentence(["a", "b"], ["X", "Y"])], [Sentence(["c"], ["Z"])])


def write_ner(path: Path, n: int, seed: int) -> None:
    """Names (B-PER, I-PER for a surname) among words tagged O, in CoNLL form."""
    rng = random.Random(seed)
    names, other = ["alice", "bob", "carol", "dave"], ["the", "cat", "runs", "sees", "a",
                                                        "dog", "tree"]
    lines = []
    for _ in range(n):
        for _ in range(rng.randint(2, 6)):
            if rng.random() < 0.3:
                lines.append(f"{rng.choice(names)}\tB-PER")
                if rng.random() < 0.5:
                    lines.append("smith\tI-PER")
            else:
                lines.append(f"{rng.choice(other)}\tO")
        lines.append("")
    path.write_text("\n".join(lines) + "\n")


@pytest.fixture(scope="module")
def tagged(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("tagging")
    write_ner(root / "train.conll", 200, 0)
    write_ner(root / "dev.conll", 40, 1)
    text = root / "text.txt"
    text.write_text("alice bob carol dave smith the cat runs sees a dog tree\n" * 20)
    tok = train_tokenizer([str(text)], 64, root / "tok")
    torch.manual_seed(0)
    disc = Discriminator(model_preset("tiny", vocab_size=tok.get_vocab_size(), num_layers=1,
                                      hidden_size=32, num_heads=2, intermediate_size=64,
                                      embedding_size=32))
    folders.save(disc, "discriminator", root / "run/discriminator", tok)
    args = ["finetune", "--model", str(root / "run"), "--task", "tagging", "--train",
            str(root / "train.conll"), "--dev", str(root / "dev.conll"), "--out",
            str(root / "ft"), "--quiet", "--set", "epochs=4", "--set", "lr=3e-3",
            "--set", "precision=fp32", "--set", "batch_size=16"]
    assert main(args) == 0
    return root


def test_learns_a_tagging_task_and_evaluate_reproduces_it(tagged, capsys):
    results = json.loads((tagged / "ft/results.json").read_text())
    dev = results["seeds"]["1"]["dev"]
    assert dev["f1"] >= 0.95 and dev["accuracy"] >= 0.95
    meta = json.loads((tagged / "ft/seed-1/config.json").read_text())
    assert meta["head"] == "tagging" and meta["labels"] == {"B-PER": 0, "I-PER": 1, "O": 2}
    capsys.readouterr()
    assert main(["evaluate", "--model", str(tagged / "ft/seed-1"), "--task", "tagging",
                 "--dev", str(tagged / "dev.conll")]) == 0
    assert json.loads(capsys.readouterr().out)["dev"] == pytest.approx(dev)


def test_a_tagger_exports_to_electra_for_token_classification(tagged):
    pytest.importorskip("transformers")
    from transformers import AutoModelForTokenClassification

    assert main(["export", str(tagged / "ft/seed-1"), "--out", str(tagged / "hf")]) == 0
    hf, info = AutoModelForTokenClassification.from_pretrained(tagged / "hf",
                                                               output_loading_info=True)
    assert type(hf).__name__ == "ElectraForTokenClassification"
    assert not info["missing_keys"] and not info["unexpected_keys"]
    assert hf.config.id2label == {0: "B-PER", 1: "I-PER", 2: "O"}
    ours = folders.load(tagged / "ft/seed-1", "classifier")[0].eval()
    ids = torch.randint(5, ours.config.vocab_size, (3, 11))
    mask, types = torch.ones_like(ids), torch.zeros_like(ids)
    with torch.no_grad():
        torch.testing.assert_close(hf.eval()(input_ids=ids, attention_mask=mask,
                                             token_type_ids=types).logits,
                                   ours(ids, mask, types), rtol=0, atol=1e-5)


def test_the_shared_ud_and_wnut_files_read_as_documented():
    ud = shared_data("ud-english-ewt")
    train = read_tagged(ud / "en_ewt-ud-train.conllu")
    assert len(train) == 12_544
    assert {"NOUN", "VERB", "PROPN"} <= {t for s in train for t in s.tags}
    wnut = shared_data("wnut17")
    sents = read_tagged(wnut / "wnut17train.conll")
    assert len(sents) == 3_394 and is_entity_scheme({t for s in sents for t in s.tags})


def test_predict_tags_a_file_as_evaluation_does(tagged, capsys):
    assert main(["predict", "--model", str(tagged / "ft/seed-1"), "--input",
                 str(tagged / "dev.conll"), "--out", str(tagged / "pred.jsonl"), "--quiet"]) == 0
    records = [json.loads(line) for line in (tagged / "pred.jsonl").read_text().splitlines()]
    gold = read_tagged(tagged / "dev.conll")
    assert [r["tokens"] for r in records] == [s.words for s in gold]
    got = score(("f1", "accuracy"), [r["tags"] for r in records], [s.tags for s in gold])
    dev = json.loads((tagged / "ft/results.json").read_text())["seeds"]["1"]["dev"]
    assert got == pytest.approx({k: dev[k] for k in got})
    (tagged / "words.txt").write_text("alice smith runs\n\nbob sees a dog\n")
    capsys.readouterr()
    assert main(["predict", "--model", str(tagged / "ft/seed-1"), "--input",
                 str(tagged / "words.txt"), "--quiet"]) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert [r["tokens"] for r in lines] == [["alice", "smith", "runs"], ["bob", "sees", "a",
                                                                          "dog"]]
