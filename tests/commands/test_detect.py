"""`electra detect`: each token's p(replaced) is sigmoid of the discriminator's logit, the same
from a run, its discriminator/ and a transformers folder; JSON, terminal and HTML outputs."""

from __future__ import annotations

import json

import pytest
import torch
from helpers import cli_error, make_run

from electra.cli import main
from electra.commands.detect import load_detector, score
from electra.data.tokenizer import load_tokenizer

TEXTS = ["aaa bb <b>cccc</b> dd", "eeee f", "a"]


def direct(model, tok, text: str) -> tuple[list[str], list[float]]:
    enc = tok.encode(text)
    ids = torch.tensor([enc.ids])
    with torch.no_grad():
        p = torch.sigmoid(model.discriminator(ids, torch.ones_like(ids),
                                              torch.tensor([enc.type_ids])))[0]
    keep = [i for i, t in enumerate(enc.tokens) if t not in ("[CLS]", "[SEP]")]
    return [enc.tokens[i] for i in keep], [float(p[i]) for i in keep]


def test_probabilities_are_the_discriminators_from_every_kind_of_folder(tmp_path):
    run, model = make_run(tmp_path, "tiny")
    tok = load_tokenizer(run / "discriminator")
    results = score(*load_detector(run), TEXTS)  # batched, padded
    for res, text in zip(results, TEXTS, strict=True):
        tokens, probs = direct(model, tok, text)
        assert [t["token"] for t in res["tokens"]] == tokens
        assert [t["p_replaced"] for t in res["tokens"]] == pytest.approx(probs, abs=1e-4)
        for t in res["tokens"]:  # offsets point at the token's own characters
            piece = text[t["start"]:t["end"]].lower()
            assert t["token"] == "[UNK]" or piece.startswith(t["token"].lstrip("#"))
    same = score(*load_detector(run / "discriminator"), TEXTS)
    assert same == results
    pytest.importorskip("transformers")
    assert main(["export", str(run), "--out", str(tmp_path / "hf")]) == 0
    hf = score(*load_detector(tmp_path / "hf/discriminator"), TEXTS)
    for a, b in zip(hf, results, strict=True):
        assert [t["p_replaced"] for t in a["tokens"]] == pytest.approx(
            [t["p_replaced"] for t in b["tokens"]], abs=1e-4)


def test_json_terminal_and_html_outputs(tmp_path, capsys):
    run, _ = make_run(tmp_path, "tiny")
    (tmp_path / "in.txt").write_text("\n".join(TEXTS[:2]) + "\n\n")
    capsys.readouterr()
    assert main(["detect", "--model", str(run), "--input", str(tmp_path / "in.txt"),
                 "--json"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert [json.loads(x)["text"] for x in lines] == TEXTS[:2]
    assert main(["detect", "--model", str(run), TEXTS[0], "--threshold", "0",
                 "--html", str(tmp_path / "p.html")]) == 0
    out = capsys.readouterr().out
    n = len(json.loads(lines[0])["tokens"])
    assert f"({n} of {n} tokens at p(replaced) >= 0.0)" in out  # threshold 0: all flagged
    page = (tmp_path / "p.html").read_text()
    assert page.count("<span style=") == n and "&lt;" in page and "<b>" not in page


def test_detect_refuses_models_without_a_discriminator_head(tmp_path, capsys):
    run, _ = make_run(tmp_path, "tiny")
    err = cli_error(capsys, "detect", "--model", str(run / "generator"), "x")
    assert "holds a generator, not a discriminator" in err
    pytest.importorskip("transformers")
    assert main(["export", str(run), "--out", str(tmp_path / "hf")]) == 0
    err = cli_error(capsys, "detect", "--model", str(tmp_path / "hf/generator"), "x")
    assert "not an ELECTRA discriminator" in err
    assert "needs a text" in cli_error(capsys, "detect", "--model", str(run))
    assert "--threshold 2.0 must be between 0 and 1" in cli_error(
        capsys, "detect", "--model", str(run), "x", "--threshold", "2")
    assert "is a folder" in cli_error(capsys, "detect", "--model", str(run), "x", "--html",
                                      str(tmp_path))
