"""Fuzzed readers and settings: whatever bytes a file holds, or whatever JSON values its rows
hold, every reader returns what it parsed or raises one UserError; so does every way of
giving settings (``--set``, a TOML file, a run's config.json). Never another exception: a
traceback is a bug.

Hypothesis draws the inputs (its examples derandomized, so CI sees the same ones every run,
and bounded in number: the whole file takes about 20 s on 2 cores).
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from electra.errors import UserError  # noqa: E402

# FUZZ_EXAMPLES=2000 draws more (and new ones each run): a deeper search while working.
_MORE = int(os.environ.get("FUZZ_EXAMPLES", "0"))
FUZZ = settings(max_examples=_MORE or 60, deadline=None, derandomize=not _MORE, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow])

# Bytes that look like the formats (a header, separators, quotes, braces, a BOM, bad UTF-8)
# more often than uniform bytes would.
PIECES = st.sampled_from([b"text,label\n", b"text\tlabel\n", b"sentence\tlabel\n", b",", b"\t",
                          b"\n", b"\r\n", b'"', b"{", b"}", b"[", b"]", b":", b"\xef\xbb\xbf",
                          b"\xe9", b"\xff", b"\x00", b"\x07", b"1", b"1.0", b"true", b"null",
                          b"a b", b" ", b"-DOCSTART-", b"#", b"_", b"B-PER", b"O"])
BYTES = st.one_of(st.binary(max_size=200), st.lists(PIECES, max_size=40).map(b"".join))
JSON = st.recursive(st.none() | st.booleans() | st.integers(-2**70, 2**70) |
                    st.floats(allow_nan=True) | st.text(max_size=12),
                    lambda inner: st.lists(inner, max_size=4) |
                    st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=12)


def row_of(keys: list[str]) -> st.SearchStrategy[Any]:
    """A JSON row with the reader's keys (each maybe missing) and any values, or any value."""
    return st.one_of(JSON, st.fixed_dictionaries({}, optional={k: JSON for k in keys}))


def parsed_or_user_error(call: Any) -> None:
    with contextlib.suppress(UserError):  # one UserError is an answer; anything else fails
        call()


@FUZZ
@given(data=BYTES, suffix=st.sampled_from([".csv", ".tsv", ".jsonl"]))
def test_custom_files(tmp_path_factory, data, suffix):
    from electra.data.examples import read_custom

    path = tmp_path_factory.mktemp("f") / f"t{suffix}"
    path.write_bytes(data)
    parsed_or_user_error(lambda: read_custom(path, ["text"], "label"))
    parsed_or_user_error(lambda: read_custom(path, ["text"], "label", regression=True))


@FUZZ
@given(rows=st.lists(row_of(["text", "label", "b"]), min_size=1, max_size=5))
def test_custom_jsonl_rows(tmp_path_factory, rows):
    from electra.data.examples import label_map, read_custom

    path = tmp_path_factory.mktemp("f") / "t.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))

    def read() -> None:
        label_map(read_custom(path, ["text", "b"], "label"))

    parsed_or_user_error(read)


@FUZZ
@given(data=BYTES, task=st.sampled_from(["sst2", "cola", "stsb", "mrpc"]))
def test_glue_files(tmp_path_factory, data, task):
    from electra.tasks.sequence.data import read_glue

    folder = tmp_path_factory.mktemp("g")
    (folder / "train.tsv").write_bytes(data)
    parsed_or_user_error(lambda: read_glue(task, folder, "train"))


SG_KEYS = ["idx", "label", "question", "passage", "premise", "hypothesis", "sentence1",
           "sentence2", "start1", "end1", "start2", "end2", "word", "text", "target", "qas",
           "choice1", "choice2", "pair_id", "version"]


@FUZZ
@given(data=st.one_of(BYTES, st.lists(row_of(SG_KEYS), min_size=1, max_size=4).map(
    lambda rows: "".join(json.dumps(r) + "\n" for r in rows).encode())),
    task=st.sampled_from(["boolq", "cb", "sg-rte", "wic", "wsc", "multirc", "record",
                          "ax-g"]))
def test_superglue_files(tmp_path_factory, data, task):
    from electra.tasks.superglue.data import SUPERGLUE, files, read_split

    spec = SUPERGLUE[task]
    folder = tmp_path_factory.mktemp("s")
    split = "train" if spec.train else "dev"
    (folder / files(spec)[split]).write_bytes(data)
    parsed_or_user_error(lambda: read_split(spec, folder, split))


@FUZZ
@given(data=st.one_of(BYTES, st.lists(row_of(
    ["premise", "choice1", "choice2", "question", "label", "idx", "context", "choices"]),
    min_size=1, max_size=4).map(lambda rows: "".join(json.dumps(r) + "\n"
                                                     for r in rows).encode())),
    copa=st.booleans())
def test_choice_files(tmp_path_factory, data, copa):
    from electra.tasks.choice.data import read_choices

    path = tmp_path_factory.mktemp("c") / "train.jsonl"
    path.write_bytes(data)
    parsed_or_user_error(lambda: read_choices(path, copa))


@FUZZ
@given(data=st.one_of(BYTES, st.lists(row_of(["tokens", "tags"]), min_size=1, max_size=4).map(
    lambda rows: "".join(json.dumps(r) + "\n" for r in rows).encode())),
    suffix=st.sampled_from([".conll", ".conllu", ".jsonl", ".txt"]))
def test_tagging_files(tmp_path_factory, data, suffix):
    from electra.tasks.tagging.data import read_tagged

    path = tmp_path_factory.mktemp("t") / f"t{suffix}"
    path.write_bytes(data)
    parsed_or_user_error(lambda: read_tagged(path))


SQUAD = st.fixed_dictionaries({}, optional={
    "version": JSON, "data": st.one_of(JSON, st.lists(st.fixed_dictionaries({}, optional={
        "title": JSON, "paragraphs": st.one_of(JSON, st.lists(st.fixed_dictionaries({}, optional={
            "context": JSON, "qas": st.one_of(JSON, st.lists(st.fixed_dictionaries({}, optional={
                "id": JSON, "question": JSON, "is_impossible": JSON,
                "answers": st.one_of(JSON, st.lists(row_of(["text", "answer_start"]),
                                                    max_size=2))}), max_size=2))}),
            max_size=2))}), max_size=2))})


@FUZZ
@given(doc=st.one_of(JSON, SQUAD), training=st.booleans())
def test_squad_files(tmp_path_factory, doc, training):
    from electra.tasks.qa.data import read_squad

    path = tmp_path_factory.mktemp("q") / "train.json"
    path.write_text(json.dumps(doc))
    parsed_or_user_error(lambda: read_squad(path, training))


@FUZZ
@given(data=BYTES)
def test_squad_bytes(tmp_path_factory, data):
    from electra.tasks.qa.data import read_squad

    path = tmp_path_factory.mktemp("q") / "train.json"
    path.write_bytes(data)
    parsed_or_user_error(lambda: read_squad(path, True))


KEYS = ["train.lr", "train.max_steps", "train.batch_size", "model.hidden_size", "lr",
        "objective.mask_prob", "train.precision", "train.probe_epochs", "nope", "train.",
        "model.num_heads", "objective.kind", "train.threads", "epochs", "max_step",
        "doc_stride", "pooling", "family"]
VALUES = st.one_of(st.text(max_size=10), st.sampled_from(
    ["1e400", "-1", "nan", "inf", "0", "1e9", "true", "maybe", "2**64", "1" * 30, ""]))


@FUZZ
@given(items=st.lists(st.one_of(st.text(max_size=20), st.builds(
    lambda k, v: f"{k}={v}", st.sampled_from(KEYS), VALUES)), max_size=4))
def test_set_items(items):
    from electra.run_config import load_run_config
    from electra.tasks.registry import load_finetune_config

    parsed_or_user_error(lambda: load_run_config("tiny", None, items))
    parsed_or_user_error(lambda: load_finetune_config(items))


@FUZZ
@given(data=st.one_of(BYTES, st.builds(
    lambda k, v: f'preset = "tiny"\n[{k.split(".")[0]}]\n{k.split(".")[-1]} = {v}\n'.encode(),
    st.sampled_from([k for k in KEYS if "." in k]), st.sampled_from(
        ['"x"', "1e400", "-1", "nan", "[1, 2]", "{a = 1}", "true", "1979-05-27", "0x10"]))))
def test_config_files(tmp_path_factory, data):
    from electra.run_config import load_run_config

    path = tmp_path_factory.mktemp("c") / "c.toml"
    path.write_bytes(data)
    parsed_or_user_error(lambda: load_run_config(None, str(path)))


@FUZZ
@given(saved=st.one_of(JSON, st.fixed_dictionaries({}, optional={
    "model": st.one_of(JSON, st.fixed_dictionaries({}, optional={"hidden_size": JSON,
                                                                  "num_heads": JSON})),
    "objective": JSON, "train": st.one_of(JSON, st.fixed_dictionaries(
        {}, optional={"lr": JSON, "max_steps": JSON})), "tokenizer_sha256": JSON})))
def test_a_runs_config_json(tmp_path_factory, saved):
    from electra.run_config import resumed_run_config

    run = tmp_path_factory.mktemp("r")
    (run / "config.json").write_text(json.dumps(saved))
    parsed_or_user_error(lambda: resumed_run_config(run, ["train.max_steps=3"]))


def test_the_fuzzed_inputs_reach_the_parsers(tmp_path: Path):
    """A sanity check that the strategies are not all refused at the door: a plain valid
    file of each kind parses."""
    from electra.data.examples import read_custom

    (tmp_path / "t.csv").write_bytes(b"\xef\xbb\xbftext,label\na b,1\nc,0\n")
    assert [e.label for e in read_custom(tmp_path / "t.csv", ["text"], "label")] == ["1", "0"]
    (tmp_path / "t.jsonl").write_bytes(b'\xef\xbb\xbf{"text": "a", "label": 1.0}\n')
    assert [e.label for e in read_custom(tmp_path / "t.jsonl", ["text"], "label")] == ["1"]
