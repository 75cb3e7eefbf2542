"""The evaluations electra has, one line each (``electra.evaluation.base.register``): what
`electra evaluate --task` and `electra compare --tasks` look names up in."""

from __future__ import annotations

from typing import Any

from electra.errors import UserError
from electra.evaluation.base import EVALUATORS, Evaluator, register
from electra.evaluation.rerank import Rerank
from electra.evaluation.retrieval import Retrieval
from electra.evaluation.sts import Sts

register(Sts)
register(Retrieval)
register(Rerank)


def evaluator(name: str, **given: Any) -> Evaluator:
    """The evaluation ``name`` on the data ``given`` (evaluate's flags), checked."""
    if name not in EVALUATORS:
        raise UserError(f"--task {name}: no such evaluation; valid: {', '.join(EVALUATORS)}")
    ev = EVALUATORS[name](**given)
    ev.check()
    return ev
