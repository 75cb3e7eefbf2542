"""The toy body's recipe, defaults and its own check."""

from __future__ import annotations

from typing import Any

from electra.config import ModelConfig
from electra.errors import UserError
from electra.model.bodies.spec import Recipe

DEFAULTS = {"hidden_dropout": 0.0, "attention_dropout": 0.0, "layer_norm_eps": 1e-6}
RECIPES = {"toy-tiny": Recipe(
    ModelConfig(body="toy", embedding_size=32, hidden_size=32, num_layers=2, num_heads=2,
                intermediate_size=64, max_position_embeddings=64, generator_size=0.5,
                **DEFAULTS),
    {"lr": 2e-3, "batch_size": 8, "warmup_steps": 2, "max_steps": 30})}


def check(cfg: Any) -> None:
    if cfg.intermediate_size % 2:
        raise UserError(f"model.intermediate_size={cfg.intermediate_size}: the toy body's "
                        f"SwiGLU needs an even width")
