"""Where a run's metrics lines go besides ``metrics.jsonl``: TensorBoard, MLflow, W&B.

``log_to`` (``train.log_to`` when pretraining, ``log_to`` when fine-tuning) names any of
them, comma-separated; TensorBoard alone by default. Each tracker gets the run's resolved
config once, as parameters, and every metrics line as metrics at its step. A run keeps its
tracker runs' ids in ``RUN/trackers.json``, so ``--resume`` continues the same runs (the
steps after the checkpoint it resumes from are logged again, with the same values but for
timing).

- **MLflow**: the server or store of ``MLFLOW_TRACKING_URI``, else a SQLite store in the
  command's ``--out`` (``OUT/mlflow.db``: ``mlflow ui --backend-store-uri
  sqlite:///OUT/mlflow.db``); the experiment ``MLFLOW_EXPERIMENT_NAME``, else ``electra``.
  Its artifacts go beside that store (``OUT/mlartifacts``). MLflow's file store (a ``file:``
  URI or a path) needs ``MLFLOW_ALLOW_FILE_STORE=true``, MLflow 3's own opt-out.
- **W&B**: the project ``WANDB_PROJECT``, else ``electra``; offline (files under
  ``WANDB_DIR``, else ``RUN/wandb``; ``wandb sync`` uploads them) unless ``WANDB_MODE`` says
  otherwise or the user has logged in (``WANDB_API_KEY`` or ``wandb login``'s netrc entry).

Before a command does any work, each named tracker must import and the store or project its
environment names must be usable (:func:`check_reachable`); a problem is one line.

Fine-tuning seeds are runs of their own, grouped by the command's ``--out`` name. Inside
:func:`grouped` (``electra compare``), every run logs to one store in its folder, in one group
named after it, each run named by its path there (``pretrain/electra``,
``finetune/electra-100/sst2-KEY/seed-1``).
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import importlib.util
import json
import math
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from electra.errors import UserError
from electra.io.files import write_json

TRACKERS = {"tensorboard": "tensorboard", "mlflow": "mlflow", "wandb": "wandb"}
"""Each tracker's name in ``log_to`` and the module it needs."""
EXTRA = "pip install 'electra[track]'"


def parse_log_to(value: str, key: str) -> tuple[str, ...]:
    """``log_to``'s names, checked: known, not repeated, installed (a one-line error naming
    the fix otherwise). Empty: ``metrics.jsonl`` only."""
    names = tuple(n.strip() for n in value.split(",") if n.strip())
    for name in names:
        if name not in TRACKERS:
            raise UserError(f"{key}={value}: unknown tracker {name!r}; choose any of "
                            f"{', '.join(TRACKERS)}, comma-separated (empty: metrics.jsonl "
                            f"only)")
        if importlib.util.find_spec(TRACKERS[name]) is None:
            raise UserError(f"{key}={value}: {name} is not installed; {EXTRA} (or pip "
                            f"install {TRACKERS[name]})")
    if len(set(names)) < len(names):
        raise UserError(f"{key}={value}: a tracker is named twice; name each once")
    return names


def check_reachable(names: tuple[str, ...], key: str) -> None:
    """Before any work (nothing written yet): each named tracker imports, and the store or
    project its environment names can be used; each problem one line naming the fix."""
    for name in names:
        _check_import(name, key)
    if "mlflow" in names:
        _check_mlflow(key)
    if "wandb" in names:
        _check_wandb(key)


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0][:200] if text else ''}"


def _check_import(name: str, key: str) -> None:
    """A tracker that is found but fails to import (a broken or mismatched install)."""
    try:
        importlib.import_module(TRACKERS[name])
    except Exception as err:
        raise UserError(f"{key}: {name} is installed but fails to import ({_first_line(err)});"
                        f" reinstall it (pip install --force-reinstall {TRACKERS[name]}) or "
                        f"leave it out of {key}") from None


def _check_mlflow(key: str) -> None:
    uri = os.environ.get("MLFLOW_TRACKING_URI", "")
    if not uri:
        return  # a store in --out (made atomically when the run starts)
    where = f"{key}: MLFLOW_TRACKING_URI={uri}"
    if uri.startswith(("http://", "https://")):
        import urllib.request

        try:
            urllib.request.urlopen(uri.rstrip("/") + "/health", timeout=5).close()
        except OSError as err:
            raise UserError(f"{where} does not answer ({err}); start the server, fix the "
                            f"address, or unset it for a local store") from None
        return
    scheme = uri.split(":", 1)[0] if "://" in uri or uri.startswith("file:") else ""
    if scheme in ("", "file"):
        allowed = os.environ.get("MLFLOW_ALLOW_FILE_STORE", "").lower() in ("1", "true")
        if not allowed:
            raise UserError(f"{where} is MLflow's file store, which MLflow 3 refuses; set "
                            f"MLFLOW_ALLOW_FILE_STORE=true to use it (MLflow's own opt-out), "
                            f"name an SQLite store (sqlite:///PATH/mlflow.db), or unset it for "
                            f"a store in --out")
    elif scheme == "sqlite":
        path = Path(uri.split(":///", 1)[-1]) if ":///" in uri else None
        if path is not None and path.exists():
            head = b""
            with contextlib.suppress(OSError), open(path, "rb") as f:
                head = f.read(16)
            if not path.is_file() or (head and head != b"SQLite format 3\x00"):
                raise UserError(f"{where}: {path} is not an SQLite database; name a new file "
                                f"or an MLflow store, or unset it for a store in --out")
        elif path is not None and not path.parent.is_dir():
            raise UserError(f"{where}: the folder {path.parent} does not exist; make it or "
                            f"name another path")
    else:
        return  # a database server or a hosted store: MLflow's own client says
    try:
        from mlflow.tracking import MlflowClient

        MlflowClient(tracking_uri=uri).search_experiments(max_results=1)
    except Exception as err:
        raise UserError(f"{where} cannot be opened ({_first_line(err)}); fix it or unset it "
                        f"for a store in --out") from None


def _check_wandb(key: str) -> None:
    """W&B's own checks of the project and run id its environment names."""
    import wandb

    for env, field in (("WANDB_PROJECT", "project"), ("WANDB_RUN_ID", "run_id")):
        value = os.environ.get(env)
        if value is None:
            continue
        try:
            wandb.Settings(**{field: value})
        except Exception as err:
            raise UserError(f"{key}: {env}={value!r} is refused by W&B "
                            f"({_first_line(err)}); fix it or unset it") from None


@dataclass(frozen=True)
class Tracking:
    """Where a run's trackers write: ``log_to``'s names, the command's ``--out`` (``root``:
    MLflow's local store), the run's name, the group it belongs to (fine-tuning's seeds)."""

    log_to: tuple[str, ...] = ("tensorboard",)
    root: Path | None = None
    name: str = ""
    group: str | None = None


def flatten(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"train": {"lr": 1}}`` -> ``{"train.lr": 1}``."""
    out: dict[str, Any] = {}
    for key, value in config.items():
        if isinstance(value, dict):
            out |= flatten(value, f"{prefix}{key}.")
        else:
            out[f"{prefix}{key}"] = value
    return out


def numbers(record: dict[str, Any]) -> dict[str, float]:
    """A metrics line's finite numbers but its step."""
    return {k: float(v) for k, v in record.items() if k != "step" and not isinstance(v, bool)
            and isinstance(v, int | float) and math.isfinite(v)}


class TensorBoard:
    def __init__(self, folder: Path, start_step: int, **_: Any) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(str(folder / "tb"), purge_step=start_step or None)

    def log(self, record: dict[str, Any]) -> None:
        for key, value in numbers(record).items():
            self.writer.add_scalar(key, value, record["step"])

    def close(self) -> None:
        self.writer.close()


class MLflow:
    def __init__(self, folder: Path, start_step: int, tracking: Tracking,
                 config: dict[str, Any], run_id: str | None) -> None:
        import logging

        from mlflow.entities import Param
        from mlflow.tracking import MlflowClient

        for name in ("mlflow", "alembic"):  # its store's table set-up, line by line
            logging.getLogger(name).setLevel(logging.WARNING)

        root = (tracking.root or folder).resolve()
        uri = os.environ.get("MLFLOW_TRACKING_URI")
        artifacts = None
        if not uri:  # a store in --out, its artifacts beside it (not in the working folder)
            uri = _local_store(root / "mlflow.db")
            artifacts = (root / "mlartifacts").as_uri()
        self.client = MlflowClient(tracking_uri=uri)
        name = os.environ.get("MLFLOW_EXPERIMENT_NAME", "electra")
        experiment = self.client.get_experiment_by_name(name)
        exp_id = (experiment.experiment_id if experiment else
                  self.client.create_experiment(name, artifact_location=artifacts))
        if run_id is not None:
            try:
                self.client.get_run(run_id)
            except Exception:
                raise UserError(f"{folder / 'trackers.json'} names MLflow run {run_id}, which "
                                f"the store {uri} does not hold; point MLFLOW_TRACKING_URI at "
                                f"the run's store, or remove the mlflow entry from that file "
                                f"to continue in a new MLflow run") from None
            self.client.update_run(run_id, status="RUNNING")
        else:
            tags = {"electra.group": tracking.group} if tracking.group else {}
            run_id = self.client.create_run(exp_id, run_name=tracking.name, tags=tags
                                            ).info.run_id
            params = [Param(k, json.dumps(v)[:6000] if not isinstance(v, str) else v[:6000])
                      for k, v in flatten(config).items()]
            for i in range(0, len(params), 100):  # MLflow's most a batch
                self.client.log_batch(run_id, params=params[i : i + 100])
        self.run_id = run_id

    def log(self, record: dict[str, Any]) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        self.client.log_batch(self.run_id, metrics=[
            Metric(k, v, now, record["step"]) for k, v in numbers(record).items()])

    def close(self) -> None:
        self.client.set_terminated(self.run_id)


def _local_store(path: Path) -> str:
    """The URI of the SQLite store at ``path``, made whole first: MLflow builds its tables
    in a new file for seconds, so it builds them under a temporary name, renamed when done
    (a command killed then leaves no half-made store that every --resume would refuse)."""
    if not path.exists():
        from mlflow.tracking import MlflowClient

        for old in path.parent.glob(f"{path.name}.*.partial"):  # what a killed command left
            old.unlink(missing_ok=True)
        # a new name each time: MLflow keeps a store per URI for the process's life
        part = path.with_name(f"{path.name}.{os.getpid()}-{time.monotonic_ns()}.partial")
        MlflowClient(tracking_uri=f"sqlite:///{part}").search_experiments(max_results=1)
        os.replace(part, path)
    return f"sqlite:///{path}"


class WandB:
    def __init__(self, folder: Path, start_step: int, tracking: Tracking,
                 config: dict[str, Any], run_id: str | None) -> None:
        import wandb

        mode = os.environ.get("WANDB_MODE") or ("online" if _wandb_login() else "offline")
        self.run = wandb.init(
            project=os.environ.get("WANDB_PROJECT", "electra"),
            dir=os.environ.get("WANDB_DIR") or str(folder),
            id=run_id, resume="allow", name=tracking.name,
            group=tracking.group, config=flatten(config), mode=mode,
            settings=wandb.Settings(console="off", silent=True, x_disable_stats=True))
        self.run_id = self.run.id

    def log(self, record: dict[str, Any]) -> None:
        self.run.log(numbers(record), step=record["step"])

    def close(self) -> None:
        self.run.finish()


def _wandb_login() -> bool:
    if os.environ.get("WANDB_API_KEY"):
        return True
    import netrc

    try:
        return netrc.netrc().authenticators("api.wandb.ai") is not None
    except (OSError, netrc.NetrcParseError):
        return False


_GROUP: contextvars.ContextVar[Path | None] = contextvars.ContextVar("electra_tracking_group",
                                                                     default=None)


@contextlib.contextmanager
def grouped(root: Path) -> Iterator[None]:
    """Runs started inside log to one store in ``root`` (MLflow's ``root/mlflow.db`` unless
    MLFLOW_TRACKING_URI names one), as one group named after ``root``, each run named by its
    folder's path under ``root`` (a staging folder's ``.partial`` left out)."""
    token = _GROUP.set(root)
    try:
        yield
    finally:
        _GROUP.reset(token)


def _in_group(tracking: Tracking, folder: Path) -> Tracking:
    root = _GROUP.get()
    if root is None:
        return tracking
    try:
        parts = folder.resolve().relative_to(root.resolve()).parts
    except ValueError:  # a folder outside the group's
        return tracking
    name = "/".join(p.removesuffix(".partial") for p in parts)
    return dataclasses.replace(tracking, root=root, name=name, group=root.name)


def read_ids(path: Path) -> dict[str, str]:
    """``RUN/trackers.json``: each tracker's run id, as electra wrote it (a missing file: no
    runs yet); anything else is refused in one line, the file left as it is."""
    if not path.exists():
        return {}
    try:
        ids = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        ids, why = None, f"not JSON ({_first_line(err)})"
    else:
        why = "not a JSON object of tracker names and run ids"
    if not (isinstance(ids, dict) and all(isinstance(k, str) and isinstance(v, str)
                                          for k, v in ids.items())):
        raise UserError(f"{path} is {why}: it names the tracker runs --resume continues; "
                        f"restore it, or move it away to continue in new tracker runs")
    return ids


class Trackers:
    """The trackers of one run folder, opened at ``start_step`` (continuing the runs that
    ``folder/trackers.json`` names when resuming)."""

    KINDS: ClassVar[dict[str, type]] = {"tensorboard": TensorBoard, "mlflow": MLflow,
                                        "wandb": WandB}

    def __init__(self, folder: Path, start_step: int, tracking: Tracking,
                 config: dict[str, Any]) -> None:
        tracking = _in_group(tracking, folder)
        ids_path = folder / "trackers.json"
        ids = read_ids(ids_path) if start_step else {}
        self.open: list[Any] = []
        try:
            for name in tracking.log_to:
                try:
                    tracker = self.KINDS[name](folder, start_step, tracking=tracking,
                                               config=config, run_id=ids.get(name))
                except UserError:
                    raise
                except Exception as err:  # a service's own error: one line, not its trace
                    raise UserError(f"{name} could not open this run's tracker run "
                                    f"({_first_line(err)}); fix it, or leave {name} out of "
                                    f"the log_to setting") from None
                self.open.append(tracker)
                if hasattr(tracker, "run_id"):
                    ids[name] = tracker.run_id
        except BaseException:
            self.close()
            raise
        if ids:
            write_json(ids_path, ids)

    def log(self, record: dict[str, Any]) -> None:
        for tracker in self.open:
            tracker.log(record)

    def close(self) -> None:
        for tracker in self.open:
            tracker.close()
