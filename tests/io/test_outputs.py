"""Nothing a user has is ever lost (electra.io.outputs): each command's --overwrite onto every
other command's output is refused and leaves it byte-identical; one writer per --out; a lock
left by a killed process is taken over; single-file outputs replace only their own files;
reproducible tokenizers; Ctrl-C keeps every metrics line and says how to continue."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import default_sigint, sha, snapshot, write_corpus, write_sentiment

from electra.cli import main
from electra.io.outputs import MARK, claim, describe, owns_file, release, what_is
from electra.train.metrics import TIMING_KEYS, iter_metrics

ENV = {**os.environ, "OMP_NUM_THREADS": "1"}
TINY = ('preset = "tiny"\n[model]\nhidden_size = 32\nembedding_size = 32\nnum_layers = 2\n'
        'num_heads = 2\nintermediate_size = 64\nmax_position_embeddings = 64\n'
        '[train]\nbatch_size = 8\nmax_steps = 6\nwarmup_steps = 1\nsave_every = 3\n'
        'eval_every = 2\neval_batches = 1\nlog_every = 2\nprecision = "fp32"\n')


def cli(*args) -> int:
    return main([str(a) for a in args])


def write_words(path: Path, seed: int = 0) -> list[str]:
    """Text over 400 random words of 2 to 9 letters, used with a skewed frequency: enough
    pieces for a vocabulary of hundreds, and many merges of equal count (ties)."""
    import random

    rng = random.Random(seed)
    words = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 9)))
             for _ in range(400)]
    lines = [" ".join(words[min(int(rng.paretovariate(0.8)), 400) - 1] for _ in range(12))
             for _ in range(3000)]
    path.write_text("\n".join(lines) + "\n")
    return words


@pytest.fixture(scope="module")
def outs(tmp_path_factory) -> Path:
    """One output of every command that writes a folder, each marked by its command."""
    w = tmp_path_factory.mktemp("outs")
    write_corpus(w / "c.txt", n_docs=40)
    write_words(w / "words.txt")
    (w / "tiny.toml").write_text(TINY)
    write_sentiment(w / "train.csv", 32, 0)
    write_sentiment(w / "dev.csv", 16, 1)
    assert cli("tokenizer", "train", "--input", w / "c.txt", "--vocab-size", 120,
               "--out", w / "tok") == 0
    assert cli("prepare", "--input", w / "c.txt", "--tokenizer", w / "tok", "--seq-len", 32,
               "--val-fraction", 0.2, "--out", w / "data") == 0
    assert cli("pretrain", "--config", w / "tiny.toml", "--data", w / "data", "--out",
               w / "run", "--quiet") == 0
    assert cli("finetune", "--model", w / "run", "--task", "custom", "--train",
               w / "train.csv", "--dev", w / "dev.csv", "--out", w / "ft", "--quiet",
               "--set", "epochs=1", "--set", "batch_size=8", "--set", "max_length=32") == 0
    assert cli("export", w / "run", "--out", w / "hf") == 0
    assert cli("import", w / "hf" / "discriminator", "--out", w / "imp") == 0
    (w / "cmp").mkdir()  # what compare leaves first (its mark and settings)
    (w / "cmp" / MARK).write_text(json.dumps({"kind": "comparison", "command": "compare"}))
    (w / "cmp" / "compare.json").write_text(json.dumps({"budget": "1e9", "spec": {}}))
    (w / "demo").mkdir()
    (w / "demo" / MARK).write_text(json.dumps({"kind": "demo", "command": "demo"}))
    return w


KINDS = {"tok": ("tokenizer", "tokenizer train"), "data": ("data", "prepare"),
         "run": ("run", "pretrain"), "ft": ("finetune", "finetune"),
         "hf": ("export", "export"), "imp": ("run", "import"),
         "cmp": ("comparison", "compare"), "demo": ("demo", "demo")}


def writers(w: Path, out: Path) -> dict[str, list]:
    """Every folder-writing command, aimed at ``out`` with --overwrite where it has one."""
    return {
        "tokenizer train": ["tokenizer", "train", "--input", w / "c.txt", "--vocab-size", 120,
                            "--out", out, "--overwrite"],
        "prepare": ["prepare", "--input", w / "c.txt", "--tokenizer", w / "tok",
                    "--seq-len", 32, "--out", out, "--overwrite"],
        "pretrain": ["pretrain", "--config", w / "tiny.toml", "--data", w / "data", "--out",
                     out, "--overwrite", "--quiet"],
        "finetune": ["finetune", "--model", w / "run", "--task", "custom", "--train",
                     w / "train.csv", "--dev", w / "dev.csv", "--out", out, "--overwrite",
                     "--quiet", "--set", "max_length=32"],
        "export": ["export", w / "run", "--out", out, "--overwrite"],
        "import": ["import", w / "hf" / "discriminator", "--out", out, "--overwrite"],
        "compare": ["compare", "--data", w / "data", "--config", w / "tiny.toml", "--budget",
                    "1e9", "--tasks", f"custom:name=s:train={w}/train.csv:dev={w}/dev.csv",
                    "--seeds", "1", "--out", out],
        "demo": ["demo", "--out", out, "--steps", 1],
    }


def test_every_output_says_what_it_is(outs):
    for name, kind in KINDS.items():
        assert what_is(outs / name) == kind, name


def test_overwrite_onto_another_commands_output_is_refused_and_changes_nothing(outs, capsys):
    """The ownership matrix: 8 commands x the 7 outputs of other kinds (or other commands)."""
    cases = 0
    for target, (kind, maker) in KINDS.items():
        for command, argv in writers(outs, outs / target).items():
            if command == maker:
                continue
            inputs_of = {"prepare": "tok", "pretrain": "data", "finetune": "run",
                         "export": "run", "import": "hf", "compare": "data"}
            before = snapshot(outs)
            assert cli(*argv) == 2, (command, target)
            err = capsys.readouterr().err.strip()
            assert err.count("\n") == 0, err
            if inputs_of.get(command) == target:
                assert "an input of this command" in err, err
            else:
                assert f"holds {describe(kind, maker)}" in err, (command, target, err)
                assert "nothing was changed" in err, err
            assert snapshot(outs) == before, (command, target)
            cases += 1
    assert cases == 8 * 8 - 8


def test_overwrite_replaces_the_same_commands_output(outs, tmp_path, capsys):
    """--overwrite still works where it should: onto the command's own output."""
    out = tmp_path / "tok"
    argv = writers(outs, out)["tokenizer train"]
    assert cli(*argv) == 0 and cli(*argv) == 0
    assert what_is(out) == ("tokenizer", "tokenizer train")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tok"]  # no lock or .partial left


def test_folders_written_before_the_mark_are_recognised(outs, tmp_path):
    import shutil

    for name in ("tok", "data", "run", "ft", "hf", "imp"):
        old = tmp_path / name
        shutil.copytree(outs / name, old)
        (old / MARK).unlink()
        assert what_is(old) == KINDS[name], name


def test_two_commands_on_one_out_one_writes_the_other_exits_2(outs, tmp_path):
    """Two real processes prepare into one --out at once: exactly one writes it (complete,
    verified); the other exits 2 with one line, naming the other process or its output."""
    big = tmp_path / "big.txt"
    text = (outs / "c.txt").read_text()
    big.write_text(text * 40)
    out = tmp_path / "data"
    argv = [sys.executable, "-m", "electra", "prepare", "--input", str(big), "--tokenizer",
            str(outs / "tok"), "--seq-len", "32", "--out", str(out)]
    procs = [subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=ENV) for _ in range(2)]
    results = [(p.wait(timeout=300), p.stderr.read()) for p in procs]
    codes = sorted(code for code, _ in results)
    assert codes == [0, 2], results
    err = next(e for code, e in results if code == 2).strip()
    assert err.count("\n") == 0, err
    assert ("is being written by another electra command (pid" in err
            or "already holds prepared data" in err), err
    assert cli("prepare", "--verify", out) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["big.txt", "data"]


def test_a_lock_left_by_a_killed_process_is_taken_over(outs, tmp_path, capsys):
    out = tmp_path / "tok"
    proc = subprocess.Popen([sys.executable, "-c", (
        "import sys, time, pathlib; from electra.io.outputs import take_lock; "
        "take_lock(pathlib.Path(sys.argv[1]), 'tokenizer train'); print('held', flush=True); "
        "time.sleep(600)"), str(out)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    argv = writers(outs, out)["tokenizer train"]
    assert cli(*argv) == 2
    err = capsys.readouterr().err
    assert f"pid {proc.pid}" in err and "electra tokenizer train" in err, err
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert (tmp_path / "tok.electra-lock").is_file()  # left behind by the killed holder
    assert cli(*argv) == 0
    err = capsys.readouterr().err
    assert "was left by a command that no longer runs" in err and f"pid {proc.pid}" in err
    assert not (tmp_path / "tok.electra-lock").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tok"]  # no temporary left


def test_a_file_at_the_lock_path_that_electra_did_not_write_is_never_touched(outs, tmp_path,
                                                                               capsys):
    """Whatever its name, a file electra did not write is not truncated, rewritten or
    deleted: files named like the old lock (OUT.lock) are not ours at all, and a file at the
    lock path without electra's signature (a user's notes, JSON nested deeper than any
    recursion limit, a training file given as input, a folder) refuses the command."""
    out = tmp_path / "ft"
    notes = tmp_path / "ft.lock"
    notes.write_text("my notes")
    argv = ["finetune", "--model", outs / "run", "--task", "custom", "--train",
            outs / "train.csv", "--dev", outs / "dev.csv", "--quiet", "--set", "epochs=1",
            "--set", "max_length=32", "--out", out]
    lock = tmp_path / "ft.electra-lock"
    for content in ("my notes", "[" * 5000 + "]" * 5000, '{"pid": 1, "host": "h"}', ""):
        lock.write_text(content)
        before = snapshot(tmp_path)
        capsys.readouterr()
        assert cli(*argv) == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and "was not written by electra" in err, err
        assert "move that file away" in err and snapshot(tmp_path) == before
    lock.unlink()
    lock.mkdir()
    assert cli(*argv) == 2 and "is not a lock electra wrote" in capsys.readouterr().err
    lock.rmdir()
    os.mkfifo(lock)  # opened without blocking, refused as not a regular file
    assert cli(*argv) == 2 and "is not a lock electra wrote" in capsys.readouterr().err
    assert lock.exists() and not lock.is_file()
    lock.unlink()
    train = tmp_path / "ft.electra-lock"  # the training file itself at the lock's path
    train.write_bytes((outs / "train.csv").read_bytes())
    argv[argv.index(outs / "train.csv")] = train
    before = snapshot(tmp_path)
    assert cli(*argv) == 2 and snapshot(tmp_path) == before
    train.unlink()
    argv[argv.index(train)] = outs / "train.csv"
    assert cli(*argv) == 0  # nothing in the way: it runs, and leaves no lock
    assert notes.read_text() == "my notes"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ft", "ft.lock"]


@pytest.mark.parametrize("command", ["tokenizer train", "finetune", "export"])
def test_names_beside_an_output_that_a_user_owns_are_never_touched(outs, tmp_path, command):
    """--overwrite moves the old output aside to a name nothing holds (a user's OUT.old
    folder stays), and a single-file output writes its part file under a name of its own (a
    user's OUT.partial file stays)."""
    out = tmp_path / "o"
    argv = writers(outs, out)[command]
    assert cli(*argv) == 0
    (tmp_path / "o.old").mkdir()
    (tmp_path / "o.old" / "mine.txt").write_text("keep")
    (tmp_path / "o.old-1").write_text("keep too")
    assert cli(*argv) == 0
    assert (tmp_path / "o.old" / "mine.txt").read_text() == "keep"
    assert (tmp_path / "o.old-1").read_text() == "keep too"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o", "o.old", "o.old-1"]
    preds = tmp_path / "p.jsonl"
    (tmp_path / "p.jsonl.partial").write_text("mine")
    for _ in range(2):
        assert cli("predict", "--model", outs / "ft" / "seed-1", "--input", outs / "dev.csv",
                   "--out", preds, "--quiet") == 0
    assert (tmp_path / "p.jsonl.partial").read_text() == "mine"
    mode = preds.stat().st_mode & 0o777  # as a file open() makes, not mkstemp's 0600
    assert mode == (tmp_path / "p.jsonl.partial").stat().st_mode & 0o777, oct(mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o", "o.old", "o.old-1", "p.jsonl",
                                                          "p.jsonl.partial"]


def test_one_process_cannot_claim_one_out_twice(tmp_path):
    first = claim(tmp_path / "x", "data", "prepare")
    try:
        with pytest.raises(ValueError, match="this same process already"):
            claim(tmp_path / "x", "data", "prepare")
    finally:
        release(first)
    release(claim(tmp_path / "x", "data", "prepare"))


def test_a_missing_parent_is_made_and_removed_again_on_failure(outs, tmp_path, capsys):
    deep = tmp_path / "a" / "b" / "tok"
    (tmp_path / "empty.txt").write_text("\n")
    assert cli("tokenizer", "train", "--input", tmp_path / "empty.txt", "--out", deep) == 2
    capsys.readouterr()
    assert not (tmp_path / "a").exists()
    assert cli("tokenizer", "train", "--input", outs / "c.txt", "--vocab-size", 120,
               "--out", deep) == 0
    assert (deep / "tokenizer.json").is_file()


def test_file_outputs_replace_only_their_own_files(outs, tmp_path, capsys):
    """plot, predict and detect write into missing folders, rewrite their own file on a
    second run, and refuse a file they did not write."""
    png = tmp_path / "new" / "curves.png"
    html = tmp_path / "new2" / "page.html"
    preds = tmp_path / "new3" / "p.jsonl"
    preds.parent.mkdir()
    (tmp_path / "new3" / "p.jsonl.lock").write_text("a user's file, named like a lock")
    for _ in range(2):
        assert cli("plot", outs / "run", "--out", png) == 0
        assert cli("detect", "--model", outs / "run", "a b c", "--html", html) == 0
        assert cli("predict", "--model", outs / "ft" / "seed-1", "--input", outs / "dev.csv",
                   "--out", preds, "--quiet") == 0
    assert owns_file(png, "plot") and owns_file(html, "detect") and owns_file(preds, "predict")
    assert not owns_file(png, "detect") and not owns_file(outs / "c.txt", "predict")
    assert sorted(p.name for p in (tmp_path / "new").iterdir()) == ["curves.png"]
    assert sorted(p.name for p in preds.parent.iterdir()) == ["p.jsonl", "p.jsonl.lock"]
    assert (tmp_path / "new3" / "p.jsonl.lock").read_text() == "a user's file, named like a lock"
    capsys.readouterr()
    notes = tmp_path / "notes.txt"
    notes.write_text("mine")
    for argv in (["plot", outs / "run", "--out", notes],
                 ["detect", "--model", outs / "run", "a", "--html", notes],
                 ["predict", "--model", outs / "ft" / "seed-1", "--input", outs / "dev.csv",
                  "--out", notes]):
        assert cli(*argv) == 2
        assert "was not written by electra" in capsys.readouterr().err
        assert notes.read_text() == "mine"


def test_predict_on_a_full_disk_names_the_file_and_leaves_nothing(outs, tmp_path, monkeypatch,
                                                                  capsys):
    import errno

    def full(self, *a, **k):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self))

    monkeypatch.setattr(Path, "write_text", full)
    out = tmp_path / "p.jsonl"
    assert cli("predict", "--model", outs / "ft" / "seed-1", "--input", outs / "dev.csv",
               "--out", out, "--quiet") == 2
    err = capsys.readouterr().err.strip()
    assert "No space left on device while writing" in err and str(out) in err, err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("model", ["wordpiece", "bpe"])
def test_the_same_input_gives_a_byte_identical_tokenizer(outs, tmp_path, model):
    """Three runs in three processes (hash seeds differ per process)."""
    digests = []
    for i in range(3):
        out = tmp_path / f"t{i}"
        res = subprocess.run([sys.executable, "-m", "electra", "tokenizer", "train", "--input",
                              str(outs / "words.txt"), "--vocab-size", "300", "--model", model,
                              "--out", str(out)], capture_output=True, text=True, env=ENV)
        assert res.returncode == 0, res.stderr
        digests.append({p.name: sha(p) for p in sorted(out.iterdir())})
    assert digests[0] == digests[1] == digests[2]
    vocab = (tmp_path / "t0" / "vocab.txt").read_text().splitlines()
    assert len(vocab) == 300 and len(set(vocab)) == 300


def test_the_wordpiece_tokenizer_splits_words_as_wordpiece_does(outs, tmp_path):
    from electra.data.tokenizer import load_tokenizer

    words = write_words(tmp_path / "w.txt")
    assert cli("tokenizer", "train", "--input", tmp_path / "w.txt", "--vocab-size", 200,
               "--out", tmp_path / "t") == 0
    tok = load_tokenizer(tmp_path / "t")
    vocab = tok.get_vocab()
    assert [vocab[t] for t in ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")] == [0, 1, 2, 3, 4]
    spec = json.loads((tmp_path / "t" / "tokenizer.json").read_text())
    assert [t["content"] for t in spec["added_tokens"]] == ["[PAD]", "[UNK]", "[CLS]",
                                                              "[SEP]", "[MASK]"]
    for word in words[:50]:
        pieces = tok.encode(word, add_special_tokens=False).tokens
        assert "".join(p.removeprefix("##") for p in pieces) == word
        assert all(p.startswith("##") for p in pieces[1:]) and not pieces[0].startswith("##")


def test_labels_with_spaces_are_stripped_with_a_note(tmp_path, capsys):
    from electra.data.examples import read_custom

    (tmp_path / "t.csv").write_text("text,label\na, 1\nb,1\nc,0 \n")
    examples = read_custom(tmp_path / "t.csv", ["text"], "label")
    assert [e.label for e in examples] == ["1", "1", "0"]
    err = capsys.readouterr().err
    assert "written several ways are read as one class: ' 1' and '1' as '1'" in err, err


def test_booleans_read_the_same_everywhere():
    from electra.config import ModelConfig, parse_bool
    from electra.experiments.compare import parse_tasks

    for text, value in (("true", True), ("Yes", True), ("1", True), ("on", True),
                        ("false", False), ("no", False), ("0", False), ("OFF", False)):
        assert parse_bool(text, "k") is value
        task = parse_tasks(f"custom:name=s:train=a.csv:dev=b.csv:regression={text}", None)[0]
        assert task.regression is value
        assert ModelConfig(share_embeddings=text).share_embeddings is value
    with pytest.raises(ValueError, match="must be true or false"):
        parse_bool("2", "k")


def test_ctrl_c_while_a_metrics_line_is_computed_keeps_that_line(outs, tmp_path, monkeypatch,
                                                                capsys):
    """Interrupted during the validation of step 4 (the line of step 4 half made), then
    resumed: metrics.jsonl equals an uninterrupted run's, line for line."""
    import electra.train.pretraining as pretrain

    base = ["pretrain", "--config", outs / "tiny.toml", "--data", outs / "data", "--quiet"]
    assert cli(*base, "--out", tmp_path / "a") == 0
    real, calls = pretrain.validate, [0]

    def interrupted(*a, **k):
        calls[0] += 1
        if calls[0] == 2:  # the validation of step 4
            raise KeyboardInterrupt
        return real(*a, **k)

    monkeypatch.setattr(pretrain, "validate", interrupted)
    assert cli(*base, "--out", tmp_path / "b") == 130
    captured = capsys.readouterr()
    again = " ".join(map(str, [*base, "--out", tmp_path / "b", "--resume"]))
    assert captured.err.strip().splitlines()[-1] == (
        f"electra: interrupted; continue it with `electra {again}`")
    monkeypatch.setattr(pretrain, "validate", real)
    assert cli(*base, "--out", tmp_path / "b", "--resume") == 0

    def lines(run: Path) -> list[dict]:
        return [{k: v for k, v in r.items() if k not in TIMING_KEYS} for r in iter_metrics(run)]

    assert [r["step"] for r in lines(tmp_path / "a")] == [2, 4, 6]
    assert lines(tmp_path / "a") == lines(tmp_path / "b")


def test_ctrl_c_during_prepare_with_workers_is_one_quiet_line(outs, tmp_path):
    big = tmp_path / "big.txt"
    big.write_text((outs / "c.txt").read_text() * 400)
    out = tmp_path / "data"
    proc = subprocess.Popen([sys.executable, "-m", "electra", "prepare", "--input", str(big),
                             "--tokenizer", str(outs / "tok"), "--seq-len", "32", "--workers",
                             "2", "--out", str(out)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=ENV, start_new_session=True,
                            preexec_fn=default_sigint)
    # The whole input is one chunk, written only at the end (~5 s here): interrupt once the
    # workers exist (they take a second or more to import and tokenize), not when the output
    # is nearly done.
    children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children")
    if not children.parent.is_dir():
        proc.kill()
        pytest.skip("needs Linux's /proc to see the workers start")
    deadline = time.time() + 120
    while proc.poll() is None and len(children.read_text().split()) < 2:
        assert time.time() < deadline
        time.sleep(0.02)
    time.sleep(0.1)  # past Pool()'s start of its processes (tens of ms)
    os.killpg(proc.pid, signal.SIGINT)  # as a terminal's Ctrl-C reaches the whole group
    _, err = proc.communicate(timeout=120)
    if proc.returncode == 0:
        pytest.skip("prepare finished before the interrupt reached it")
    assert proc.returncode == 130, err
    assert "Traceback" not in err, err
    assert err.strip().splitlines()[-1] == ("electra: interrupted; nothing was written (--out "
                                            "is as it was); run the command again")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["big.txt"]


def test_ctrl_c_during_a_finetune_evaluation_keeps_that_line(outs, tmp_path, monkeypatch,
                                                             capsys):
    """Interrupted while epoch 2's dev scores are computed, then resumed: the seed's
    metrics.jsonl and dev scores equal an uninterrupted fine-tune's."""
    import electra.train.finetuning as finetune

    base = ["finetune", "--model", outs / "run", "--task", "custom", "--train",
            outs / "train.csv", "--dev", outs / "dev.csv", "--quiet", "--set", "epochs=3",
            "--set", "batch_size=8", "--set", "max_length=32", "--set", "precision=fp32"]
    assert cli(*base, "--out", tmp_path / "a") == 0
    real, calls = finetune.dev_predictions, [0]

    def interrupted(*a, **k):
        calls[0] += 1
        if calls[0] == 2:
            raise KeyboardInterrupt
        return real(*a, **k)

    monkeypatch.setattr(finetune, "dev_predictions", interrupted)
    assert cli(*base, "--out", tmp_path / "b") == 130
    again = " ".join(map(str, [*base, "--out", tmp_path / "b", "--resume"]))
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"electra: interrupted; continue it with `electra {again}` (finished seeds are kept)")
    monkeypatch.setattr(finetune, "dev_predictions", real)
    assert cli(*base, "--out", tmp_path / "b", "--resume") == 0

    def lines(seed: Path) -> list[dict]:
        return [{k: v for k, v in r.items() if k not in TIMING_KEYS}
                for r in iter_metrics(seed)]

    a, b = lines(tmp_path / "a" / "seed-1"), lines(tmp_path / "b" / "seed-1")
    assert [r["epoch"] for r in a] == [1, 2, 3]
    assert a == b
    ra = json.loads((tmp_path / "a" / "results.json").read_text())
    rb = json.loads((tmp_path / "b" / "results.json").read_text())
    assert ra["seeds"] == rb["seeds"]


def test_a_lock_is_whole_and_signed_at_every_moment_of_taking_it(tmp_path, monkeypatch):
    """Taking over a stale lock never rewrites it in place: a new signed, locked file is
    renamed over it. A process that dies just before the rename leaves the old signed lock,
    one that dies after it leaves the new one; either way the next command takes it over
    (truncating then rewriting in place left an empty file that refused every later run
    once: CI's random kill landed between the two)."""
    import json as _json

    from electra.io.outputs import _signed, lock_path, take_lock

    out = tmp_path / "o"
    path = lock_path(out)
    path.write_text(_json.dumps({"electra_lock": 1, "pid": 1, "host": "h",
                                 "command": "pretrain", "started": "then"}))
    with monkeypatch.context() as m:
        def dies(*args):
            raise KeyboardInterrupt
        m.setattr(os, "rename", dies)
        with pytest.raises(KeyboardInterrupt):
            take_lock(out, "pretrain")
    assert _signed(path.read_text())["started"] == "then"
    lock = take_lock(out, "pretrain")
    taken = _signed(path.read_text())
    assert taken["pid"] == os.getpid() and lock.fd >= 0
    lock.release()
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no temporary left either
