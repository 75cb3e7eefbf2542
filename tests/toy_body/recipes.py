"""The toy body's recipe, defaults, its own setting and its own check."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from electra.config import BodySettings, ModelConfig
from electra.errors import UserError
from electra.model.bodies.spec import Recipe


@dataclass(frozen=True)
class ToySettings(BodySettings):
    """The toy body's own setting (given as model.mlp_gate; config.py knows nothing of it)."""

    RANGES: ClassVar[dict[str, str | tuple[str, ...]]] = {"mlp_gate": ("silu", "gelu")}
    mlp_gate: str = "silu"
    """toy: the feed-forward layer's gate, SwiGLU (silu) or GeGLU (gelu)."""


DEFAULTS: dict[str, Any] = {"hidden_dropout": 0.0, "attention_dropout": 0.0, "layer_norm_eps": 1e-6}
RECIPES = {"toy-tiny": Recipe(
    ModelConfig(body="toy", embedding_size=32, hidden_size=32, num_layers=2, num_heads=2,
                intermediate_size=64, max_position_embeddings=64, generator_size=0.5,
                **DEFAULTS),
    {"lr": 2e-3, "batch_size": 8, "warmup_steps": 2, "max_steps": 30})}


def check(cfg: Any) -> None:
    if cfg.intermediate_size % 2:
        raise UserError(f"model.intermediate_size={cfg.intermediate_size}: the toy body's "
                        f"SwiGLU needs an even width")
