"""Training FLOPs of a pretraining step, per objective (for MFU and equal-compute comparisons).

Counts matrix multiplies only, at 6 FLOPs per multiply-accumulate and parameter-token
(2 forward + 4 backward), the convention of Kaplan et al. and nanoGPT's MFU. Attention's score
and value products count 2·T·H multiply-accumulates per token and layer. A V-way MLM output
layer counts the rows it is computed on: the P = min(max_predictions, T) prediction slots of
each sequence (every slot, used or not), or every token for All-Tokens MLM. Embedding lookups,
LayerNorm, softmax and sampling are not counted (a few % of a step).

The count equals torch's ``FlopCounterMode`` on a real step (``tests/test_compare.py``) when
attention runs as plain matrix products.
"""

from __future__ import annotations

from electra.config import ModelConfig, ObjectiveConfig


def encoder_macs_per_token(cfg: ModelConfig, seq_len: int) -> int:
    H, I, L = cfg.hidden_size, cfg.intermediate_size, cfg.num_layers
    per_layer = 4 * H * H + 2 * H * I + 2 * seq_len * H  # QKV+out, FFN, QK^T and AV
    project = cfg.embedding_size * H if cfg.embedding_size != H else 0
    return L * per_layer + project


def _mlm_head_macs(cfg: ModelConfig, rows: int) -> int:
    """An MLM head (dense H -> E, output layer E -> V) on ``rows`` positions."""
    E = cfg.embedding_size
    return rows * (cfg.hidden_size * E + E * cfg.vocab_size)


def _rtd_head_macs(cfg: ModelConfig, rows: int) -> int:
    """The discriminator's head (dense H -> H, then H -> 1) on ``rows`` positions."""
    return rows * (cfg.hidden_size ** 2 + cfg.hidden_size)


def step_flops_per_sequence(cfg: ModelConfig, objective: ObjectiveConfig, seq_len: int) -> int:
    """Training FLOPs (forward and backward) of one sequence of ``seq_len`` tokens under
    ``objective.kind``: the generator's encoder and head where the kind has one, the
    discriminator-sized encoder, and the kind's heads on it."""
    T = seq_len
    P = min(objective.max_predictions, T)
    kind = objective.kind
    if objective.two_stage_steps:
        raise ValueError("two-stage training changes its cost at the stage boundary; count "
                         "each stage's kind separately")
    big = T * encoder_macs_per_token(cfg, T)
    macs = {
        "mlm": big + _mlm_head_macs(cfg, P),
        "random": big + _rtd_head_macs(cfg, T),
        "electra": big + _rtd_head_macs(cfg, T),
        "electra15": big + _rtd_head_macs(cfg, T),
        "replace_mlm": big + _mlm_head_macs(cfg, P),
        "all_tokens_mlm": big + _rtd_head_macs(cfg, T) + _mlm_head_macs(cfg, T),
    }[kind]
    if kind not in ("mlm", "random"):  # the generator: a masked LM at the P slots
        gen = cfg.generator_config()
        macs += T * encoder_macs_per_token(gen, T) + _mlm_head_macs(gen, P)
    return 6 * macs


def electra_flops_per_token(cfg: ModelConfig, seq_len: int, predictions: int) -> float:
    """Training FLOPs per input token of ELECTRA's discriminator + generator (+ their heads),
    with ``predictions`` slots per sequence."""
    objective = ObjectiveConfig(max_predictions=predictions)
    return step_flops_per_sequence(cfg, objective, seq_len) / seq_len
