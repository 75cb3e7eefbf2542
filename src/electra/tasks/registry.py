"""Every fine-tuning head by name, and which tasks each reads. Adding a head is a new module
with a :class:`~electra.tasks.base.Head` subclass and one line here."""

from __future__ import annotations

from typing import Any

from electra.tasks.base import HEADS, Head, TaskData
from electra.tasks.choice import Choice
from electra.tasks.qa import QA
from electra.tasks.sequence import Sequence
from electra.tasks.superglue import SuperGLUE
from electra.tasks.tagging import Tagging

for _head in (
    Sequence(),
    Tagging(),
    QA(),
    SuperGLUE(),
    Choice(),
):
    HEADS.add(_head.name, _head)


def register(head: Head) -> Head:
    """Add a head (a plug-in, or a test's toy) under its name; returns it. A name already
    registered is refused (ValueError)."""
    return HEADS.add(head.name, head)


def head_for_task(task: str) -> Head:
    """The head that reads ``--task``: the one naming it in ``tasks``, else sequence
    classification (GLUE and custom)."""
    return next((h for h in HEADS.values() if task in h.tasks),
                HEADS["sequence"])


def load_task(task: str, data: str | None = None, train: str | None = None,
              dev: str | None = None, text_columns: str = "text",
              label_column: str = "label", regression: bool = False,
              predict: str | None = None, split: str | None = None,
              tag_column: str | None = None) -> TaskData:
    """A GLUE task from its folder (``data``), ``custom`` from ``train``/``dev`` files,
    ``tagging`` from CoNLL-U/CoNLL/JSONL files, or SQuAD from its JSON.

    ``split`` (evaluation only): which dev split to read, and no training set; None reads
    the training set and every dev split (fine-tuning).
    """
    given: dict[str, Any] = dict(data=data, train=train, dev=dev, text_columns=text_columns,
                                 label_column=label_column, regression=regression,
                                 predict=predict, split=split, tag_column=tag_column)
    return head_for_task(task).load(task, **given)
