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
- **W&B**: the project ``WANDB_PROJECT``, else ``electra``; offline (files under
  ``RUN/wandb``, ``wandb sync`` uploads them) unless ``WANDB_MODE`` says otherwise or the
  user has logged in (``WANDB_API_KEY`` or ``wandb login``'s netrc entry).

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
    """Before any work: an MLflow server named by ``MLFLOW_TRACKING_URI`` answers."""
    uri = os.environ.get("MLFLOW_TRACKING_URI", "")
    if "mlflow" not in names or not uri.startswith(("http://", "https://")):
        return
    import urllib.request

    try:
        urllib.request.urlopen(uri.rstrip("/") + "/health", timeout=5).close()
    except OSError as err:
        raise UserError(f"{key}: MLFLOW_TRACKING_URI={uri} does not answer ({err}); start "
                        f"the server, fix the address, or unset it for a local store"
                        ) from None


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
        uri = os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{root / 'mlflow.db'}"
        self.client = MlflowClient(tracking_uri=uri)
        name = os.environ.get("MLFLOW_EXPERIMENT_NAME", "electra")
        experiment = self.client.get_experiment_by_name(name)
        exp_id = experiment.experiment_id if experiment else self.client.create_experiment(name)
        if run_id is not None:
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


class WandB:
    def __init__(self, folder: Path, start_step: int, tracking: Tracking,
                 config: dict[str, Any], run_id: str | None) -> None:
        import wandb

        mode = os.environ.get("WANDB_MODE") or ("online" if _wandb_login() else "offline")
        self.run = wandb.init(
            project=os.environ.get("WANDB_PROJECT", "electra"), dir=str(folder),
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


class Trackers:
    """The trackers of one run folder, opened at ``start_step`` (continuing the runs that
    ``folder/trackers.json`` names when resuming)."""

    KINDS: ClassVar[dict[str, type]] = {"tensorboard": TensorBoard, "mlflow": MLflow,
                                        "wandb": WandB}

    def __init__(self, folder: Path, start_step: int, tracking: Tracking,
                 config: dict[str, Any]) -> None:
        tracking = _in_group(tracking, folder)
        ids_path = folder / "trackers.json"
        ids = json.loads(ids_path.read_text()) if start_step and ids_path.is_file() else {}
        self.open: list[Any] = []
        for name in tracking.log_to:
            tracker = self.KINDS[name](folder, start_step, tracking=tracking, config=config,
                                       run_id=ids.get(name))
            self.open.append(tracker)
            if hasattr(tracker, "run_id"):
                ids[name] = tracker.run_id
        if ids:
            ids_path.write_text(json.dumps(ids, indent=1) + "\n")

    def log(self, record: dict[str, Any]) -> None:
        for tracker in self.open:
            tracker.log(record)

    def close(self) -> None:
        for tracker in self.open:
            tracker.close()
