"""The ModernBERT body's recipes, defaults and the checks of its own settings: the published
base (22 x 768, GeGLU 1152, 8,192 tokens) and a small one sized like the published ~17M
encoders (7 x 256), no dropout, as published; each with ELECTRA's schedule, and with
ModernBERT's own recipe (``-mask30``: 30% masking, the trapezoidal schedule)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from electra.config import BodySettings, ModelConfig
from electra.errors import UserError
from electra.model.bodies.spec import Recipe


@dataclass(frozen=True)
class ModernBertSettings(BodySettings):
    """The ModernBERT body's own settings: its local and global attention and RoPE."""

    RANGES: ClassVar[dict[str, str | tuple[str, ...]]] = {
        "local_attention": ">= 2", "global_every": ">= 1", "global_rope_theta": "> 0",
        "local_rope_theta": "> 0"}
    local_attention: int = 128
    """modernbert: the window of a local block (tokens at most half of it away attend)."""
    global_every: int = 3
    """modernbert: every n-th block (the first included) attends globally."""
    global_rope_theta: float = 160_000.0
    """modernbert: RoPE's base in the global blocks."""
    local_rope_theta: float = 10_000.0
    """modernbert: RoPE's base in the local blocks."""


DEFAULTS: dict[str, Any] = {"hidden_dropout": 0.0, "attention_dropout": 0.0, "layer_norm_eps": 1e-5}

_SMALL = ModelConfig(body="modernbert", embedding_size=256, hidden_size=256, num_layers=7,
                     num_heads=4, intermediate_size=384, max_position_embeddings=8192,
                     generator_size=0.25, **DEFAULTS)
_BASE = ModelConfig(body="modernbert", embedding_size=768, hidden_size=768, num_layers=22,
                    num_heads=12, intermediate_size=1152, max_position_embeddings=8192,
                    generator_size=1 / 3, **DEFAULTS)
_SMALL_LOOP = {"lr": 5e-4, "batch_size": 128, "warmup_steps": 10_000, "max_steps": 1_000_000}
_BASE_LOOP = {"lr": 2e-4, "batch_size": 256, "warmup_steps": 10_000, "max_steps": 766_000}
# ModernBERT's trapezoid: the peak until the last 10%, then 1 - sqrt to 0; 30% masking
# ("Should you mask 15% in masked language modeling?", Wettig et al.)
_TRAPEZOID = {"schedule": "wsd", "decay_fraction": 0.1, "decay_shape": "1-sqrt"}
_MASK30 = {"mask_prob": 0.3}

RECIPES = {
    "modernbert-small": Recipe(_SMALL, _SMALL_LOOP),
    "modernbert-base": Recipe(_BASE, _BASE_LOOP),
    "modernbert-small-mask30": Recipe(_SMALL, {**_SMALL_LOOP, **_TRAPEZOID}, _MASK30),
    "modernbert-base-mask30": Recipe(_BASE, {**_BASE_LOOP, **_TRAPEZOID}, _MASK30),
}


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise UserError(message)


def check(cfg: ModelConfig) -> None:
    """The local window is an even number of tokens; RoPE turns pairs of a head's
    dimensions, so every head (the generator's too) is an even number wide."""
    _require(cfg.local_attention >= 2 and cfg.local_attention % 2 == 0,
             f"model.local_attention={cfg.local_attention} must be an even number of "
             f"tokens >= 2 (ModernBERT's is 128)")
    heads = {"discriminator": (cfg.hidden_size, cfg.num_heads)}
    if cfg.generator_size != 1.0:
        m = cfg.generator_size
        g_heads = max(1, round(cfg.num_heads * m))
        g_hidden = max(g_heads, round(cfg.hidden_size * m))
        heads["generator"] = (g_hidden - g_hidden % g_heads, g_heads)
    for part, (hidden, n) in heads.items():
        _require((hidden // n) % 2 == 0,
                 f"model: the {part}'s heads are {hidden // n} wide ({hidden} / {n} heads);"
                 f" ModernBERT's rotary positions turn pairs of a head's dimensions, so give "
                 f"model.hidden_size and model.num_heads (and model.generator_size) that "
                 f"make an even head width (e.g. 64)")
