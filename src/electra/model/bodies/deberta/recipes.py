"""The DeBERTa body's recipes, defaults and the checks of its own settings: DeBERTa-V3's
released shapes (microsoft/DeBERTa's experiments/language_model/rtd_*.json): the generator as
wide as the discriminator and half as deep, 256 position buckets over 512 positions,
LayerNorm eps 1e-7; RTD with gradient-disentangled embedding sharing; its rtd.sh schedules."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from electra.config import BodySettings, ModelConfig
from electra.errors import UserError
from electra.model.bodies.spec import Recipe


@dataclass(frozen=True)
class DebertaSettings(BodySettings):
    """The DeBERTa body's own settings: its relative positions and disentangled attention."""

    RANGES: ClassVar[dict[str, str | tuple[str, ...]]] = {
        "position_buckets": ">= 0", "max_relative_positions": ">= 0"}
    position_buckets: int = 256
    """deberta: relative distances in log buckets, exact up to half of them (DeBERTa-V3's
    256); 0: one row per distance up to max_relative_positions."""
    max_relative_positions: int = 0
    """deberta: the farthest distance the buckets tell apart (0: max_position_embeddings)."""
    pos_att_type: str = "p2c|c2p"
    """deberta: the position terms of disentangled attention, any of c2p (content to
    position) and p2c (position to content), |-separated (empty: content only)."""
    share_att_key: bool = True
    """deberta: positions through the blocks' own query and key projections (V3's); false:
    through projections of their own."""


DEFAULTS: dict[str, Any] = {"hidden_dropout": 0.1, "attention_dropout": 0.1, "layer_norm_eps": 1e-7}

# DeBERTa-V3: RTD with gradient-disentangled embedding sharing, 15% of tokens chosen, each
# replaced by [MASK] in the generator's input (its masker's keep_prob=0), λ = 50 (the
# paper's; microsoft/DeBERTa's rtd_lambda defaults to 10)
_OBJECTIVE = {"sharing": "gdes", "mask_prob": 0.15, "mask_token_prob": 1.0,
              "disc_weight": 50.0}
# microsoft/DeBERTa's experiments/language_model/rtd.sh (its xsmall's for small, which it
# does not list): 10k warmup steps, 1M steps
_LOOPS = {"xsmall": (3e-4, 64), "small": (3e-4, 64), "base": (1e-4, 256)}
RECIPES = {
    f"debertav3-{name}": Recipe(
        ModelConfig(body="deberta", embedding_size=width, hidden_size=width,
                    num_layers=layers, num_heads=heads, intermediate_size=4 * width,
                    max_position_embeddings=512, generator_size=1.0,
                    generator_layers=layers // 2, **DEFAULTS),
        {"lr": _LOOPS[name][0], "batch_size": _LOOPS[name][1], "warmup_steps": 10_000,
         "max_steps": 1_000_000}, _OBJECTIVE)
    for name, (layers, width, heads) in {"xsmall": (12, 384, 6), "small": (6, 768, 12),
                                         "base": (12, 768, 12)}.items()}


def check(cfg: ModelConfig) -> None:
    """Its relative-position settings: terms it knows, buckets the log scale can place (an
    even count of 4 or more, and distances beyond half of them)."""
    terms = [t for t in cfg.pos_att_type.split("|") if t]
    if not (all(t in ("c2p", "p2c") for t in terms) and len(set(terms)) == len(terms)):
        raise UserError(f"model.pos_att_type={cfg.pos_att_type!r}: give c2p and/or p2c, "
                        f"|-separated (DeBERTa-V3's p2c|c2p), or empty for content only")
    far = cfg.max_relative_positions or cfg.max_position_embeddings
    b = cfg.position_buckets
    if b and not (b >= 4 and b % 2 == 0 and far > b // 2 + 1):
        raise UserError(f"model.position_buckets={b} cannot be placed on a log scale out to "
                        f"{far} positions: give an even count >= 4 below 2 x "
                        f"(max_relative_positions - 1) (DeBERTa-V3: 256 buckets, 512 "
                        f"positions), or 0 for none")

