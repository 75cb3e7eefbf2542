"""The one label rule (electra.data.labels) in every reader: spaces stripped, booleans and
integral numbers in one form with one note per file, control characters and non-scalar
values refused naming the row."""

from __future__ import annotations

import json

import pytest

from electra.data.labels import canonical_label
from electra.errors import UserError


@pytest.mark.parametrize("value, name", [
    ("1", "1"), ("1.0", "1"), (1.0, "1"), (1, "1"), ("1e0", "1"), (" 0.0 ", "0"), (-0.0, "0"),
    (True, "true"), ("True", "true"), (" TRUE", "true"), (False, "false"), ("false", "false"),
    ("0.5", "0.5"), ("pos", "pos"), ("Pos", "Pos"), ("entailment", "entailment"),
    ("1e400", "1e400"), ("nan", "nan"), ("B-PER", "B-PER")])
def test_one_form_per_class(value, name):
    assert canonical_label(value, "f: row 1") == name


@pytest.mark.parametrize("value, words", [
    ("1\x07", "holds the control character U+0007"), ("a\u200bb", "U+200B"),
    ("", "is empty"), ("  ", "is empty"), ([1], "is list, not text"),
    ({"a": 1}, "is dict, not text"), (None, "is NoneType")])
def test_what_cannot_be_a_class_is_refused_naming_the_row(value, words):
    with pytest.raises(UserError, match="f: row 3") as err:
        canonical_label(value, "f: row 3")
    assert words in str(err.value)


def test_a_csv_as_pandas_writes_it_is_two_classes_with_one_note(tmp_path, capsys):
    from electra.data.examples import label_map, read_custom

    (tmp_path / "t.csv").write_text("text,label\na,1\nb,1.0\nc,0\nd,0.0\ne,1\n")
    examples = read_custom(tmp_path / "t.csv", ["text"], "label")
    assert label_map(examples) == {"0": 0, "1": 1}
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "'0' and '0.0' as '0'; '1' and '1.0' as '1'" in err, err


def test_jsonl_booleans_and_their_strings_are_one_class(tmp_path, capsys):
    from electra.data.examples import label_map, read_custom

    rows = [("a", True), ("b", "true"), ("c", False), ("d", "false"), ("e", "True")]
    (tmp_path / "t.jsonl").write_text("".join(json.dumps({"text": t, "label": y}) + "\n"
                                              for t, y in rows))
    assert label_map(read_custom(tmp_path / "t.jsonl", ["text"], "label")) == {
        "false": 0, "true": 1}
    assert "as one class" in capsys.readouterr().err


def test_a_control_character_is_refused_in_every_format(tmp_path):
    from electra.data.examples import read_custom
    from electra.tasks.tagging.data import read_tagged

    (tmp_path / "t.csv").write_text("text,label\na,1\nb,1\x07\n")
    with pytest.raises(UserError, match=r"t.csv: row 2: label \('label'\) '1\\x07' holds"):
        read_custom(tmp_path / "t.csv", ["text"], "label")
    (tmp_path / "t.conll").write_text("alice\tB-PER\x07\nruns\tO\n")
    with pytest.raises(UserError, match=r"t.conll:1: tag 'B-PER\\x07' holds"):
        read_tagged(tmp_path / "t.conll")
    (tmp_path / "t.jsonl").write_text(json.dumps({"text": "a", "label": ["x"]}) + "\n")
    with pytest.raises(UserError, match=r"t.jsonl: row 1: label .* is list"):
        read_custom(tmp_path / "t.jsonl", ["text"], "label")


def test_superglue_reads_a_boolean_written_as_text(tmp_path):
    from electra.tasks.superglue.data import SUPERGLUE, read_split

    rows = [{"question": "q", "passage": "p", "label": v, "idx": i}
            for i, v in enumerate([True, "True", "false", False])]
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    got = [r.label for r in read_split(SUPERGLUE["boolq"], tmp_path, "train")]
    assert got == ["true", "true", "false", "false"]


def test_a_model_fine_tuned_before_the_rule_still_scores_its_labels():
    from electra.data.examples import Example
    from electra.tasks.base import TaskData
    from electra.tasks.sequence.head import Sequence

    data = TaskData("custom", [], {"dev": [Example("a", None, "true"),
                                           Example("b", None, "1")]}, ("accuracy",), False,
                    head=Sequence())
    scored = Sequence().for_model(data, {"labels": {"True": 0, "1.0": 1}}, None, "m")
    assert [e.label for e in scored.dev["dev"]] == ["True", "1.0"]


def test_a_collapsed_classifier_is_flagged_and_a_skewed_split_is_not():
    """1,992 of 2,000 predictions one class on a balanced split: flagged; the same on a
    split where that class really is 99.5% of the labels: not; every prediction one class:
    flagged as before."""
    import numpy as np

    from electra.tasks.base import confusion

    names = {0: "neg", 1: "pos"}
    labels = np.array([0, 1] * 1000)
    preds = np.array([1] * 1992 + [0] * 8)
    warnings, _ = confusion(preds, labels, names, "dev")
    assert warnings == ["dev: nearly every prediction is 'pos' (1,992 of 2,000, 99.6%; 50.0% "
                        "of dev is 'pos')"]
    skewed = np.array([1] * 1990 + [0] * 10)
    assert confusion(preds, skewed, names, "dev")[0] == []
    assert confusion(np.ones(10, int), labels[:10], names, "dev")[0] == [
        "dev: every prediction is 'pos' (50.0% of dev is 'pos')"]
    assert confusion(np.array([0, 1] * 50), labels[:100], names, "dev")[0] == []


def test_evaluate_reads_the_columns_the_model_was_fine_tuned_on(tmp_path, capsys):
    """A model fine-tuned with --text-columns sentence is evaluated on a file with that
    column without naming it again (it said: no column 'text'), and predict agrees."""
    from helpers import write_sentiment

    from electra.cli import main
    from electra.data.tokenizer import train_tokenizer

    for name, n, seed in (("train", 64, 0), ("dev", 16, 1)):
        write_sentiment(tmp_path / f"{name}.csv", n, seed)
        text = (tmp_path / f"{name}.csv").read_text().replace("text,label", "sentence,label",
                                                                   1)
        (tmp_path / f"{name}.csv").write_text(text)
    train_tokenizer([str(tmp_path / "train.csv")], 100, tmp_path / "tok")
    assert main(["finetune", "--random-init", "tiny", "--tokenizer", str(tmp_path / "tok"),
                 "--task", "custom", "--train", str(tmp_path / "train.csv"), "--dev",
                 str(tmp_path / "dev.csv"), "--text-columns", "sentence", "--set", "epochs=1",
                 "--set", "precision=fp32", "--quiet", "--out", str(tmp_path / "ft")]) == 0
    scored = json.loads((tmp_path / "ft/results.json").read_text())["seeds"]["1"]
    capsys.readouterr()
    assert main(["evaluate", "--model", str(tmp_path / "ft/seed-1"), "--task", "custom",
                 "--dev", str(tmp_path / "dev.csv")]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1]) == scored
