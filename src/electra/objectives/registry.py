"""Every pretraining objective by its name (``objective.kind``). Adding one is a new module
with an :class:`~electra.objectives.base.Objective` subclass and one line here."""

from __future__ import annotations

from electra.objectives.all_tokens_mlm import AllTokensMLM
from electra.objectives.base import Objective
from electra.objectives.electra import Electra, Electra15
from electra.objectives.fast_electra import FastElectra
from electra.objectives.mlm import MLM
from electra.objectives.random_tokens import RandomTokens
from electra.objectives.replace_mlm import ReplaceMLM
from electra.registry import Registry

OBJECTIVES: Registry[Objective] = Registry("objective")
for _objective in (
    Electra(),
    MLM(),
    RandomTokens(),
    Electra15(),
    ReplaceMLM(),
    AllTokensMLM(),
    FastElectra(),
):
    OBJECTIVES.add(_objective.name, _objective)


def register(objective: Objective) -> Objective:
    """Add an objective (a plug-in, or a test's toy) under its name; returns it. A name
    already registered is refused (ValueError)."""
    return OBJECTIVES.add(objective.name, objective)
