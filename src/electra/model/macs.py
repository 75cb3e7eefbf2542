"""Multiply-accumulates of the model's parts on a sequence (what ``electra.objectives``
adds up into a step's training FLOPs): matrix multiplies only."""

from __future__ import annotations

from electra.config import ModelConfig
from electra.model.bodies import body_of


def encoder_macs_per_token(cfg: ModelConfig, seq_len: int) -> int:
    """An encoder's multiply-accumulates per token of a ``seq_len``-token sequence, by its
    body (``Body.macs_per_token``)."""
    return body_of(cfg).macs_per_token(cfg, seq_len)


def mlm_head_macs(cfg: ModelConfig, rows: int) -> int:
    """An MLM head (dense H -> E, output layer E -> V) on ``rows`` positions."""
    E = cfg.embedding_size
    return rows * (cfg.hidden_size * E + E * cfg.vocab_size)


def rtd_head_macs(cfg: ModelConfig, rows: int) -> int:
    """The discriminator's head (dense H -> H, then H -> 1) on ``rows`` positions."""
    return rows * (cfg.hidden_size ** 2 + cfg.hidden_size)


def encoder_macs(cfg: ModelConfig, seq_len: int) -> int:
    """An encoder's multiply-accumulates over a sequence of ``seq_len`` tokens."""
    return seq_len * encoder_macs_per_token(cfg, seq_len)
