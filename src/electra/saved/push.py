"""`electra push`: a model to the Hugging Face Hub through ``huggingface_hub``'s upload API.

What goes to the repository's ``main`` branch is what ``electra export`` writes, laid out so
that the repository loads as it is: a pretraining run's discriminator at the root (with its
card; ``AutoModel.from_pretrained("org/name")``) and its generator in ``generator/``
(``subfolder="generator"``); a fine-tuned model's folder at the root; an embedding model's
sentence-transformers folder at the root (``SentenceTransformer("org/name")``).

With ``checkpoints``, each of the run's checkpoints goes first, in step order, one commit
each, tagged ``step-N`` (``decay-N`` inside a WSD run's decay, a ``--decay-from`` branch's
included), so that ``org/name@step-N`` names it (as Ettin's checkpoint trails do); the final
model is the last commit on ``main``.

A push that stops (Ctrl-C, a dropped connection) is continued by the same command: a tag
already on the hub holding this checkpoint's weights is skipped, files the hub has already are
not sent again (the library compares their hashes). A tag holding other weights, a refused
token and a missing repository are each one line. The token comes from where
``huggingface_hub`` looks (``HF_TOKEN``, ``hf auth login``); the endpoint from
``HF_ENDPOINT``.
"""

from __future__ import annotations

import contextlib
import io
import shutil
import tempfile
from pathlib import Path
from typing import Any

from electra.config import decay_start
from electra.errors import UserError
from electra.io.checkpoint import latest_checkpoint
from electra.io.files import maybe_json
from electra.io.hub import HUB_ID, check_repo_id
from electra.saved.hf import export_hf

KEPT_OUT_OF_COMPARISON = {"README.md", ".gitattributes"}  # a card; the hub's own file


def push(source: str, repo: str, checkpoints: bool = False, create: bool = False,
         private: bool = False, sentence_transformers: str | None = None,
         progress: bool = True) -> dict[str, Any]:
    """Push ``source`` (a run, a checkpoint, a fine-tuned model) to ``repo`` (org/name), with
    its checkpoints as tagged revisions where asked; returns what was pushed and skipped."""
    src = Path(source)
    if not src.is_dir():
        raise UserError(f"push {source}: no such folder; give a pretraining run, a "
                        f"checkpoint or a fine-tuned model")
    if HUB_ID.match(repo) is None or "@" in repo:
        raise UserError(f"--repo {repo}: give the repository as org/name (no @revision: "
                        f"checkpoints are tagged step-N)")
    check_repo_id(repo, repo, "--repo")
    if private and not create:
        raise UserError("--private makes the repository --create creates private; add "
                        "--create (an existing repository keeps its own visibility)")
    steps = _checkpoints(src) if checkpoints else []
    if checkpoints and not steps:
        raise UserError(f"push {source} --checkpoints: {src} holds no checkpoints "
                        f"(RUN/checkpoints/step-N); push without --checkpoints")
    api = _api()
    _check_repo(api, repo, create, private)
    say = print if progress else (lambda *a, **k: None)
    done: dict[str, Any] = {"repo": repo, "tags": [], "skipped": []}
    with tempfile.TemporaryDirectory(prefix="electra-push-") as tmp:
        tags = {t.name: t.target_commit for t in _hub(lambda: api.list_repo_refs(repo).tags,
                                                        repo)}
        for step, folder, tag in steps:
            staged = _stage(folder, Path(tmp) / tag, sentence_transformers)
            if tag in tags:
                if not _same(api, repo, tag, staged):
                    raise UserError(f"push --checkpoints: {repo} has a tag {tag} holding other "
                                    f"weights than {folder}; push to another repository, or "
                                    f"delete the tag on the hub if it is stale")
                done["skipped"].append(tag)
                say(f"push: {tag} is on the hub already (the same weights); skipped")
                continue
            commit = _hub(lambda s=staged, t=tag: api.upload_folder(
                repo_id=repo, folder_path=str(s), commit_message=f"electra: {src.name} {t}"),
                repo)
            _hub(lambda c=commit, t=tag, n=step: api.create_tag(
                repo, tag=t, revision=c.oid, tag_message=f"{src.name} at step {n}"), repo)
            done["tags"].append(tag)
            say(f"push: {tag} -> {repo}@{tag}")
            shutil.rmtree(staged)
        final = _stage(src, Path(tmp) / "final", sentence_transformers)
        commit = _hub(lambda: api.upload_folder(
            repo_id=repo, folder_path=str(final),
            commit_message=f"electra: {src.name}"), repo)
    done["commit"] = commit.oid
    say(f"push: {source} -> {repo} (main, commit {commit.oid[:12]})"
        + (f"; tags {', '.join(done['tags'])} new" if done["tags"] else "")
        + (f", {len(done['skipped'])} already there" if done["skipped"] else ""))
    return done


def _api() -> Any:
    """The hub's API with the token from where huggingface_hub looks; a missing or refused
    token is one line."""
    from huggingface_hub import HfApi, get_token

    token = get_token()
    if not token:
        raise UserError("push: no hub token; set HF_TOKEN, or log in with `hf auth login` "
                        "(a token with write access)")
    api = HfApi(token=token)
    from huggingface_hub.errors import HfHubHTTPError

    try:
        api.whoami()
    except HfHubHTTPError as err:
        status = getattr(err.response, "status_code", None)
        if status in (401, 403):
            raise UserError(f"push: the hub refused the token ({status}); set HF_TOKEN to a "
                            f"valid token with write access, or log in again with "
                            f"`hf auth login`") from None
        raise _unreachable(err) from None
    except _transport_errors() as err:
        raise _unreachable(err) from None
    return api


def _check_repo(api: Any, repo: str, create: bool, private: bool) -> None:
    """The repository exists (made, private where asked, with ``create``)."""
    from huggingface_hub.errors import RepositoryNotFoundError

    try:
        _hub(lambda: api.repo_info(repo), repo)
        return
    except RepositoryNotFoundError:
        if not create:
            raise UserError(f"--repo {repo}: no such repository on the hub (or the token "
                            f"cannot see it); add --create to make it (--private for a "
                            f"private one)") from None
    _hub(lambda: api.create_repo(repo, private=private, exist_ok=True), repo)


def _hub(call: Any, repo: str) -> Any:
    """``call()``, its connection failures one line that says the push continues when run
    again; the hub's own refusals (not found, forbidden) too, naming them."""
    from huggingface_hub.errors import HfHubHTTPError, RepositoryNotFoundError

    try:
        return call()
    except RepositoryNotFoundError:
        raise
    except HfHubHTTPError as err:
        status = getattr(err.response, "status_code", None)
        if status == 403:
            raise UserError(f"push: the hub refused to write to {repo} (403): the token has "
                            f"no write access to it") from None
        raise _unreachable(err) from None
    except _transport_errors() as err:
        raise _unreachable(err) from None


def _transport_errors() -> tuple[type[Exception], ...]:
    """A dropped or refused connection, whichever HTTP client huggingface_hub uses."""
    import importlib

    found: list[type[Exception]] = [OSError]
    for module, name in (("httpx", "TransportError"), ("httpx2", "TransportError"),
                         ("requests", "ConnectionError")):
        try:
            found.append(getattr(importlib.import_module(module), name))
        except (ImportError, AttributeError):
            continue
    return tuple(found)


def _unreachable(err: BaseException) -> UserError:
    first = str(err).strip().splitlines()[0][:160] if str(err).strip() else type(err).__name__
    return UserError(f"push: the hub failed ({first}); run the same command again: what "
                     f"reached the hub is kept and skipped")


def _checkpoints(run: Path) -> list[tuple[int, Path, str]]:
    """(step, folder, tag) of each of ``run``'s checkpoints, in step order: ``decay-N``
    inside a WSD run's decay (a ``--decay-from`` branch's too), ``step-N`` elsewhere."""
    folder = run / "checkpoints"
    if latest_checkpoint(folder) is None:
        return []
    cfg = maybe_json(run / "config.json") or {}
    train = cfg.get("train", {}) if isinstance(cfg, dict) else {}
    decay_from = None
    if train.get("schedule") == "wsd" and isinstance(train.get("max_steps"), int):
        decay_from = decay_start(train["max_steps"], train.get("decay_steps") or 0,
                                 train.get("decay_fraction", 0.1))
    out = []
    for path in sorted(folder.glob("step-*")):
        if not (path / "manifest.json").is_file():
            continue
        step = int(path.name.split("-")[-1])
        kind = "decay" if decay_from is not None and step > decay_from else "step"
        out.append((step, path, f"{kind}-{step}"))
    return out


def _stage(source: Path, to: Path, sentence_transformers: str | None) -> Path:
    """The repository's files for ``source`` in ``to``: ``electra export``'s folders, laid
    out so that the repository loads as it is (see the module's docstring)."""
    with contextlib.redirect_stdout(io.StringIO()):  # export's own "wrote ..." lines
        export_hf(source, to / "export", sentence_transformers=sentence_transformers)
    export, out = to / "export", to / "repo"
    if (export / "discriminator").is_dir():  # a run: the discriminator at the root
        shutil.copytree(export / "discriminator", out)
        if (export / "generator").is_dir():
            shutil.copytree(export / "generator", out / "generator")
    else:
        shutil.copytree(export, out)
    shutil.rmtree(export)
    return out


def _same(api: Any, repo: str, revision: str, staged: Path) -> bool:
    """Whether ``repo@revision`` holds ``staged``'s files (the cards aside), by their hashes:
    git's for small files, SHA-256 for LFS ones."""
    from huggingface_hub.utils import sha

    remote = {f.path: f for f in _hub(lambda: api.list_repo_tree(
        repo, revision=revision, recursive=True), repo) if hasattr(f, "blob_id")}
    local = {p.relative_to(staged).as_posix(): p for p in staged.rglob("*") if p.is_file()}
    names = {n for n in local if Path(n).name not in KEPT_OUT_OF_COMPARISON}
    if names != {n for n in remote if Path(n).name not in KEPT_OUT_OF_COMPARISON}:
        return False
    for name in names:
        data, there = local[name].read_bytes(), remote[name]
        lfs = getattr(there, "lfs", None)
        if lfs is not None:
            if sha.sha_fileobj(io.BytesIO(data)).hex() != lfs.sha256:
                return False
        elif sha.git_hash(data) != there.blob_id:
            return False
    return True
