"""Signs of life on long work (``electra.io.progress``): a line every
ELECTRA_PROGRESS_SECONDS off a terminal, on standard error (a command's results on standard
output stay as they were), nothing with --quiet or for work shorter than that."""

from __future__ import annotations

import io
import itertools
import json

import pytest
from helpers import make_run

from electra.cli import main
from electra.io import progress


@pytest.fixture
def clock(monkeypatch):
    """A clock that moves 1 s each time it is read."""
    ticks = itertools.count()
    monkeypatch.setattr(progress, "_now", lambda: float(next(ticks)))
    monkeypatch.setenv("ELECTRA_PROGRESS_SECONDS", "2")


def test_a_log_gets_a_line_every_n_seconds_and_one_at_the_end(clock):
    out = io.StringIO()
    with progress.progress(10, "encoding", "text", stream=out) as bar:
        for _ in range(10):
            bar.update(1)
    lines = out.getvalue().splitlines()
    assert len(lines) == 6 and lines[-1].startswith("electra: encoding: 10/10 texts (100%")
    assert "about" in lines[0] and "left" in lines[0]
    quiet = io.StringIO()
    with progress.progress(10, "encoding", "text", enabled=False, stream=quiet) as bar:
        bar.update(10)
    assert quiet.getvalue() == ""


def test_short_work_says_nothing(monkeypatch):
    out = io.StringIO()
    with progress.progress(3, "x", stream=out) as bar:
        bar.update(3)
    assert out.getvalue() == ""


def test_evaluate_shows_progress_on_stderr_and_its_json_on_stdout(clock, tmp_path, capsys):
    run, _ = make_run(tmp_path, "tiny")
    beir = tmp_path / "beir"
    (beir / "qrels").mkdir(parents=True)
    docs = {f"d{i}": f"{c} {c} {c}" for i, c in enumerate("abcdefghij")}
    (beir / "corpus.jsonl").write_text("".join(json.dumps({"_id": k, "text": v}) + "\n"
                                               for k, v in docs.items()))
    (beir / "queries.jsonl").write_text("".join(json.dumps({"_id": f"q{i}", "text": c}) + "\n"
                                                for i, c in enumerate("abc")))
    (beir / "qrels/test.tsv").write_text("q\td\ts\n" + "".join(f"q{i}\td{i}\t1\n"
                                                            for i in range(3)))
    capsys.readouterr()
    argv = ["evaluate", "--model", str(run), "--task", "retrieval", "--data", str(beir)]
    assert main(argv) == 0
    out, err = capsys.readouterr()
    assert "ndcg@10" in json.loads(out.strip())["retrieval"]
    assert "electra: retrieval: encoding the corpus and the queries: 13/13 texts (100%" in err
    assert main([*argv, "--quiet"]) == 0
    assert "electra: retrieval" not in capsys.readouterr().err
