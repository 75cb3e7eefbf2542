"""The one key table between our parameters and transformers' ELECTRA checkpoints.

Our ``Discriminator`` <-> ``ElectraForPreTraining``, our ``Generator`` <-> ``ElectraForMaskedLM``,
a fine-tuned ``SequenceClassifier`` <-> ``ElectraForSequenceClassification``.
The mapping is one-to-one (no tensor is split, fused or transposed), so ours -> transformers
-> ours is bitwise identical. transformers itself is only needed for ``to_hf_config``.
"""

from __future__ import annotations

import re
from typing import Any

import torch

from electra.config import ModelConfig

# (our key pattern, transformers key pattern); "{i}" is a layer index.
_ENCODER = [
    ("encoder.embeddings.word_embeddings.weight", "electra.embeddings.word_embeddings.weight"),
    ("encoder.embeddings.position_embeddings.weight",
     "electra.embeddings.position_embeddings.weight"),
    ("encoder.embeddings.token_type_embeddings.weight",
     "electra.embeddings.token_type_embeddings.weight"),
    ("encoder.embeddings.layer_norm.weight", "electra.embeddings.LayerNorm.weight"),
    ("encoder.embeddings.layer_norm.bias", "electra.embeddings.LayerNorm.bias"),
    ("encoder.embeddings_project.weight", "electra.embeddings_project.weight"),
    ("encoder.embeddings_project.bias", "electra.embeddings_project.bias"),
]
_LAYER = [
    ("query", "attention.self.query"),
    ("key", "attention.self.key"),
    ("value", "attention.self.value"),
    ("attention_out", "attention.output.dense"),
    ("attention_norm", "attention.output.LayerNorm"),
    ("ffn_in", "intermediate.dense"),
    ("ffn_out", "output.dense"),
    ("ffn_norm", "output.LayerNorm"),
]
for ours, theirs in _LAYER:
    for p in ("weight", "bias"):
        _ENCODER.append((f"encoder.layers.{{i}}.{ours}.{p}",
                         f"electra.encoder.layer.{{i}}.{theirs}.{p}"))

DISCRIMINATOR_KEYS = [*_ENCODER,
                      ("head_dense.weight", "discriminator_predictions.dense.weight"),
                      ("head_dense.bias", "discriminator_predictions.dense.bias"),
                      ("head_out.weight", "discriminator_predictions.dense_prediction.weight"),
                      ("head_out.bias", "discriminator_predictions.dense_prediction.bias")]
GENERATOR_KEYS = [*_ENCODER,
                  ("head_dense.weight", "generator_predictions.dense.weight"),
                  ("head_dense.bias", "generator_predictions.dense.bias"),
                  ("head_norm.weight", "generator_predictions.LayerNorm.weight"),
                  ("head_norm.bias", "generator_predictions.LayerNorm.bias"),
                  ("output_bias", "generator_lm_head.bias")]
# A fine-tuned SequenceClassifier <-> ElectraForSequenceClassification.
CLASSIFIER_KEYS = [*_ENCODER,
                   ("head_dense.weight", "classifier.dense.weight"),
                   ("head_dense.bias", "classifier.dense.bias"),
                   ("head_out.weight", "classifier.out_proj.weight"),
                   ("head_out.bias", "classifier.out_proj.bias")]
_TABLES = {"discriminator": DISCRIMINATOR_KEYS, "generator": GENERATOR_KEYS,
           "classifier": CLASSIFIER_KEYS}
# transformers also stores the tied output layer; it equals the word table.
TIED_OUTPUT_KEY = "generator_lm_head.weight"


def _compile(table: list[tuple[str, str]], reverse: bool) -> list[tuple[re.Pattern[str], str]]:
    out = []
    for ours, theirs in table:
        src, dst = (theirs, ours) if reverse else (ours, theirs)
        pattern = re.escape(src).replace(re.escape("{i}"), r"(\d+)")
        out.append((re.compile(f"^{pattern}$"), dst.replace("{i}", r"\1")))
    return out


def _rename(state: dict[str, torch.Tensor], table: list[tuple[str, str]],
            reverse: bool) -> dict[str, torch.Tensor]:
    rules = _compile(table, reverse)
    out = {}
    for key, value in state.items():
        for pattern, repl in rules:
            if pattern.match(key):
                out[pattern.sub(repl, key)] = value
                break
        else:
            raise KeyError(f"no mapping for parameter {key!r}")
    return out


def to_hf_state_dict(state: dict[str, torch.Tensor], kind: str) -> dict[str, torch.Tensor]:
    """Our discriminator/generator/classifier state dict -> transformers' key names."""
    out = _rename(state, _TABLES[kind], reverse=False)
    if kind != "generator":
        return out
    out[TIED_OUTPUT_KEY] = out["electra.embeddings.word_embeddings.weight"]
    return out


def from_hf_state_dict(state: dict[str, torch.Tensor], kind: str) -> dict[str, torch.Tensor]:
    """transformers' ELECTRA state dict -> our key names (the tied output layer dropped)."""
    state = {k: v for k, v in state.items() if k != TIED_OUTPUT_KEY}
    return _rename(state, _TABLES[kind], reverse=True)


def to_hf_config(cfg: ModelConfig, **extra: Any) -> Any:
    """transformers ``ElectraConfig`` with the same shape as ``cfg`` (needs transformers);
    ``extra`` (labels, problem_type...) passes through."""
    from transformers import ElectraConfig

    return ElectraConfig(
        vocab_size=cfg.vocab_size, embedding_size=cfg.embedding_size,
        hidden_size=cfg.hidden_size, num_hidden_layers=cfg.num_layers,
        num_attention_heads=cfg.num_heads, intermediate_size=cfg.intermediate_size,
        hidden_act="gelu", hidden_dropout_prob=cfg.hidden_dropout,
        attention_probs_dropout_prob=cfg.attention_dropout,
        max_position_embeddings=cfg.max_position_embeddings,
        type_vocab_size=cfg.type_vocab_size, initializer_range=cfg.initializer_range,
        layer_norm_eps=cfg.layer_norm_eps, pad_token_id=cfg.pad_token_id, **extra,
    )
