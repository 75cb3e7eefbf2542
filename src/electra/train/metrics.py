"""A run's metrics: ``metrics.jsonl`` (one JSON object per line) and its trackers, on rank 0.

Each line has at least ``step``; timing fields (``TIMING_KEYS``) are the only ones that differ
between a resumed run and one that never stopped. A crash can cut the last line short: readers
skip such a line and say so.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from electra.errors import UserError
from electra.io.trackers import Trackers, Tracking

TIMING_KEYS = {"tokens_per_s", "elapsed_s", "mfu"}


class MetricsLog:
    """Appends to ``folder/metrics.jsonl`` and sends each line to the run's trackers
    (``electra.io.trackers``: TensorBoard in ``folder/tb`` by default, MLflow, W&B).

    Resuming at ``start_step`` first drops the lines past it (written after the checkpoint
    the run resumes from). ``enabled=False`` (ranks other than 0) writes nothing.
    """

    def __init__(self, folder: Path, start_step: int = 0, enabled: bool = True,
                 tracking: Tracking | None = None, config: dict[str, Any] | None = None
                 ) -> None:
        self.enabled = enabled
        self.path = folder / "metrics.jsonl"
        self.trackers: Trackers | None = None
        if not enabled:
            return
        folder.mkdir(parents=True, exist_ok=True)
        if self.path.exists():
            kept = [r for r in _records(self.path, warn=False) if r["step"] <= start_step]
            tmp = self.path.with_suffix(".tmp")
            tmp.write_text("".join(json.dumps(r) + "\n" for r in kept))
            tmp.replace(self.path)
        self.file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115
        self.trackers = Trackers(folder, start_step, tracking or Tracking(), config or {})

    def write(self, record: dict[str, Any]) -> None:
        if not self.enabled:
            return
        self.file.write(json.dumps(record) + "\n")
        self.file.flush()
        if self.trackers is not None:
            self.trackers.log(record)

    def close(self) -> None:
        if self.enabled:
            self.file.close()
            if self.trackers is not None:
                self.trackers.close()


def _records(path: Path, warn: bool = True) -> Iterator[dict[str, Any]]:
    """The records of a metrics.jsonl; a torn last line (a crash mid-write) is skipped."""
    with open(path, encoding="utf-8", errors="replace") as f:
        lines = [line for line in f if line.strip()]
    for i, line in enumerate(lines):
        try:
            record = json.loads(line)
        except RecursionError:
            raise UserError(f"{path}: line {i + 1} nests too deeply; the file is damaged"
                            ) from None
        except json.JSONDecodeError:
            if i < len(lines) - 1:
                raise UserError(f"{path}: line {i + 1} is not valid JSON; the file is "
                                f"damaged") from None
            if warn:
                print(f"electra: note: {path}: skipped its last line, cut short (a crash "
                      f"while it was written)", file=sys.stderr)
            return
        if not isinstance(record, dict) or "step" not in record:
            raise UserError(f"{path}: line {i + 1} is not a metrics record (no 'step')")
        yield record


def iter_metrics(run: str | Path) -> Iterator[dict[str, Any]]:
    """The records of RUN/metrics.jsonl."""
    path = Path(run) / "metrics.jsonl"
    if not path.is_file():
        raise UserError(f"{run}: no metrics.jsonl; is this a run folder?")
    yield from _records(path)
