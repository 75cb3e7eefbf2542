"""STS: the Spearman correlation between the cosine of each pair's embeddings and its gold
score, on GLUE's STS-B folder (``data``) or a file of scored pairs (``dev``: CSV, TSV or
JSONL; ``text_columns`` A,B, default sentence1,sentence2; the score in ``label_column``,
default label, else score)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from electra.data.examples import _records, header_of
from electra.errors import UserError
from electra.evaluation.base import Evaluator
from electra.evaluation.encoder import Encoder
from electra.io.progress import reporting
from electra.tasks.base import TaskData
from electra.tasks.registry import load_task


class Sts(Evaluator):
    name = "sts"
    primary_metric = "spearman"
    help = ("sts: any model's sentence embeddings (a run, a transformers folder, a hub id), on "
            "GLUE's STS-B folder or a --dev file of scored pairs")
    spec_keys: ClassVar[frozenset[str]] = frozenset()
    options: ClassVar[frozenset[str]] = frozenset({"layer", "generator", "truncate_dim"})

    def check(self) -> None:
        if bool(self.data) == bool(self.dev):
            raise UserError("--task sts reads --data (GLUE's STS-B folder) or --dev (a CSV, "
                            "TSV or JSONL of sentence pairs with a score), one of them")

    @classmethod
    def from_spec(cls, opts: dict[str, str], glue: str | None, spec: str) -> Evaluator:
        if glue is None:
            raise UserError("--tasks sts scores GLUE's STS-B dev set: give --glue DIR, the "
                            "folder holding STS-B/")
        folder = Path(glue) / "STS-B"  # (GLUE's folder name)
        if not folder.is_dir():
            raise UserError(f"--glue {glue}: no STS-B/ folder for --tasks sts")
        return cls(data=str(folder), split="dev")

    def _task(self) -> tuple[TaskData, str]:
        if self.dev is not None:
            label = self.label_column
            if label is None and Path(self.dev).is_file():
                header = header_of(_records(Path(self.dev)))
                label = next((c for c in ("label", "score") if c in header), None)
            return load_task("custom", dev=str(self.dev), split="dev", text_columns=(
                self.text_columns or "sentence1,sentence2"), label_column=label,
                regression=True), f"--dev {self.dev}"
        return load_task("stsb", data=str(self.data), split=self.split or "dev"), \
            f"--data {self.data}"

    def read(self) -> None:
        self._task()

    def __call__(self, model: str | Path, pooling: str | None = None, batch_size: int = 32,
                 precision: str = "fp32", device: str = "auto",
                 progress: bool = False) -> dict[str, Any]:
        """``{split: {"spearman": rho}}`` for each dev split."""
        from scipy.stats import spearmanr  # scipy's import takes a second: only when scoring

        task, where = self._task()
        enc = Encoder(model, pooling, normalize=True, precision=precision,  # cosines
                      device=device, **self.encoding())
        out = {}
        for name, rows in task.dev.items():
            pairs = [r for r in rows if r.label is not None and r.text_b is not None]
            if len(pairs) < 2:
                raise UserError(f"{where}: {len(pairs)} scored pair(s) in its {name} split; "
                                f"a correlation needs at least 2")
            with reporting(2 * len(pairs), f"sts: encoding {name}'s pairs", "text", progress):
                a = enc.encode([r.text_a for r in pairs], batch_size)
                b = enc.encode([r.text_b for r in pairs], batch_size)
            cosine = (a * b).sum(1)
            rho = spearmanr(cosine, np.array([float(r.label) for r in pairs])).statistic
            out[name] = {"spearman": float(rho)}
        return out

    def primary(self, result: dict[str, Any]) -> float:
        return float(result["dev"]["spearman"])


def sts(model: str | Path, data: str | Path | None = None, split: str = "dev",
        pooling: str | None = None, batch_size: int = 32, dev: str | Path | None = None,
        text_columns: str | None = None, label_column: str | None = None,
        precision: str = "fp32", device: str = "auto", progress: bool = False
        ) -> dict[str, dict[str, float]]:
    """STS zero-shot (or with a fine-tuned embedding model), the Python API's
    ``electra.sts``: :class:`Sts` on GLUE's STS-B folder (``data``) or a file of scored
    pairs (``dev``)."""
    ev = Sts(data, dev, split, text_columns, label_column)
    ev.check()
    return ev(model, pooling, batch_size, precision, device, progress)
