"""Useful training FLOPs per token of the ELECTRA step (for MFU and equal-compute comparisons).

Counts matrix multiplies only, at 6 FLOPs per multiply-accumulate and parameter-token
(2 forward + 4 backward), the convention of Kaplan et al. and nanoGPT's MFU. The generator's
V-way output layer is counted only at the predicted positions (what the step needs), and
attention's score and value products at 2·T·H per token and layer.
"""

from __future__ import annotations

from electra.config import ModelConfig


def encoder_macs_per_token(cfg: ModelConfig, seq_len: int) -> int:
    H, I, L = cfg.hidden_size, cfg.intermediate_size, cfg.num_layers
    per_layer = 4 * H * H + 2 * H * I + 2 * seq_len * H  # QKV+out, FFN, QK^T and AV
    project = cfg.embedding_size * H if cfg.embedding_size != H else 0
    return L * per_layer + project


def electra_flops_per_token(cfg: ModelConfig, seq_len: int, predictions: int) -> float:
    """Training FLOPs per input token of discriminator + generator (+ their heads)."""
    gen = cfg.generator_config()
    E = cfg.embedding_size
    disc = encoder_macs_per_token(cfg, seq_len) + cfg.hidden_size ** 2 + cfg.hidden_size
    frac = predictions / seq_len  # generator head rows per token
    generator = (encoder_macs_per_token(gen, seq_len)
                 + frac * (gen.hidden_size * E + E * cfg.vocab_size))
    return 6.0 * (disc + generator)
