"""Fine-tuning data: GLUE readers on the official files, custom files, and metrics."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest
import torch
from helpers import shared_data

from electra.data.examples import compute_metrics, label_map, read_custom
from electra.errors import UserError
from electra.tasks.sequence.data import glue_task, read_glue

OFFICIAL = [  # task, folder, train rows, dev rows, test rows
    ("cola", "CoLA", 8551, 1043, 1063),
    ("sst2", "SST-2", 67349, 872, 1821),
    ("mrpc", "MRPC", 3668, 408, 1725),
    ("stsb", "STS-B", 5749, 1500, 1379),
    ("rte", "RTE", 2490, 277, 3000),
    ("wnli", "WNLI", 635, 71, 146),
]


@pytest.mark.parametrize("task, folder, n_train, n_dev, n_test", OFFICIAL)
def test_glue_readers_give_the_official_row_counts(task, folder, n_train, n_dev, n_test):
    path = shared_data(f"glue/{folder}")
    train, dev = read_glue(task, path, "train"), read_glue(task, path, "dev")
    assert (len(train), len(dev), len(read_glue(task, path, "test"))) == (
        n_train, n_dev, n_test)
    spec = glue_task(task)
    if spec.is_regression:
        assert all(0.0 <= e.label <= 5.0 for e in train + dev)
    else:
        assert {e.label for e in train} == set(spec.labels)
        assert label_map(train, dev) == {label: i for i, label in enumerate(spec.labels)}
    pair = spec.text[-1] != spec.text[0] and len(spec.text) == 2
    assert all((e.text_b is not None) == pair for e in dev)


def test_glue_quirks_on_the_real_files():
    cola = read_glue("cola", shared_data("glue/CoLA"), "dev")
    assert cola[0].text_a == "The sailors rode the breeze clear of the rocks."  # no header
    assert cola[-1].text_a  # the last row has no trailing newline
    mrpc = read_glue("mrpc", shared_data("glue/MRPC"), "dev")
    assert mrpc[0].label == "1" and mrpc[0].text_a.startswith("He said the foodservice")
    assert len(read_glue("qnli", shared_data("glue/QNLI"), "dev")) == 5463


def test_mnli_and_qqp_formats(tmp_path):
    mnli = tmp_path / "MNLI"
    mnli.mkdir()
    head = ("index\tpromptID\tpairID\tgenre\tsentence1_binary_parse\tsentence2_binary_parse\t"
            "sentence1_parse\tsentence2_parse\tsentence1\tsentence2\tlabel1\tgold_label\n")
    row = "0\t1\t1e\tfiction\t( a )\t( b )\t(ROOT a)\t(ROOT b)\tA man sleeps.\tA man rests.\t" \
          "entailment\tentailment\n"
    for name in ("train.tsv", "dev_matched.tsv", "dev_mismatched.tsv"):
        (mnli / name).write_text(head + row + row.replace("entailment", "neutral"))
    assert [e.label for e in read_glue("mnli", mnli, "dev_mismatched")] == ["entailment",
                                                                           "neutral"]
    assert read_glue("mnli", mnli, "dev_matched")[0].text_b == "A man rests."
    with pytest.raises(UserError, match="dev_matched, dev_mismatched"):
        read_glue("mnli", mnli, "dev")
    qqp = tmp_path / "QQP"
    qqp.mkdir()
    (qqp / "train.tsv").write_text("id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n"
                                   "1\t1\t2\tHow?\tWhy?\t0\n"
                                   "2\t3\t4\tbroken row\n"  # malformed: skipped, as GLUE does
                                   "3\t5\t6\tWho?\tWho is?\t1\n")
    assert [e.label for e in read_glue("qqp", qqp, "train")] == ["0", "1"]


def test_metrics_against_hand_computed_values():
    preds, labels = [1, 1, 0, 0, 1], [1, 0, 0, 1, 1]
    # tp=2 fp=1 fn=1 tn=1: accuracy 3/5, F1 = 2*2/(2*2+1+1), MCC = (2*1-1*1)/sqrt(3*3*2*2)
    m = compute_metrics(("accuracy", "f1", "mcc"), preds, labels)
    assert m["accuracy"] == pytest.approx(0.6)
    assert m["f1"] == pytest.approx(2 / 3)
    assert m["mcc"] == pytest.approx(1 / 6)
    r = compute_metrics(("pearson", "spearman"), [1.0, 2.0, 3.0, 4.0], [1.0, 2.0, 4.0, 3.0])
    # spearman: rank differences (0,0,1,-1) -> 1 - 6*2/(4*15) = 0.8
    assert r["spearman"] == pytest.approx(0.8)
    x, y = [1, 2, 3, 4], [1, 2, 4, 3]
    mx, my = 2.5, 2.5
    cov = sum((a - mx) * (b - my) for a, b in zip(x, y, strict=True))
    expected = cov / math.sqrt(sum((a - mx) ** 2 for a in x) * sum((b - my) ** 2 for b in y))
    assert r["pearson"] == pytest.approx(expected)


def test_metrics_are_scikit_learns():
    """Accuracy, F1, MCC and the report's confusion matrix are computed without scikit-learn
    (its import costs a short fine-tune 2-3 s): each equals scikit-learn's on random inputs
    and on the degenerate ones (one class predicted, one class labelled, nothing positive)."""
    import warnings

    from sklearn.metrics import accuracy_score, confusion_matrix, f1_score, matthews_corrcoef

    from electra.data.examples import confusion_counts

    rng = np.random.default_rng(0)
    cases = [(rng.integers(c, size=n), rng.integers(c, size=n))
             for n, c in ((1, 2), (97, 2), (1000, 3), (408, 5), (408, 2))]
    cases += [(np.ones(50, int), rng.integers(2, size=50)),  # one class predicted
              (rng.integers(2, size=50), np.zeros(50, int)),  # one class labelled
              (np.zeros(9, int), np.zeros(9, int)),  # nothing positive
              (np.ones(9, int), np.ones(9, int)),
              (np.array([1, 0]), np.array([0, 1]))]  # every prediction wrong
    for p, y in cases:
        binary = bool(np.isin(p, (0, 1)).all() and np.isin(y, (0, 1)).all())
        names = ("accuracy", "mcc") + (("f1",) if binary else ())
        k = int(max(p.max(), y.max())) + 1
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # scikit-learn's zero-division, one-label warnings
            ref = {"accuracy": accuracy_score(y, p), "mcc": matthews_corrcoef(y, p),
                   "f1": f1_score(y, p) if binary else None,
                   "matrix": confusion_matrix(y, p, labels=range(k))}
        ours = compute_metrics(names, p, y)
        assert ours["accuracy"] == ref["accuracy"]
        assert ours["mcc"] == pytest.approx(ref["mcc"], abs=1e-12)
        if binary:
            assert ours["f1"] == pytest.approx(ref["f1"], abs=1e-12)
        assert (confusion_counts(y, p, k) == ref["matrix"]).all()
    with pytest.raises(ValueError, match="predictions against"):
        compute_metrics(("accuracy",), [1, 0], [[1, 0]])


def test_roc_auc_is_scikit_learns():
    """Pretraining's held-out ROC-AUC, computed without scikit-learn: equal to its
    ``roc_auc_score`` on continuous scores, on scores with many ties (bf16 logits), on
    perfect and reversed ones, and NaN where one class is absent."""
    from sklearn.metrics import roc_auc_score

    from electra.data.examples import roc_auc

    rng = np.random.default_rng(0)
    y = rng.integers(2, size=5000)
    noisy = rng.normal(size=5000).astype(np.float32) + y
    cases = [(y, noisy), (y, np.round(noisy * 4) / 4),  # ~20 distinct scores
             (y, torch.tensor(noisy).bfloat16().float().numpy()),
             (y, y * 2.0), (y, -y * 1.0), (y, np.zeros(5000)),
             (np.array([0, 1]), np.array([0.3, 0.3])), (np.array([1, 0, 0]), [0.2, 0.1, 0.9])]
    for labels, scores in cases:
        assert roc_auc(labels, scores) == pytest.approx(roc_auc_score(labels, scores),
                                                        abs=1e-12)
    assert np.isnan(roc_auc(np.ones(4, int), np.arange(4.0)))
    assert np.isnan(roc_auc(np.zeros(4, int), np.arange(4.0)))
    with pytest.raises(ValueError, match="ids must be 0 or 1"):
        compute_metrics(("f1",), [2, 0], [1, 0])


def test_custom_csv_tsv_jsonl(tmp_path):
    (tmp_path / "a.csv").write_text('text,other,y\n"hello, world",x,pos\nbye,z,neg\n')
    (tmp_path / "a.tsv").write_text("q\tp\tscore\nWhat?\tThat.\t2.5\n")
    (tmp_path / "a.jsonl").write_text(json.dumps({"t": "hi", "lab": 3}) + "\n")
    csv_rows = read_custom(tmp_path / "a.csv", ["text"], "y")
    assert [(e.text_a, e.label) for e in csv_rows] == [("hello, world", "pos"), ("bye", "neg")]
    tsv = read_custom(tmp_path / "a.tsv", ["q", "p"], "score", regression=True)
    assert (tsv[0].text_b, tsv[0].label) == ("That.", 2.5)
    assert read_custom(tmp_path / "a.jsonl", ["t"], "lab")[0].label == "3"
    assert label_map(csv_rows) == {"neg": 0, "pos": 1}


def test_bad_task_input(tmp_path):
    with pytest.raises(UserError, match="valid GLUE tasks: cola, sst2"):
        glue_task("squad")
    (tmp_path / "a.csv").write_text("text,y\nhi,1\n")
    with pytest.raises(UserError, match=r"no column 'sentence'; found 'text', 'y'"):
        read_custom(tmp_path / "a.csv", ["sentence"], "y")
    (tmp_path / "empty.csv").write_text("")
    with pytest.raises(UserError, match="no rows"):
        read_custom(tmp_path / "empty.csv", ["text"], "y")
    train = read_custom(tmp_path / "a.csv", ["text"], "y")
    (tmp_path / "dev.csv").write_text("text,y\nho,2\n")
    with pytest.raises(UserError, match="dev labels '2' never occur"):
        label_map(train, read_custom(tmp_path / "dev.csv", ["text"], "y"))


def test_a_flag_is_refused_only_where_no_task_of_the_command_reads_it():
    """A family's own flag counts as read when any of the command's tasks reads it: custom
    reads --label-column beside a GLUE task (multi-task), GLUE alone does not."""
    from electra.tasks.registry import check_reading

    check_reading(["sst2", "custom"], {"label_column": "lbl", "regression": False})
    check_reading(["embedding"], {"min_score": 4.0, "label_column": "score"})
    for names, given, words in ((["sst2"], {"label_column": "x"}, "--label-column: --task "
                                 "sst2 does not read it"),
                                (["custom", "rte"], {"min_score": 4.0}, "--min-score: --task "
                                 "custom,rte does not read it (--task embedding does)"),
                                (["tagging"], {"regression": True}, "--regression")):
        with pytest.raises(UserError, match=re.escape(words)):
            check_reading(names, given)


def test_a_column_a_custom_task_would_leave_unread_is_refused_unless_named(tmp_path, capsys):
    """`--task custom` with the default columns (text, label) on a file that also holds a
    second text or a score: one line naming the column and the flags that read it; named
    columns read the file as asked; ids and other names are the file's own business."""
    from helpers import cli_error

    (tmp_path / "pairs.csv").write_text("id,text,text_b,label\n1,a,b,x\n2,c,d,y\n")
    with pytest.raises(UserError, match="column 'text_b' would not be read"):
        read_custom(tmp_path / "pairs.csv", ["text"], "label", named=False)
    assert len(read_custom(tmp_path / "pairs.csv", ["text"], "label", named=True)) == 2
    (tmp_path / "ids.csv").write_text("id,source,text,label\n1,web,a,x\n2,web,c,y\n")
    assert len(read_custom(tmp_path / "ids.csv", ["text"], "label", named=False)) == 2
    err = cli_error(capsys, "finetune", "--random-init", "tiny", "--tokenizer", tmp_path,
                    "--task", "custom", "--train", tmp_path / "pairs.csv", "--dev",
                    tmp_path / "pairs.csv", "--out", tmp_path / "o")
    assert "pairs.csv: column 'text_b' would not be read (this task reads 'text', " \
           "'label'); name the columns to read: --text-columns A or A,B and --label-column " \
           "L" in err
    words = "--label-column: --task sst2 does not read it (--task custom, embedding, rerank do)"
    assert words in cli_error(
        capsys, "finetune", "--random-init", "tiny", "--tokenizer", tmp_path, "--task",
        "sst2", "--data", tmp_path, "--label-column", "x", "--out", tmp_path / "o")


def test_a_tsv_is_read_without_quoting(tmp_path):
    """TSV has no quoting: a text that starts with a quote is that text, and the rows after
    it are rows (read with CSV's quoting, STS-B's train.tsv lost 38 of its 5,749 rows)."""
    (tmp_path / "q.tsv").write_text('text\tlabel\n"Quoted, she said.\ta\nplain\tb\n'
                                    'another "one"\ta\n')
    rows = read_custom(tmp_path / "q.tsv", ["text"], "label")
    assert [(r.text_a, r.label) for r in rows] == [('"Quoted, she said.', "a"),
                                                   ("plain", "b"), ('another "one"', "a")]
    from electra.tasks.embedding.data import read_pairs

    sts = shared_data("glue") / "STS-B" / "train.tsv"
    pairs = read_pairs(sts, "sentence1,sentence2")
    assert len(pairs) == 5749 == len(sts.read_text(encoding="utf-8").splitlines()) - 1
