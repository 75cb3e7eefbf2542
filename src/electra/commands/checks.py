"""What each command refuses before it imports anything heavy (torch, transformers): the
form of its ``--set`` items and the names of their keys, the values of the settings that need
no registry, and the paths it is given that name nothing. `electra.cli` runs a command's
check (its ``Command.check``) first, so such a mistake is answered in a fraction of a second
rather than after torch's import (1.3 s to 2 s on 2 cores; ``bench/refusal_time.py``). The
refusals are the words the commands themselves use; everything a check leaves (a file's
contents, a family's values, a model's shape) the command checks as before.

This module imports the configuration classes, the catalog and the store's and hub's names
alone: a test holds it to that (tests/test_structure.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from electra import catalog
from electra.config import FinetuneConfig, config_from_dict, config_keys, did_you_mean, parse_set
from electra.data.mixspec import parse_data
from electra.data.sources import missing
from electra.errors import UserError
from electra.io import hub
from electra.io.files import read_toml
from electra.run_config import apply_overrides


def _model(ref: str | None, flag: str = "--model") -> None:
    if hub.names_nothing(ref):
        raise hub.no_model(str(ref), flag)


def _files(value: str | None) -> None:
    """--train/--dev: a file, or one per task (comma-separated, empty where none)."""
    for part in (value or "").split(","):
        if part and missing(part):
            raise UserError(f"{part}: no such file")


def _finetune_settings(sets: list[str] | None) -> None:
    """``--set key=value`` of fine-tuning: the form, the key (FinetuneConfig's or a task
    family's) and the shared settings' values."""
    values = dict(parse_set(item, "lr=1e-4") for item in sets or [])
    shared = config_keys(FinetuneConfig)
    families = catalog.family_keys()
    unknown = sorted(k for k in values if k not in shared and k not in families)
    if unknown:
        valid = [*shared, *sorted(families - set(shared))]
        raise UserError(f"unknown config key{'s' if len(unknown) > 1 else ''} "
                        f"{', '.join(map(repr, unknown))} in fine-tuning settings"
                        f"{did_you_mean(unknown[0], valid)}; valid keys: {', '.join(valid)}")
    config_from_dict(FinetuneConfig, {k: v for k, v in values.items() if k in shared},
                     "fine-tuning settings")


def pretrain(data: str | None = None, config: str | None = None,
             sets: list[str] | None = None, **_: Any) -> None:
    if sets:
        apply_overrides({}, sets, catalog.body_keys())  # each item's form, section, key
    if config:
        read_toml(Path(config), "--config")
    for source in (s for phase in parse_data(data or "") for s in phase):
        if missing(source.path):
            raise UserError(f"--data {source.path}: no meta.json, so this is not prepared "
                            f"data; make it with `electra prepare`")


def finetune(model: str | None = None, train: str | None = None, dev: str | None = None,
             sets: list[str] | None = None, **_: Any) -> None:
    _finetune_settings(sets)
    _model(model)
    _files(train)
    _files(dev)


def compare(data: str | None = None, config: str | None = None,
            sets: list[str] | None = None, finetune_sets: list[str] | None = None,
            **_: Any) -> None:
    pretrain(data=data, config=config, sets=sets)
    _finetune_settings(finetune_sets)


def _classifier(model: str | None) -> None:
    if hub.names_nothing(model):  # a fine-tuned model's folder
        raise UserError(f"--model {model}: no classifier weights (config.json and "
                        f"model.safetensors); give OUT/seed-N from `electra finetune`")


def evaluate(model: str | None = None, task: str | None = None, dev: str | None = None,
             **_: Any) -> None:
    known = catalog.load()
    # an evaluation of embeddings reads any model: a run, a transformers folder, ...; one
    # that is also a fine-tuning family's (rerank) reads that family's fine-tuned models
    if task in known["evaluations"] and task not in known["families"]:
        _model(model)
    else:
        _classifier(model)
    _files(dev)


def predict(model: str | None = None, input: str | None = None, **_: Any) -> None:
    _classifier(model)
    _files(input)


def detect(model: str | None = None, **_: Any) -> None:
    _model(model)


def export(source: str | None = None, **_: Any) -> None:
    _model(source, "export")
