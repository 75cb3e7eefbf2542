"""What an evaluation is: a score of a model's sentence embeddings, as they are or after an
embedding fine-tune, one class each (sentence-transformers' evaluator pattern: the data it
reads, ``__call__(model) -> metrics``, its primary metric), in the registry
:data:`EVALUATORS` that `electra evaluate --task`, `electra compare --tasks` and the Python
API look names up in. Nothing else names an evaluation: a new one is a subclass and one
:func:`register` line (``electra.evaluation.registry``).
"""

from __future__ import annotations

import abc
from pathlib import Path
from typing import Any, ClassVar

from electra.errors import UserError
from electra.registry import Registry


class Evaluator(abc.ABC):
    """One evaluation on its data: ``data`` (a folder or file), ``dev`` (a file), ``split``,
    ``text_columns`` and ``label_column`` as `electra evaluate` names them (each evaluator
    reads those it needs and refuses the others in :meth:`check`)."""

    name: ClassVar[str] = ""  # --task NAME, compare --tasks NAME[:key=value...]
    primary_metric: ClassVar[str] = ""  # what a comparison's table shows
    help: ClassVar[str] = ""  # how `evaluate --help` lists it
    spec_keys: ClassVar[frozenset[str]] = frozenset()  # compare --tasks NAME:KEY=VALUE keys
    options: ClassVar[frozenset[str]] = frozenset()  # its own flags (rerank's --top-k)
    any_model: ClassVar[bool] = True  # False: it scores a model fine-tuned for it (rerank)

    def __init__(self, data: str | Path | None = None, dev: str | Path | None = None,
                 split: str | None = None, text_columns: str | None = None,
                 label_column: str | None = None, **given: Any) -> None:
        self.data, self.dev, self.split = data, dev, split
        self.text_columns, self.label_column = text_columns, label_column
        unread = sorted(k for k, v in given.items() if v is not None and k not in self.options)
        if unread:
            readers = sorted(e.name for e in EVALUATORS.values() if unread[0] in e.options)
            raise UserError(f"--{unread[0].replace('_', '-')}: --task {self.name} does not "
                            f"read it (--task {', '.join(readers) or 'none'} does); drop it")
        self.given = given  # its own flags, by name

    def check(self) -> None:
        """Refuse, before any file is read, what this evaluation does not take."""
        return None

    def encoding(self) -> dict[str, Any]:
        """Which states embed a text, as given (``layer``: a block's, or the mean of
        several; ``generator``: the generator's encoder; ``truncate_dim``: the first D
        dimensions): :class:`electra.evaluation.encoder.Encoder`'s keywords."""
        return {k: v for k, v in self.given.items() if k in ("layer", "generator",
                                                             "truncate_dim")
                and v is not None and v is not False}

    @classmethod
    def from_spec(cls, opts: dict[str, str], glue: str | None, spec: str) -> Evaluator:
        """The evaluator of `compare --tasks NAME[:key=value...]` (``opts``: its keys, checked
        against :attr:`spec_keys` by the caller; ``glue``: --glue)."""
        return cls(data=opts.get("data"), split=opts.get("split"))

    def read(self) -> None:
        """Read and check the data now (a comparison does before hours of pretraining)."""
        return None

    @abc.abstractmethod
    def __call__(self, model: str | Path, pooling: str | None = None, batch_size: int = 32,
                 precision: str = "fp32", device: str = "auto",
                 progress: bool = False) -> dict[str, Any]:
        """The metrics of ``model``'s embeddings (a run, one of its parts or checkpoints, a
        fine-tuned model, a transformers or sentence-transformers folder, a hub id)."""

    def primary(self, result: dict[str, Any]) -> float:
        """The primary metric's value in ``result``."""
        return float(result[self.primary_metric])

    def printed(self, result: dict[str, Any]) -> dict[str, Any]:
        """What `electra evaluate` prints of ``result`` (one JSON line)."""
        return result


EVALUATORS: Registry[type[Evaluator]] = Registry("evaluation")


def register(cls: type[Evaluator]) -> type[Evaluator]:
    """Add an evaluation under its ``name`` (a taken name is refused); returns it."""
    EVALUATORS.add(cls.name, cls)
    return cls
