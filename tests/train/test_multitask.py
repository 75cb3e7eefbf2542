"""Multi-task fine-tuning: the task draws follow size^α, one run trains every task on one
encoder and each task's saved model scores what the run reported, an interrupted run resumes
bitwise, and a task's model continues alone (MT-DNN)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from helpers import ctrl_c_in_step, write_sentiment
from safetensors.torch import load_file

from electra.cli import main
from electra.train.finetuning import TaskSampler
from electra.train.metrics import TIMING_KEYS
from electra.train.multitask import MultiTaskModel

FIXTURES = Path(__file__).parent.parent / "fixtures" / "superglue"


@pytest.mark.parametrize("alpha, expected", [(1.0, [1, 4, 16]), (0.5, [1, 2, 4]),
                                             (0.0, [1, 1, 1])])
def test_task_draws_follow_size_to_the_alpha(alpha, expected):
    from scipy.stats import chisquare

    sampler = TaskSampler({"a": 100, "b": 400, "c": 1600}, 10, alpha, seed=0)
    n = 6000
    drawn = [sampler.next()[0] for _ in range(n)]
    counts = [drawn.count(t) for t in "abc"]
    want = [n * e / sum(expected) for e in expected]
    assert chisquare(counts, want).pvalue > 1e-3, (counts, want)
    # and not some other law: at alpha=1 the uniform one is far off
    if alpha == 1.0:
        assert chisquare(counts, [n / 3] * 3).pvalue < 1e-12
    assert sampler.steps_per_epoch == 10 + 40 + 160


def test_the_sampler_resumes_its_draws_and_every_tasks_batches():
    a = TaskSampler({"a": 37, "b": 90}, 8, 1.0, seed=3)
    for _ in range(23):
        a.next()
    b = TaskSampler({"a": 37, "b": 90}, 8, 1.0, seed=3)
    b.load_state_dict(a.state_dict())
    for _ in range(40):
        (ta, ia), (tb, ib) = a.next(), b.next()
        assert ta == tb and torch.equal(ia, ib)


def test_the_shared_encoder_is_held_once():
    from helpers import tiny_config

    from electra.tasks.choice.head import MultipleChoice
    from electra.tasks.sequence.head import SequenceClassifier

    cfg = tiny_config()
    model = MultiTaskModel({"x": SequenceClassifier(cfg, 2), "y": MultipleChoice(cfg)})
    names = [n for n, _ in model.named_parameters()]
    assert sum(n.startswith("encoder.") for n in names) == len(
        list(model.encoder.parameters()))
    assert not any(".encoder." in n for n in names)  # no head holds a copy
    view = model.view("x")  # a task's model, named as a single-task one
    assert set(view.state_dict()) == set(SequenceClassifier(cfg, 2).state_dict())


@pytest.fixture
def tasks(tmp_path):
    from electra.data.tokenizer import train_tokenizer

    write_sentiment(tmp_path / "train.csv", 320, 0)
    write_sentiment(tmp_path / "dev.csv", 80, 1)
    text = (tmp_path / "train.csv").read_text() + "".join(
        p.read_text() for p in (FIXTURES / "COPA").glob("*.jsonl"))
    (tmp_path / "c.txt").write_text(text)
    train_tokenizer([str(tmp_path / "c.txt")], 150, tmp_path / "tok")
    return tmp_path


def multi_args(w: Path, *sets: str) -> list[str]:
    return ["finetune", "--random-init", "tiny", "--tokenizer", str(w / "tok"),
            "--task", "custom,copa", "--data", f",{FIXTURES / 'COPA'}",
            "--train", f"{w / 'train.csv'},", "--dev", f"{w / 'dev.csv'},", "--quiet",
            "--set", "precision=fp32", "--set", "batch_size=8", *sets]


def test_a_multitask_run_learns_and_each_saved_task_scores_what_it_reported(tasks, capsys):
    assert main([*multi_args(tasks, "--set", "epochs=3", "--set", "lr=1e-3"),
                 "--out", str(tasks / "mt")]) == 0
    results = json.loads((tasks / "mt/results.json").read_text())
    assert results["tasks"] == ["custom", "copa"]
    assert results["median"]["custom"]["dev"]["accuracy"] >= 0.9  # the separable task
    metrics = [json.loads(x) for x in (tasks / "mt/seed-1/metrics.jsonl").read_text()
               .splitlines()]
    assert [m["epoch"] for m in metrics] == [1, 2, 3]
    assert {"custom_dev_accuracy", "copa_val_accuracy"} <= set(metrics[-1])
    capsys.readouterr()
    for task, extra in (("custom", ["--dev", str(tasks / "dev.csv")]),
                        ("copa", ["--data", str(FIXTURES / "COPA")])):
        assert main(["evaluate", "--model", str(tasks / f"mt/seed-1/{task}"), "--task", task,
                     *extra]) == 0
        scored = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
        assert scored == results["seeds"]["1"][task], task
    # the tasks' folders share the encoder (select=last), each has its own head
    a = load_file(tasks / "mt/seed-1/custom/model.safetensors")
    b = load_file(tasks / "mt/seed-1/copa/model.safetensors")
    assert all(torch.equal(a[k], b[k]) for k in a if k.startswith("encoder."))
    assert a["head_out.weight"].shape[0] == 2 and b["head_out.weight"].shape[0] == 1
    # MT-DNN: a task's model continues alone
    assert main(["finetune", "--model", str(tasks / "mt/seed-1/custom"), "--task", "custom",
                 "--train", str(tasks / "train.csv"), "--dev", str(tasks / "dev.csv"),
                 "--set", "epochs=1", "--out", str(tasks / "st"), "--quiet"]) == 0


def test_an_interrupted_multitask_run_resumes_bitwise(tasks, monkeypatch):
    args = multi_args(tasks, "--set", "epochs=2", "--set", "save_every=7", "--set",
                      "select=best", "--set", "eval_every=10")
    assert main([*args, "--out", str(tasks / "a")]) == 0
    ctrl_c_in_step(monkeypatch, 60)
    assert main([*args, "--out", str(tasks / "b")]) == 130
    monkeypatch.undo()
    assert (tasks / "b.partial/seed-1/checkpoints/step-0000059").is_dir()
    assert main([*args, "--out", str(tasks / "b"), "--resume"]) == 0
    ra = json.loads((tasks / "a/results.json").read_text())
    rb = json.loads((tasks / "b/results.json").read_text())
    assert ra["seeds"] == rb["seeds"] and ra["details"] == rb["details"]
    for task in ("custom", "copa"):
        wa = load_file(tasks / f"a/seed-1/{task}/model.safetensors")
        wb = load_file(tasks / f"b/seed-1/{task}/model.safetensors")
        assert all(torch.equal(wa[k], wb[k]) for k in wa), task
    ma, mb = ((tasks / f"{x}/seed-1/metrics.jsonl").read_text().splitlines() for x in "ab")
    drop = TIMING_KEYS  # tokens/s and mfu differ
    assert [{k: v for k, v in json.loads(x).items() if k not in drop} for x in ma] == [
        {k: v for k, v in json.loads(x).items() if k not in drop} for x in mb]


def test_tagging_and_squad_mix_with_a_sentence_task(tasks, capsys):
    """Heads of three families on one encoder; each saved task scores what the run said."""
    paras = []
    for i in range(12):
        ctx = f"Anna lives in Oslo number {i}. She works at a bank in the city."
        paras.append({"context": ctx, "qas": [{"id": f"q{i}", "question": "Where is Anna?",
                                               "answers": [{"text": "Oslo",
                                                            "answer_start": ctx.index("Oslo")}]}]})
    (tasks / "sq.json").write_text(json.dumps({"version": "1.1", "data": [
        {"title": "t", "paragraphs": paras}]}))
    (tasks / "tags.jsonl").write_text("".join(json.dumps(
        {"tokens": ["Anna", "lives", "in", "Oslo"], "tags": ["B-PER", "O", "O", "B-LOC"]})
        + "\n" for _ in range(16)))
    files = {"custom": tasks / "dev.csv", "tagging": tasks / "tags.jsonl",
             "squad1": tasks / "sq.json"}
    assert main(["finetune", "--random-init", "tiny", "--tokenizer", str(tasks / "tok"),
                 "--task", ",".join(files), "--train",
                 f"{tasks / 'train.csv'},{files['tagging']},{files['squad1']}",
                 "--dev", ",".join(map(str, files.values())), "--set", "epochs=2",
                 "--set", "batch_size=4", "--set", "max_length=48", "--set", "doc_stride=16",
                 "--set", "max_train_examples=64", "--out", str(tasks / "mix"),
                 "--quiet"]) == 0
    results = json.loads((tasks / "mix/results.json").read_text())
    capsys.readouterr()
    for task, dev in files.items():
        assert main(["evaluate", "--model", str(tasks / f"mix/seed-1/{task}"), "--task", task,
                     "--dev", str(dev)]) == 0
        scored = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
        assert scored["dev"] == results["seeds"]["1"][task]["dev"], task
