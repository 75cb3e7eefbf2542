"""Every fine-tuning head by name, and which tasks each reads. Adding a head is a new module
with a :class:`~electra.tasks.base.Head` subclass and one line here."""

from __future__ import annotations

import inspect
from typing import Any

from electra.tasks.base import HEADS, Head, TaskData
from electra.tasks.choice.head import Choice
from electra.tasks.embedding.head import Embedding
from electra.tasks.qa.head import QA
from electra.tasks.sequence.head import Sequence
from electra.tasks.superglue.head import SuperGLUE
from electra.tasks.tagging.head import Tagging

for _head in (
    Sequence(),
    Tagging(),
    QA(),
    SuperGLUE(),
    Choice(),
    Embedding(),
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


def reading_options() -> set[str]:
    """What ``load_task`` may be given: the keywords of every registered head's ``load``
    (``data``, ``train``, ``dev``, ``predict``, ``split`` and each family's own, such as
    ``text_columns`` or ``tag_column``)."""
    names: set[str] = set()
    for head in HEADS.values():
        names |= {p.name for p in inspect.signature(head.load).parameters.values()
                  if p.kind is p.POSITIONAL_OR_KEYWORD or p.kind is p.KEYWORD_ONLY}
    return names - {"task"}


def load_task(task: str, **given: Any) -> TaskData:
    """The data of ``--task``, read by the head that reads it from what the command was
    given: a GLUE task from its folder (``data``), ``custom`` from ``train``/``dev`` files,
    ``tagging`` from CoNLL-U/CoNLL/JSONL files (``tag_column``), SQuAD from its JSON...
    Each family reads the keywords it knows; one no head knows is refused (TypeError).

    ``split`` (evaluation only): which dev split to read, and no training set; None reads
    the training set and every dev split (fine-tuning).
    """
    unknown = sorted(set(given) - reading_options())
    if unknown:
        raise TypeError(f"load_task() got {', '.join(map(repr, unknown))}, which no task "
                        f"family reads; they read {', '.join(sorted(reading_options()))}")
    return head_for_task(task).load(task, **given)
