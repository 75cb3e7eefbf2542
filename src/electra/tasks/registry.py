"""Every fine-tuning head by name, and which tasks each reads. Adding a head is a new module
with a :class:`~electra.tasks.base.Head` subclass and one line here."""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any

from electra.config import (
    FamilySettings,
    FinetuneConfig,
    closest,
    config_from_dict,
    config_keys,
    field_docs,
    name_in,
    parse_set,
)
from electra.errors import UserError
from electra.tasks.base import HEADS, Head, TaskData
from electra.tasks.choice.head import Choice
from electra.tasks.embedding.head import Embedding
from electra.tasks.qa.head import QA
from electra.tasks.rerank.head import Rerank
from electra.tasks.sequence.head import Sequence
from electra.tasks.superglue.head import SuperGLUE
from electra.tasks.tagging.head import Tagging


def register(head: Head) -> Head:
    """Add a head (a plug-in, or a test's toy) under its name; returns it. A name already
    registered is refused (ValueError), and so are settings of its own that are the shared
    settings' (FinetuneConfig's keys) or another family's under another type or default
    (one key, one meaning: `--set doc_stride=64` is the same setting for every family that
    has it)."""
    shared = set(config_keys(FinetuneConfig)) | {"family"}
    for f in dataclasses.fields(head.Settings):
        if f.name in shared:
            raise ValueError(f"head {head.name!r}: its setting {f.name!r} is a shared "
                             f"fine-tuning setting (FinetuneConfig's)")
        for other in family_settings().get(f.name, []):
            theirs = next(g for g in dataclasses.fields(other) if g.name == f.name)
            if (theirs.type, theirs.default) != (f.type, f.default):
                raise ValueError(f"head {head.name!r}: its setting {f.name!r} "
                                 f"({f.type} = {f.default!r}) is {other.__name__}'s as "
                                 f"{theirs.type} = {theirs.default!r}")
    return HEADS.add(head.name, head)


def family_settings() -> dict[str, list[type[FamilySettings]]]:
    """Every registered family's own setting -> the settings classes that have it."""
    out: dict[str, list[type[FamilySettings]]] = {}
    for head in HEADS.values():
        for f in dataclasses.fields(head.Settings):
            if head.Settings not in out.setdefault(f.name, []):
                out[f.name].append(head.Settings)
    return out


for _head in (
    Sequence(),
    Tagging(),
    QA(),
    SuperGLUE(),
    Choice(),
    Embedding(),
    Rerank(),
):
    register(_head)


def finetune_config(values: dict[str, Any], where: str = "fine-tuning settings"
                    ) -> FinetuneConfig:
    """Fine-tuning settings from flat keys (``--set``, a model's config.json): the shared
    ones (FinetuneConfig's) and each family's own (``Head.Settings``), each checked by the
    classes that have it; a key neither knows is refused with every valid key."""
    families = family_settings()
    shared = config_keys(FinetuneConfig)
    own = {k: v for k, v in values.items() if k not in shared}
    unknown = sorted(set(own) - set(families))
    if unknown:
        valid = shared + [k for k in families if k not in shared]
        close = closest(unknown[0], valid)
        raise UserError(
            f"unknown config key{'s' if len(unknown) > 1 else ''} "
            f"{', '.join(map(repr, unknown))} in {where}"
            f"{f' (did you mean {close!r}?)' if close else ''}; valid keys: "
            f"{', '.join(valid)}")
    checked: dict[str, Any] = {}
    for cls in {c: None for k in own for c in families[k]}:  # each family, in order
        mine = {k: v for k, v in own.items() if cls in families[k]}
        checked |= {k: getattr(cls(**mine), k) for k in mine}  # its types and ranges
    cfg = config_from_dict(FinetuneConfig, {k: v for k, v in values.items() if k in shared},
                           where)
    return dataclasses.replace(cfg, family=checked)


def check_families(cfg: FinetuneConfig, heads: dict[str, Head]) -> None:
    """Refuse a family setting that none of the run's tasks (``heads``: task -> its head)
    reads, naming the families that do (a setting that would change nothing)."""
    unread = sorted(k for k in cfg.family if not any(
        name_in(h.Settings, k) for h in heads.values()))
    if unread:
        whose = sorted(h.name for h in HEADS.values() if name_in(h.Settings, unread[0]))
        raise UserError(f"--set {unread[0]}: a setting of the {' and '.join(whose)} task "
                        f"famil{'ies' if len(whose) > 1 else 'y'}, which --task "
                        f"{','.join(heads)} does not read; drop it")


def load_finetune_config(sets: list[str]) -> FinetuneConfig:
    """``--set key=value`` items of `electra finetune` (unknown keys refused)."""
    return finetune_config(dict(parse_set(item, "lr=1e-4") for item in sets))


def settings_help() -> str:
    """Each family's own settings for `electra finetune --help`: ``key: what (the
    families that have it)``."""
    seen: dict[str, tuple[str, list[str]]] = {}
    for head in HEADS.values():
        for key, doc in field_docs(head.Settings).items():
            seen.setdefault(key, (doc.split(". ")[0].rstrip("."), []))[1].append(head.name)
    return "; ".join(f"{key}: {doc} ({', '.join(names)})"
                     for key, (doc, names) in seen.items())


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


# What every command passes to load_task whatever the task (evaluate: the model's columns).
COMMON_READING = frozenset({"data", "train", "dev", "predict", "split", "text_columns"})


def check_reading(names: list[str], given: dict[str, Any]) -> None:
    """Refuse a task family's own flag (``--label-column``, ``--min-score``, ...) that no
    task of ``names`` reads: given, it would change nothing."""
    for key, value in given.items():
        if key in COMMON_READING or value in (None, False):
            continue
        if not any(head_for_task(n).reads(n, key) for n in names):
            readers = [t for h in HEADS.values() for t in (h.tasks or ("custom",))
                       if h.reads(t, key)]
            raise UserError(f"--{key.replace('_', '-')}: --task {','.join(names)} does not "
                            f"read it (--task {', '.join(readers)} "
                            f"do{'es' if len(readers) == 1 else ''}); drop it")
