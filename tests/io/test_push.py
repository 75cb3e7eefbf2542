"""`electra push` against a hub answering the Hugging Face Hub's HTTP API on this machine
(tests/fake_model_hub.py; the real one is out of reach): the run's exported folders on main,
its checkpoints as tagged revisions that read back as the checkpoints they are, a push cut
mid-way that the same command finishes without pushing twice, and the refusals (a refused
token, a missing repository, a tag holding other weights) one line each."""

from __future__ import annotations

import pytest
import torch
from helpers import cli_error

from electra.cli import main
from electra.saved.models import open_model

pytest.importorskip("huggingface_hub")
import huggingface_hub
import huggingface_hub.constants  # (a submodule the package loads lazily)


@pytest.fixture
def hub(monkeypatch, tmp_path):
    import fake_model_hub

    endpoint, server, state = fake_model_hub.start("good-token")
    monkeypatch.setenv("HF_ENDPOINT", endpoint)
    monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", endpoint)  # (read at import)
    monkeypatch.setattr(huggingface_hub.constants, "HUGGINGFACE_CO_URL_TEMPLATE",
                        endpoint + "/{repo_id}/resolve/{revision}/{filename}")
    monkeypatch.setenv("HF_TOKEN", "good-token")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    yield state
    server.shutdown()


@pytest.fixture(scope="module")
def run(letters_data, tmp_path_factory):
    out = tmp_path_factory.mktemp("push") / "run"
    assert main(["pretrain", "--preset", "tiny", "--data", str(letters_data), "--out",
                 str(out), "--quiet", "--set", "model.num_layers=1", "--set",
                 "train.batch_size=4", "--set", "train.max_steps=4", "--set",
                 "train.save_every=2", "--set", "train.keep_checkpoints=5", "--set",
                 "train.precision=fp32"]) == 0
    return out


def push(*args) -> int:
    return main(["push", *map(str, args), "--quiet"])


def test_a_run_and_its_checkpoints_go_to_the_hub_and_read_back(hub, run, tmp_path):
    assert push(run, "--repo", "org/tiny", "--checkpoints", "--create", "--private") == 0
    repo = hub.repos["org/tiny"]
    assert repo.private and set(repo.tags) == {"step-2", "step-4"}
    main_files = repo.commits[repo.branches["main"]]
    assert {"config.json", "model.safetensors", "README.md", "tokenizer.json",
            "generator/config.json", "generator/model.safetensors"} <= set(main_files)
    # each tag reads back (org/name@tag, as --model takes it) as its checkpoint's weights
    for step in (2, 4):
        pushed = open_model(f"org/tiny@step-{step}", "discriminator")["discriminator"]
        local = open_model(run / f"checkpoints/step-{step:07d}", "discriminator")[
            "discriminator"]
        assert all(torch.equal(a, b) for a, b in zip(pushed.state_dict().values(),
                                                     local.state_dict().values(), strict=True))
    # the same command again pushes nothing new: no commit, the tags kept
    commits = len(repo.commits)
    assert push(run, "--repo", "org/tiny", "--checkpoints") == 0
    assert len(repo.commits) == commits


def test_a_push_cut_mid_way_is_finished_by_the_same_command(hub, run, capsys, monkeypatch):
    """Ctrl-C after the second checkpoint's commit, before its tag (the hardest place: the
    hub has the commit, not the name): the same command tags that commit without a new one,
    pushes the final model, and pushes nothing twice."""
    from huggingface_hub import HfApi

    real = HfApi.create_tag

    def cut(self, repo_id, *, tag: str, **kw):
        if tag == "step-4":
            raise KeyboardInterrupt
        return real(self, repo_id, tag=tag, **kw)

    monkeypatch.setattr(HfApi, "create_tag", cut)
    assert main(["push", str(run), "--repo", "org/cut", "--checkpoints", "--create",
                 "--quiet"]) == 130
    assert "interrupted" in capsys.readouterr().err
    repo = hub.repos["org/cut"]
    assert set(repo.tags) == {"step-2"} and len(repo.commits) == 3  # + the hub's first
    monkeypatch.setattr(HfApi, "create_tag", real)
    assert push(run, "--repo", "org/cut", "--checkpoints") == 0
    assert set(repo.tags) == {"step-2", "step-4"}
    assert [m for m in repo.messages if "step" in m] == ["electra: run step-2",
                                                          "electra: run step-4"]
    step_4 = repo.commits[repo.tags["step-4"]]
    assert step_4["model.safetensors"] != repo.commits[repo.tags["step-2"]]["model.safetensors"]


def test_a_dropped_connection_is_one_line_that_says_run_it_again(hub, run, capsys,
                                                                  monkeypatch):
    from huggingface_hub import HfApi

    def dropped(*a, **kw):
        raise ConnectionResetError("Connection reset by peer")

    assert push(run, "--repo", "org/drop", "--create") == 0
    monkeypatch.setattr(HfApi, "upload_folder", dropped)
    said = cli_error(capsys, "push", str(run), "--repo", "org/drop", "--quiet")
    assert "the hub failed (Connection reset by peer); run the same command again" in said


def test_the_refusals_are_one_line_each(hub, run, tmp_path, capsys, monkeypatch):
    args = (str(run), "--repo", "org/x", "--quiet")
    assert "no such repository on the hub" in cli_error(capsys, "push", *args)
    assert "add --create" in cli_error(capsys, "push", *args)
    monkeypatch.setenv("HF_TOKEN", "stale")
    assert "the hub refused the token (401)" in cli_error(capsys, "push", *args, "--create")
    monkeypatch.setenv("HF_TOKEN", "good-token")
    # a tag that holds other weights: another run's step-2
    other = tmp_path / "other"
    assert push(run, "--repo", "org/x", "--checkpoints", "--create") == 0
    repo = hub.repos["org/x"]
    files = dict(repo.commits[repo.tags["step-2"]])
    files["model.safetensors"] = b"other weights"
    repo.commits["f" * 40] = files
    repo.tags["step-2"] = "f" * 40
    assert "has a tag step-2 holding other weights" in cli_error(
        capsys, "push", str(run), "--repo", "org/x", "--checkpoints", "--quiet")
    assert "no such folder" in cli_error(capsys, "push", str(other), "--repo", "org/x")
    assert "give the repository as org/name" in cli_error(capsys, "push", str(run),
                                                          "--repo", "org/x@main")


def test_an_embedding_model_goes_as_its_sentence_transformers_folder(hub, run, tmp_path):
    """A fine-tuned embedding model's push is the folder `electra export` writes for it,
    sentence-transformers' layout at the repository's root (modules.json, the pooling's
    config, the encoder's weights), byte for byte."""
    import json

    rows = [{"query": f"{a} {b}", "positive": f"{b} {a}"} for a in "abcdef" for b in "xy"]
    (tmp_path / "p.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main(["finetune", "--model", str(run), "--task", "embedding", "--train",
                 str(tmp_path / "p.jsonl"), "--dev", str(tmp_path / "p.jsonl"), "--out",
                 str(tmp_path / "ft"), "--quiet", "--set", "epochs=1", "--set",
                 "precision=fp32"]) == 0
    assert push(tmp_path / "ft/seed-1", "--repo", "org/emb", "--create") == 0
    assert main(["export", str(tmp_path / "ft/seed-1"), "--out", str(tmp_path / "st")]) == 0
    repo = hub.repos["org/emb"]
    pushed = repo.commits[repo.branches["main"]]
    local = {p.relative_to(tmp_path / "st").as_posix(): p.read_bytes()
             for p in (tmp_path / "st").rglob("*") if p.is_file()}
    assert "modules.json" in local and any(n.endswith("Pooling/config.json") for n in local)
    assert {n: pushed[n] for n in local if n != "README.md"} == {
        n: b for n, b in local.items() if n != "README.md"}
