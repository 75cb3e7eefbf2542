"""Multiply-accumulates of the model's parts on a sequence (what ``electra.objectives``
adds up into a step's training FLOPs): matrix multiplies only."""

from __future__ import annotations

from electra.config import ModelConfig


def encoder_macs_per_token(cfg: ModelConfig, seq_len: int) -> int:
    H, I, L = cfg.hidden_size, cfg.intermediate_size, cfg.num_layers
    per_layer = 4 * H * H + 2 * H * I + 2 * seq_len * H  # QKV+out, FFN, QK^T and AV
    project = cfg.embedding_size * H if cfg.embedding_size != H else 0
    return L * per_layer + project


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
