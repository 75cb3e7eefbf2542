"""The BERT body's transformers format (ELECTRA's classes): our ``Discriminator`` <->
``ElectraForPreTraining``, our ``Generator`` <-> ``ElectraForMaskedLM``, each fine-tuning
head <-> its ``ElectraFor*`` class (the head's ``hf_keys`` and ``hf_class``). The key mapping
is one-to-one but for a block's fused query/key/value parameter, which transformers holds as
three tensors (split on export, fused on import, rows copied as they are), so ours ->
transformers -> ours is bitwise identical."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from electra.config import ModelConfig
from electra.errors import UserError
from electra.model.bodies.keys import REQUIRED, config_from, converted, rename
from electra.model.bodies.spec import Adapter
from electra.model.layers import fuse_qkv, split_qkv

# (our key pattern, transformers key pattern); "{i}" is a layer index.
ENCODER = [
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
        ENCODER.append((f"encoder.layers.{{i}}.{ours}.{p}",
                        f"electra.encoder.layer.{{i}}.{theirs}.{p}"))

DISCRIMINATOR_KEYS = [*ENCODER,
                      ("head_dense.weight", "discriminator_predictions.dense.weight"),
                      ("head_dense.bias", "discriminator_predictions.dense.bias"),
                      ("head_out.weight", "discriminator_predictions.dense_prediction.weight"),
                      ("head_out.bias", "discriminator_predictions.dense_prediction.bias")]
GENERATOR_KEYS = [*ENCODER,
                  ("head_dense.weight", "generator_predictions.dense.weight"),
                  ("head_dense.bias", "generator_predictions.dense.bias"),
                  ("head_norm.weight", "generator_predictions.LayerNorm.weight"),
                  ("head_norm.bias", "generator_predictions.LayerNorm.bias"),
                  ("output_bias", "generator_lm_head.bias")]
CLASSES = {"discriminator": "ElectraForPreTraining", "generator": "ElectraForMaskedLM"}
_MODEL_ROOTS = ("embeddings", "embeddings_project", "encoder")  # ElectraModel's bare keys
# transformers also stores the tied output layer; it equals the word table.
TIED_OUTPUT_KEY = "generator_lm_head.weight"
CONFIG = [
    ("vocab_size", "vocab_size", REQUIRED), ("hidden_size", "hidden_size", REQUIRED),
    ("num_layers", "num_hidden_layers", REQUIRED),
    ("num_heads", "num_attention_heads", REQUIRED),
    ("intermediate_size", "intermediate_size", REQUIRED),
    ("max_position_embeddings", "max_position_embeddings", REQUIRED),
    ("type_vocab_size", "type_vocab_size", 2),
    ("hidden_dropout", "hidden_dropout_prob", 0.1),
    ("attention_dropout", "attention_probs_dropout_prob", 0.1),
    ("layer_norm_eps", "layer_norm_eps", 1e-12), ("initializer_range", "initializer_range", 0.02)]


def key_table(part: str, task: Any = None) -> list[tuple[str, str]]:
    """(our key pattern, transformers') of ``part``: the pretraining models', or a
    fine-tuning head's (``task``: e.g. classifier <-> ElectraForSequenceClassification)."""
    if part == "discriminator":
        return DISCRIMINATOR_KEYS
    if part == "generator":
        return GENERATOR_KEYS
    return [*ENCODER, *task.hf_keys]


def hf_class(part: str, task: Any = None) -> str:
    """The transformers class ``part`` exports as."""
    return CLASSES.get(part) or task.hf_class


def to_state(state: dict[str, torch.Tensor], part: str,
             task: Any = None) -> dict[str, torch.Tensor]:
    """Our discriminator/generator/fine-tuned state dict -> transformers' key names."""
    out = rename(split_qkv(state), key_table(part, task), reverse=False)
    if part != "generator":
        return out
    out[TIED_OUTPUT_KEY] = out["electra.embeddings.word_embeddings.weight"]
    return out


def from_state(state: dict[str, torch.Tensor], part: str,
               task: Any = None) -> dict[str, torch.Tensor]:
    """transformers' ELECTRA state dict -> our key names (the tied output layer dropped)."""
    state = {k: v for k, v in state.items() if k != TIED_OUTPUT_KEY}
    out = rename(state, key_table(part, task), reverse=True)
    fuse_qkv(out)
    return out


def to_config(cfg: ModelConfig, **extra: Any) -> Any:
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


def from_config(hf: dict[str, Any], where: str = "config.json") -> ModelConfig:
    """Our ModelConfig from a transformers ELECTRA ``config.json`` (as a dict)."""
    return config_from(hf, CONFIG, where, "an ELECTRA",
                       embedding_size=hf.get("embedding_size", hf.get("hidden_size")))


def read(folder: Path, hf: dict[str, Any], state: dict[str, torch.Tensor], part: str,
         read_weights: Any = None, fresh_discriminator: Any = None
         ) -> tuple[ModelConfig, dict[str, torch.Tensor], bool]:
    """An ELECTRA folder as our ``part``: ElectraForPreTraining's or ElectraForMaskedLM's
    weights; a discriminator also from an ``ElectraModel`` (the encoder alone: a
    sentence-transformers folder's, an embedding model's), its replaced-token head built
    fresh. The other classes are refused, naming what the folder holds."""
    found = sorted({k.split(".")[0] for k in state})
    cfg = from_config(hf, str(folder / "config.json"))
    head = "discriminator_predictions" if part == "discriminator" else "generator_predictions"
    state = {(f"electra.{k}" if k.split(".")[0] in _MODEL_ROOTS else k): v  # ElectraModel's
             for k, v in state.items() if not k.endswith("position_ids")}
    has_head = any(k.startswith(head) for k in state)
    bare = part == "discriminator" and not has_head and all(
        k.startswith("electra.") for k in state)  # an encoder alone: its head built fresh
    if not (has_head or bare):
        raise UserError(f"{folder}: not an ELECTRA {part} (expected {head}.* weights; "
                        f"found {', '.join(found)})")

    def convert(state: dict[str, torch.Tensor], part: str,
                fresh: Any) -> dict[str, torch.Tensor]:
        if not bare:
            return from_state(state, part)
        ours = rename(state, ENCODER, reverse=True)
        fuse_qkv(ours)
        return ours | {k: v for k, v in fresh().items() if k.startswith("head_")}

    return cfg, converted(folder, f"an ELECTRA {part}", convert, state, part,
                          fresh_discriminator, cfg), bare


ADAPTER = Adapter("electra", to_config, to_state, hf_class, read,
                  ("input_ids", "token_type_ids", "attention_mask"))
