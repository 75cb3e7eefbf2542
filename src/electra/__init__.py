"""electra: ELECTRA pretraining (replaced-token detection) and fine-tuning in PyTorch.

Importing the package is cheap (no torch): the names below load on first use, so the CLI
and data-preparation workers start fast.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_LAZY = {
    "ModelConfig": "electra.config",
    "ObjectiveConfig": "electra.config",
    "model_preset": "electra.config",
    "UserError": "electra.errors",
    "FinetuneConfig": "electra.config",
    "Discriminator": "electra.model",
    "Generator": "electra.model",
    "SequenceClassifier": "electra.tasks.sequence",
    "ElectraPretrainingModel": "electra.objectives.pretraining",
}
__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'electra' has no attribute {name!r}")
