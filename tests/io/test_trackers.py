"""Trackers (``train.log_to`` / ``log_to``): MLflow's store and W&B's offline run hold the
metrics lines of ``metrics.jsonl``, read back with each library's own reader (MLflow's
client; W&B's record schema, ``wandb_internal_pb2.Record``), the config as parameters, and a
resumed run continues the same tracker runs."""

from __future__ import annotations

import json
import re
import struct
from pathlib import Path

import pytest
from helpers import cli_error, small_model, write_sentiment

from electra.cli import main
from electra.commands.pretrain import PretrainOptions, pretrain
from electra.config import TrainConfig
from electra.data.tokenizer import train_tokenizer
from electra.io.trackers import flatten, numbers
from electra.run_config import RunConfig
from electra.train.metrics import TIMING_KEYS, iter_metrics

pytest.importorskip("mlflow", reason="the track extra (make setup installs it)")
pytest.importorskip("wandb", reason="the track extra (make setup installs it)")


@pytest.fixture(autouse=True)
def offline(monkeypatch, tmp_path):
    for key in ("MLFLOW_TRACKING_URI", "MLFLOW_EXPERIMENT_NAME", "WANDB_API_KEY",
                "WANDB_PROJECT"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # no netrc login, no W&B settings


def config(**train) -> RunConfig:
    t = dict(lr=1e-3, batch_size=8, warmup_steps=2, max_steps=6, log_every=1, eval_every=3,
             eval_batches=1, save_every=3, precision="fp32", seed=3,
             log_to="tensorboard,mlflow,wandb")
    return RunConfig(model=small_model(), train=TrainConfig(**{**t, **train}))


def mlflow_runs(root: Path) -> list:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{root.resolve() / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("electra")
    return client, client.search_runs([experiment.experiment_id])


def mlflow_lines(client, run) -> dict[int, dict[str, float]]:
    """{step: {metric: value}}, the last value logged per step."""
    lines: dict[int, dict[str, float]] = {}
    for key in run.data.metrics:
        for m in sorted(client.get_metric_history(run.info.run_id, key),
                        key=lambda m: m.timestamp):
            lines.setdefault(m.step, {})[key] = m.value
    return lines


def wandb_records(folder: Path) -> list:
    """The records of a W&B offline run (``run-ID.wandb``: ':W&B', magic, version, then
    LevelDB log blocks of 32 KiB holding ``Record`` protobufs)."""
    from wandb.proto import wandb_internal_pb2 as pb

    out = []
    for path in sorted(folder.glob("wandb/offline-run-*/run-*.wandb")):  # one a session
        out += _records(path.read_bytes(), pb.Record)
    return out


def _records(data: bytes, record_type: type) -> list:
    pos, part, out = 7, b"", []
    assert data[:4] == b":W&B"
    while pos + 7 <= len(data):
        left = 32768 - pos % 32768
        if left < 7:
            pos += left
            continue
        _, n, kind = struct.unpack("<IHB", data[pos : pos + 7])
        part, pos = part + data[pos + 7 : pos + 7 + n], pos + 7 + n
        if kind in (1, 4):  # a whole record, or its last piece
            record = record_type()
            record.ParseFromString(part)
            out.append(record)
            part = b""
    return out


def wandb_lines(folder: Path) -> dict[int, dict[str, float]]:
    lines: dict[int, dict[str, float]] = {}
    for r in wandb_records(folder):
        if r.WhichOneof("record_type") == "history":
            items = {i.key or "/".join(i.nested_key): json.loads(i.value_json)
                     for i in r.history.item}
            lines[r.history.step.num] = {k: v for k, v in items.items()
                                         if not k.startswith("_")}
    return lines


def test_mlflow_and_wandb_hold_the_metrics_lines_and_the_config(letters_data, tmp_path):
    out = tmp_path / "run"
    cfg = config()
    pretrain(PretrainOptions(data=str(letters_data), out=str(out), config=cfg,
                             progress=False))
    lines = {r["step"]: numbers(r) for r in iter_metrics(out)}
    assert sorted(lines) == [1, 2, 3, 4, 5, 6] and "val_disc_auc" in lines[3]
    client, runs = mlflow_runs(out)
    assert len(runs) == 1 and runs[0].info.run_name == "run"
    assert mlflow_lines(client, runs[0]) == lines
    params = runs[0].data.params
    assert params["train.lr"] == "0.001" and params["model.hidden_size"] == str(
        cfg.model.hidden_size)
    assert runs[0].info.status == "FINISHED"
    assert wandb_lines(out) == lines
    (run,) = [r.run for r in wandb_records(out) if r.WhichOneof("record_type") == "run"]
    assert {i.key: json.loads(i.value_json) for i in run.config.update}["train.lr"] == 0.001
    assert (out / "tb").is_dir()
    ids = json.loads((out / "trackers.json").read_text())
    assert ids["mlflow"] == runs[0].info.run_id and ids["wandb"] == run.run_id


def test_a_resumed_run_continues_the_same_tracker_runs(letters_data, tmp_path):
    out = tmp_path / "run"
    opts = dict(data=str(letters_data), out=str(out), config=config(), progress=False)
    pretrain(PretrainOptions(**opts, stop_after=4))  # its last checkpoint: step 3
    pretrain(PretrainOptions(**opts, resume=True))
    lines = {r["step"]: numbers(r) for r in iter_metrics(out)}
    client, runs = mlflow_runs(out)
    assert len(runs) == 1  # the same run, continued
    logged = mlflow_lines(client, runs[0])
    timing = TIMING_KEYS  # step 4 was logged twice; its timing differs
    assert {s: {k: v for k, v in m.items() if k not in timing} for s, m in logged.items()} \
        == {s: {k: v for k, v in m.items() if k not in timing} for s, m in lines.items()}
    sessions = sorted(out.glob("wandb/offline-run-*"))  # W&B: a folder each session,
    assert len(sessions) == 2  # of one run id, which `wandb sync` merges
    # offline-run-DATE_TIME-ID, and W&B adds -1 to a second session's folder that starts in
    # the same second as the first (a fast machine): the id is the part after the time
    ids = {re.fullmatch(r"offline-run-\d{8}_\d{6}-([^-]+)(-\d+)?", p.name)[1]
           for p in sessions}
    assert len(ids) == 1, [p.name for p in sessions]
    assert {s: {k: v for k, v in m.items() if k not in timing}
            for s, m in wandb_lines(out).items()} == {
        s: {k: v for k, v in m.items() if k not in timing} for s, m in lines.items()}


def test_finetuning_seeds_are_runs_of_one_group(tmp_path):
    write_sentiment(tmp_path / "train.csv", 60, 0)
    write_sentiment(tmp_path / "dev.csv", 20, 1)
    train_tokenizer([str(tmp_path / "train.csv")], 100, tmp_path / "tok")
    assert main(["finetune", "--random-init", "tiny", "--tokenizer", str(tmp_path / "tok"),
                 "--task", "custom", "--train", str(tmp_path / "train.csv"), "--dev",
                 str(tmp_path / "dev.csv"), "--out", str(tmp_path / "ft"), "--quiet",
                 "--seeds", "1,2", "--set", "epochs=1", "--set", "log_to=mlflow"]) == 0
    client, runs = mlflow_runs(tmp_path / "ft")
    assert sorted(r.info.run_name for r in runs) == ["ft/seed-1", "ft/seed-2"]
    assert {r.data.tags["electra.group"] for r in runs} == {"ft"}
    for r in runs:
        seed = tmp_path / "ft" / r.info.run_name.split("/")[1]
        assert mlflow_lines(client, r) == {x["step"]: numbers(x) for x in iter_metrics(seed)}
        assert r.data.params["finetune.epochs"] == "1"


def test_flatten_and_numbers():
    assert flatten({"a": {"b": 1, "c": {"d": "x"}}, "e": 2}) == {"a.b": 1, "a.c.d": "x",
                                                                 "e": 2}
    assert numbers({"step": 3, "loss": 1.5, "ok": True, "n": 2, "x": float("nan"),
                    "s": "t"}) == {"loss": 1.5, "n": 2.0}


@pytest.mark.parametrize("module, setting, words", [
    ("wandb", "train.log_to=wandb", "wandb is not installed; pip install 'electra[track]'"),
    ("pytorch_optimizer", "train.optimizer=lamb", "train.optimizer=lamb: needs "
     "pytorch-optimizer, which is not installed; pip install 'electra[optim]'")])
def test_an_extra_that_is_not_installed_is_named(letters_data, tmp_path, capsys, monkeypatch,
                                                 module, setting, words):
    """A tracker or an optimizer from an extra that is not installed: one line naming it."""
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == module else real(name, *a))
    err = cli_error(capsys, "pretrain", "--preset", "tiny", "--data", letters_data, "--out",
                    tmp_path / "o", "--set", setting)
    assert words in err
    assert not (tmp_path / "o").exists()


def test_an_unreachable_mlflow_server_is_one_line(letters_data, tmp_path, capsys,
                                                  monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:9")  # discard: refused
    err = cli_error(capsys, "pretrain", "--preset", "tiny", "--data", letters_data, "--out",
                    tmp_path / "o", "--set", "train.log_to=mlflow")
    assert "MLFLOW_TRACKING_URI=http://127.0.0.1:9 does not answer" in err
    assert not (tmp_path / "o").exists()


def test_runs_inside_a_group_share_its_store_and_are_named_by_their_folders(tmp_path):
    """electra compare's trackers.grouped(DIR): a pretraining run and a fine-tuning seed (in
    its staging folder) log to DIR/mlflow.db, group DIR, named by their paths under it; a
    run outside DIR keeps its own store."""
    from electra.io.trackers import Trackers, Tracking, grouped

    root = tmp_path / "cmp"
    folders = [root / "pretrain/electra", root / "finetune/electra-100/sent-ab12.partial/seed-1"]
    with grouped(root):
        for i, folder in enumerate(folders):
            folder.mkdir(parents=True)
            t = Trackers(folder, 0, Tracking(("mlflow",), root=folder, name=folder.name),
                         {"train": {"lr": 0.1}})
            t.log({"step": 1, "loss": float(i)})
            t.close()
    _, runs = mlflow_runs(root)
    assert sorted(r.info.run_name for r in runs) == [
        "finetune/electra-100/sent-ab12/seed-1", "pretrain/electra"]
    assert {r.data.tags["electra.group"] for r in runs} == {"cmp"}
    assert not any((f / "mlflow.db").exists() for f in folders)
    (tmp_path / "alone").mkdir()
    with grouped(root):  # a folder outside the group's: its own store, as without one
        Trackers(tmp_path / "alone", 0, Tracking(("mlflow",), root=tmp_path / "alone",
                                                 name="alone"), {}).close()
    assert (tmp_path / "alone/mlflow.db").is_file()


@pytest.fixture
def tiny_toml(tmp_path) -> Path:
    path = tmp_path / "tiny.toml"
    path.write_text(
        'preset = "tiny"\n[model]\nhidden_size = 32\nembedding_size = 32\nnum_layers = 1\n'
        'num_heads = 2\nintermediate_size = 64\nmax_position_embeddings = 64\n'
        '[train]\nbatch_size = 8\nmax_steps = 4\nwarmup_steps = 1\nsave_every = 2\n'
        'eval_every = 2\neval_batches = 1\nlog_every = 1\nprecision = "fp32"\n')
    return path


@pytest.mark.parametrize("env, log_to, words", [
    ({"MLFLOW_TRACKING_URI": "file:///{t}/mlruns"}, "mlflow",
     "is MLflow's file store, which MLflow 3 refuses; set MLFLOW_ALLOW_FILE_STORE=true"),
    ({"MLFLOW_TRACKING_URI": "{t}/mlruns"}, "mlflow", "MLFLOW_ALLOW_FILE_STORE=true"),
    ({"MLFLOW_TRACKING_URI": "sqlite:///{t}/notes.txt"}, "mlflow",
     "notes.txt is not an SQLite database"),
    ({"MLFLOW_TRACKING_URI": "sqlite:///{t}/no/such/mlflow.db"}, "mlflow",
     "the folder {t}/no/such does not exist"),
    ({"WANDB_PROJECT": "team/project"}, "wandb", "WANDB_PROJECT='team/project' is refused "
     "by W&B"),
    ({"WANDB_RUN_ID": "a:b"}, "wandb", "WANDB_RUN_ID='a:b' is refused by W&B"),
], ids=["file-uri", "plain-path", "not-sqlite", "no-folder", "wandb-project", "wandb-run-id"])
def test_a_tracker_setting_it_cannot_use_is_one_line_before_any_work(
        letters_data, tiny_toml, tmp_path, capsys, monkeypatch, env, log_to, words):
    """The environment names a store or project the tracker refuses: one line before any
    work, nothing made, the named file as it was."""
    (tmp_path / "notes.txt").write_text("my notes\n")
    for key, value in env.items():
        monkeypatch.setenv(key, value.format(t=tmp_path))
    before = sorted(p.name for p in tmp_path.iterdir())
    for command in (("pretrain", "--config", tiny_toml, "--data", letters_data, "--set",
                     f"train.log_to={log_to}"),
                    ("finetune", "--random-init", "tiny", "--tokenizer", letters_data,
                     "--task", "sst2", "--data", tmp_path, "--set", f"log_to={log_to}")):
        err = cli_error(capsys, *command, "--out", tmp_path / "o")
        assert words.format(t=tmp_path) in err, err
        assert sorted(p.name for p in tmp_path.iterdir()) == before
    assert (tmp_path / "notes.txt").read_text() == "my notes\n"


def test_mlflow_file_store_with_its_opt_out_works(letters_data, tiny_toml, tmp_path,
                                                  monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", (tmp_path / "mlruns").as_uri())
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    assert main(["pretrain", "--config", str(tiny_toml), "--data", str(letters_data), "--out",
                 str(tmp_path / "o"), "--quiet", "--set", "train.log_to=mlflow"]) == 0
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=(tmp_path / "mlruns").as_uri())
    (run,) = client.search_runs([client.get_experiment_by_name("electra").experiment_id])
    assert run.info.status == "FINISHED" and 4 in {
        m.step for m in client.get_metric_history(run.info.run_id, "loss")}


def test_a_broken_tracker_install_is_one_line_and_leaves_nothing(letters_data, tiny_toml,
                                                                 tmp_path, capsys,
                                                                 monkeypatch):
    import importlib

    real = importlib.import_module

    def broken(name, *a, **k):
        if name == "wandb":
            raise ImportError("cannot import name 'x' from partially initialized module")
        return real(name, *a, **k)

    monkeypatch.setattr(importlib, "import_module", broken)
    err = cli_error(capsys, "pretrain", "--config", tiny_toml, "--data", letters_data,
                    "--out", tmp_path / "o", "--set", "train.log_to=tensorboard,wandb")
    assert "wandb is installed but fails to import (ImportError: cannot import name" in err
    assert "pip install --force-reinstall wandb" in err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("ids, words", [
    ("{not json", "trackers.json is not JSON"),
    ('["mlflow"]', "trackers.json is not a JSON object of tracker names and run ids"),
    ('{"mlflow": "0123456789abcdef0123456789abcdef"}', "names MLflow run "
     "0123456789abcdef0123456789abcdef, which the store"),
], ids=["not-json", "a-list", "missing-run"])
def test_a_resume_with_trackers_json_it_cannot_use_is_one_line_and_keeps_the_run(
        letters_data, tiny_toml, tmp_path, capsys, ids, words):
    args = ["pretrain", "--config", tiny_toml, "--data", letters_data, "--out", tmp_path / "o",
            "--quiet", "--set", "train.log_to=mlflow"]
    assert main([str(a) for a in (*args, "--stop-after", "2")]) == 0
    (tmp_path / "o/trackers.json").write_text(ids)
    before = {p: p.read_bytes() for p in (tmp_path / "o").rglob("*")
              if p.is_file() and p.suffix != ".db"}
    err = cli_error(capsys, *args, "--resume")
    assert words in err, err
    after = {p: p.read_bytes() for p in (tmp_path / "o").rglob("*")
             if p.is_file() and p.suffix != ".db"}
    assert after == before


def test_a_store_half_made_by_an_interrupted_command_is_made_again(letters_data, tiny_toml,
                                                                   tmp_path, monkeypatch):
    """MLflow builds OUT/mlflow.db's tables under a temporary name: a command stopped then
    leaves mlflow.db.*.partial (never a half-made mlflow.db), and --resume makes it anew."""
    from electra.io import trackers

    out = tmp_path / "o"
    args = ["pretrain", "--config", str(tiny_toml), "--data", str(letters_data), "--out",
            str(out), "--quiet", "--set", "train.log_to=mlflow"]

    real = trackers.os.replace

    def stopped(src, *a):
        if str(src).endswith(".partial") and "mlflow.db." in str(src):
            raise KeyboardInterrupt
        return real(src, *a)

    with monkeypatch.context() as m:
        m.setattr(trackers.os, "replace", stopped)
        assert main(args) == 130
    assert len(list(out.glob("mlflow.db.*.partial"))) == 1
    assert not (out / "mlflow.db").exists()
    assert main([*args, "--resume"]) == 0
    assert not list(out.glob("mlflow.db.*.partial"))
    client, runs = mlflow_runs(out)
    assert len(runs) == 1 and runs[0].info.status == "FINISHED"
    experiment = client.get_experiment_by_name("electra")
    assert experiment.artifact_location == (out / "mlartifacts").resolve().as_uri()


def test_wandb_dir_is_honoured(letters_data, tiny_toml, tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wb"))
    (tmp_path / "wb").mkdir()
    assert main(["pretrain", "--config", str(tiny_toml), "--data", str(letters_data), "--out",
                 str(tmp_path / "o"), "--quiet", "--set", "train.log_to=wandb"]) == 0
    assert list((tmp_path / "wb").glob("wandb/offline-run-*"))
    assert not (tmp_path / "o/wandb").exists()
