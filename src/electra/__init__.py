"""electra: ELECTRA pretraining (replaced-token detection) and fine-tuning in PyTorch."""

from electra.config import ModelConfig, ObjectiveConfig, model_preset
from electra.errors import UserError
from electra.model import Discriminator, ElectraPretrainingModel, Generator

__all__ = [
    "Discriminator",
    "ElectraPretrainingModel",
    "Generator",
    "ModelConfig",
    "ObjectiveConfig",
    "UserError",
    "model_preset",
]
__version__ = "0.1.0"
