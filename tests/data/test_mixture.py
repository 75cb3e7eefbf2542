"""Weighted mixtures of prepared folders (issue 61, ``electra.data.mixture``): the --data
grammar, rows drawn at the weights, deterministically, the same global batch at any world
size, resumable bit for bit; and a pretraining run on a mixture (a different mix and mask
rate per length phase, a decay branch onto a new mix) counting each source's tokens."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import cli_error, write_corpus

from electra.cli import main
from electra.data.loader import ShardDataset
from electra.data.mixspec import Share, parse_data
from electra.data.mixture import MixedLoader, source_tokens
from electra.errors import UserError
from electra.train.metrics import iter_metrics


def test_the_data_grammar():
    (one,) = parse_data("runs/data")
    assert one == [Share("runs/data", 1.0, "data")]
    (mix,) = parse_data("a/web:0.7+b/books:0.3")
    assert [(s.name, s.weight) for s in mix] == [("web", 0.7), ("books", pytest.approx(0.3))]
    (even,) = parse_data("web+books+web")  # equal shares; a name given twice is numbered
    assert [(s.name, s.weight) for s in even] == [("web", 1 / 3), ("books", 1 / 3),
                                                  ("web-2", 1 / 3)]
    (url,) = parse_data("s3://bucket/web:3+s3://bucket/books:1")  # a URL keeps its colon
    assert [(s.path, s.weight) for s in url] == [("s3://bucket/web", 0.75),
                                                 ("s3://bucket/books", 0.25)]
    phases = parse_data("web:0.5+books:0.5,long")
    assert [len(p) for p in phases] == [2, 1]
    for bad, words in (("web:0.7+books", "give every folder"),
                       ("web:-1+b:1", "from 1e-9 to 1e9"),
                       ("a:1e308+b:1e308", "from 1e-9 to 1e9"),  # (their sum overflowed)
                       ("web+", "empty part")):
        with pytest.raises(UserError, match=words):
            parse_data(bad)


@pytest.fixture(scope="module")
def sources(letters_data, tmp_path_factory) -> list[Path]:
    """The letters corpus prepared, and another text with the same tokenizer."""
    from electra.data.prepare import PrepareOptions, prepare

    root = tmp_path_factory.mktemp("mix")
    write_corpus(root / "other.txt", n_docs=60, seed=11)
    prepare(PrepareOptions(inputs=[str(root / "other.txt")], tokenizer=str(
        letters_data.parent / "tok"), out=str(root / "other"), seq_len=32, val_fraction=0.2,
        quiet=True))
    return [letters_data, root / "other"]


def loader(sources: list[Path], batch: int, rank: int = 0, world: int = 1) -> MixedLoader:
    sets = [ShardDataset(p) for p in sources]
    mix = [Share(str(p), w, n) for p, w, n in zip(sources, (0.75, 0.25), ("a", "b"),
                                                   strict=True)]
    return MixedLoader(sets, mix, batch, seed=3, rank=rank, world_size=world)


def test_rows_come_at_the_weights_the_same_at_any_world_size_and_resume_bitwise(sources):
    one = loader(sources, 16)
    batches = [next(one) for _ in range(40)]
    drawn = source_tokens(one.state_dict())
    assert set(drawn) == {"a", "b"}
    share = drawn["a"] / (drawn["a"] + drawn["b"])
    assert 0.65 < share < 0.85  # 75% of the rows (tokens: the rows' lengths vary)
    assert sum(drawn.values()) == sum(int(b["attention_mask"].sum()) for b in batches)
    # Two ranks take the halves of the same global batches.
    halves = [loader(sources, 8, r, 2) for r in range(2)]
    for b in batches[:10]:
        got = [next(h) for h in halves]
        assert torch.equal(torch.cat([g["input_ids"] for g in got]), b["input_ids"])
    # Stopped after 25 batches and restored: the next batches are the same.
    first = loader(sources, 16)
    for _ in range(25):
        next(first)
    again = loader(sources, 16)
    again.load_state_dict(json.loads(json.dumps(first.state_dict())))  # as a checkpoint
    for b in batches[25:]:
        assert torch.equal(next(again)["input_ids"], b["input_ids"])


def run(data: str, out: Path, *sets: str, extra: tuple[str, ...] = ()) -> int:
    return main(["pretrain", "--preset", "tiny", "--data", data, "--out", str(out), "--quiet",
                 "--set", "model.num_layers=1", "--set", "model.hidden_size=32", "--set",
                 "model.num_heads=2", "--set", "model.intermediate_size=64", "--set",
                 "model.embedding_size=32", "--set", "train.batch_size=8", "--set",
                 "train.precision=fp32", "--set", "train.log_every=1", "--set",
                 "train.eval_every=0", "--set", "train.save_every=3",
                 *[x for s in sets for x in ("--set", s)], *extra])


def test_a_run_on_a_mixture_counts_each_source_and_resumes_bitwise(sources, tmp_path, capsys):
    a, b = map(str, sources)
    mix = f"{a}:0.7+{b}:0.3"
    assert run(mix, tmp_path / "whole", "train.max_steps=6") == 0
    lines = list(iter_metrics(tmp_path / "whole"))
    for r in lines:
        assert r["tokens_from_data"] + r["tokens_from_other"] == r["tokens"]
    saved = json.loads((tmp_path / "whole/config.json").read_text())
    assert [[m["name"] for m in p] for p in saved["data_mix"]] == [["data", "other"]]
    # Stopped at step 3 and resumed: every line as the uninterrupted run's.
    assert run(mix, tmp_path / "part", "train.max_steps=6", extra=("--stop-after", "3")) == 0
    assert run(mix, tmp_path / "part", "train.max_steps=6", extra=("--resume",)) == 0
    strip = ("tokens_per_s", "mfu", "seconds")
    assert ([{k: v for k, v in r.items() if k not in strip} for r in lines] ==
            [{k: v for k, v in r.items() if k not in strip}
             for r in iter_metrics(tmp_path / "part")])
    # Another mix on --resume is refused; a WSD decay branch may read another mix.
    assert "data_mix" in cli_error(capsys, "pretrain", "--data", f"{a}:0.5+{b}:0.5", "--out",
                                   tmp_path / "part", "--resume")
    assert run(mix, tmp_path / "wsd", "train.max_steps=40", "train.schedule=wsd",
               "train.decay_steps=3", "train.warmup_steps=1",
               extra=("--stop-after", "3")) == 0
    assert main(["pretrain", "--data", f"{a}:0.2+{b}:0.8", "--out", str(tmp_path / "decay"),
                 "--decay-from", str(tmp_path / "wsd/checkpoints/step-0000003"),
                 "--quiet"]) == 0
    branch = json.loads((tmp_path / "decay/config.json").read_text())["data_mix"]
    assert [m["weight"] for m in branch[0]] == [0.2, 0.8]
    decay = list(iter_metrics(tmp_path / "decay"))
    assert [r["step"] for r in decay] == list(range(1, 7))  # the stable phase's, then 3 more
    assert decay[-1]["tokens_from_data"] + decay[-1]["tokens_from_other"] == decay[-1]["tokens"]


def test_each_length_phase_has_its_own_mix_and_mask_rate(sources, tmp_path):
    """128:...:0.3,256:...:0.15 as mmBERT lowers its rate: each phase's masked fraction
    follows its rate; the second phase reads its own mixture."""
    from electra.data.prepare import PrepareOptions, prepare

    a, b = sources
    longer = []
    for src in (a, b):
        text = next(iter(json.loads((src / "meta.json").read_text())["inputs"]))
        out = tmp_path / f"{src.name}-64"
        prepare(PrepareOptions(inputs=[text], tokenizer=str(a.parent / "tok"), out=str(out),
                               seq_len=64, val_fraction=0.2, quiet=True))
        longer.append(out)
    data = f"{a}:0.5+{b}:0.5,{longer[0]}:0.1+{longer[1]}:0.9"
    assert run(data, tmp_path / "r", "train.max_steps=8",
               "train.phases=32:0.5:0.3,64:0.5:0.1") == 0
    lines = list(iter_metrics(tmp_path / "r"))
    assert [r["seq_len"] for r in lines] == [32] * 4 + [64] * 4
    first = np.mean([r["masked_frac"] for r in lines[:4]])
    second = np.mean([r["masked_frac"] for r in lines[4:]])
    assert first > 0.2 and second < 0.15, (first, second)
    assert {"tokens_from_data", "tokens_from_other", "tokens_from_data-64",
            "tokens_from_other-64"} <= set(lines[-1])
    assert lines[3].get("tokens_from_data-64", 0) == 0  # the second mix only from step 5
    assert json.loads((tmp_path / "r/config.json").read_text())["objective"]["mask_prob"] == 0.3


def test_a_config_files_data_table_names_the_mix(sources, tmp_path, capsys):
    """[data] mix in a --config TOML: a folder = weight table (a list of them: a phase
    each) or --data's text; --data wins over it; a table of another form is one line."""
    a, b = sources
    body = ('preset = "tiny"\n[model]\nnum_layers = 1\nhidden_size = 32\nnum_heads = 2\n'
            'intermediate_size = 64\nembedding_size = 32\n[train]\nbatch_size = 8\n'
            'max_steps = 2\neval_every = 0\nlog_every = 1\nprecision = "fp32"\n')
    (tmp_path / "mix.toml").write_text(body + f'[data]\nmix = {{"{a}" = 3, "{b}" = 1}}\n')
    assert main(["pretrain", "--config", str(tmp_path / "mix.toml"), "--out",
                 str(tmp_path / "r"), "--quiet"]) == 0
    saved = json.loads((tmp_path / "r/config.json").read_text())["data_mix"]
    assert [(m["name"], m["weight"]) for m in saved[0]] == [("data", 0.75), ("other", 0.25)]
    (tmp_path / "list.toml").write_text(body + f'[data]\nmix = [{{"{a}" = 1}}]\n')
    assert main(["pretrain", "--config", str(tmp_path / "list.toml"), "--data", f"{a}+{b}",
                 "--out", str(tmp_path / "r2"), "--quiet"]) == 0  # --data wins: equal shares
    saved = json.loads((tmp_path / "r2/config.json").read_text())["data_mix"]
    assert [m["weight"] for m in saved[0]] == [0.5, 0.5]
    (tmp_path / "bad.toml").write_text(body + '[data]\nmix = {"x" = "heavy"}\n')
    assert "is not a folder = weight table" in cli_error(
        capsys, "pretrain", "--config", tmp_path / "bad.toml", "--out", tmp_path / "r3")
    (tmp_path / "none.toml").write_text(body)
    assert "give --data FOLDER" in cli_error(
        capsys, "pretrain", "--config", tmp_path / "none.toml", "--out", tmp_path / "r4")
    assert not (tmp_path / "r3").exists() and not (tmp_path / "r4").exists()
