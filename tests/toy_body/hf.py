"""The toy body's transformers format: a config of its own model_type (``toy-neo``) and its
weights under ``model.``; the reader takes them back."""

from __future__ import annotations

from typing import Any

from electra.model.bodies.keys import REQUIRED, config_from, rename
from electra.model.bodies.spec import Adapter

ENCODER = [("encoder.embeddings.word_embeddings.weight", "model.embed.weight"),
           ("encoder.embeddings.norm.weight", "model.embed_norm.weight"),
           ("encoder.final_norm.weight", "model.final_norm.weight"),
           ("encoder.embeddings_project.weight", "model.embed_project.weight"),
           *((f"encoder.layers.{{i}}.{n}.weight", f"model.layers.{{i}}.{n}.weight")
             for n in ("attn_norm", "qkv", "attention_out", "mlp_norm", "mlp_in", "mlp_out"))]
HEADS = {"discriminator": [("head_dense.weight", "rtd.dense.weight"),
                           ("head_out.weight", "rtd.out.weight"),
                           ("head_out.bias", "rtd.out.bias")],
         "generator": [("head_dense.weight", "mlm.dense.weight"),
                       ("head_norm.weight", "mlm.norm.weight"),
                       ("output_bias", "mlm.bias")]}
CONFIG = [("vocab_size", "vocab_size", REQUIRED), ("hidden_size", "hidden_size", REQUIRED),
          ("num_layers", "num_hidden_layers", REQUIRED),
          ("num_heads", "num_attention_heads", REQUIRED),
          ("intermediate_size", "intermediate_size", REQUIRED),
          ("max_position_embeddings", "max_position_embeddings", 64),
          ("embedding_size", "embedding_size", REQUIRED), ("layer_norm_eps", "norm_eps", 1e-6),
          ("mlp_gate", "hidden_act", "silu")]


def to_config(cfg: Any, **extra: Any) -> Any:
    from transformers import PretrainedConfig

    class ToyConfig(PretrainedConfig):
        model_type = "toy-neo"

    return ToyConfig(vocab_size=cfg.vocab_size, hidden_size=cfg.hidden_size,
                     embedding_size=cfg.embedding_size,
                     num_hidden_layers=cfg.num_layers, num_attention_heads=cfg.num_heads,
                     intermediate_size=cfg.intermediate_size,
                     max_position_embeddings=cfg.max_position_embeddings,
                     norm_eps=cfg.layer_norm_eps, hidden_act=cfg.mlp_gate,
                     pad_token_id=cfg.pad_token_id, **extra)


def _table(part: str) -> list[tuple[str, str]]:
    return [*ENCODER, *HEADS[part]]


def read(folder, hf, state, part, read_weights, fresh_discriminator):
    cfg = config_from(hf, CONFIG, str(folder / "config.json"), "a toy", body="toy",
                      hidden_dropout=0.0,
                      attention_dropout=0.0, generator_size=1.0 if part == "generator" else 0.5)
    return cfg, rename(state, _table(part), reverse=True), False


ADAPTER = Adapter("toy-neo", to_config, lambda state, part, task: rename(
    state, _table(part), reverse=False), lambda part, task: f"Toy{part.title()}", read,
    ("input_ids", "attention_mask"))
