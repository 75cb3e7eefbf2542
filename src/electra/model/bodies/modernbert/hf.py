"""The ModernBERT body's transformers format: our generator <-> ``ModernBertForMaskedLM``
(whose encoder is ``model.``; ``ModernBertModel``'s keys are these without it), a fine-tuned
head <-> its ``ModernBertFor*`` class. transformers has no ModernBERT class for
replaced-token detection: the discriminator exports as ``ModernBertModel`` with the RTD head
beside it under ELECTRA's names, which ModernBertModel leaves aside and electra reads back."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

import electra.model.bodies.keys as keys
from electra.config import ModelConfig
from electra.errors import UserError
from electra.model.bodies.keys import REQUIRED, config_from, converted, rename
from electra.model.bodies.spec import Adapter, State

ENCODER = [
    ("encoder.embeddings.word_embeddings.weight", "model.embeddings.tok_embeddings.weight"),
    ("encoder.embeddings.norm.weight", "model.embeddings.norm.weight"),
    ("encoder.final_norm.weight", "model.final_norm.weight"),
    *((f"encoder.layers.{{i}}.{ours}.weight", f"model.layers.{{i}}.{theirs}.weight")
      for ours, theirs in (("attn_norm", "attn_norm"), ("qkv", "attn.Wqkv"),
                           ("attention_out", "attn.Wo"), ("mlp_norm", "mlp_norm"),
                           ("mlp_in", "mlp.Wi"), ("mlp_out", "mlp.Wo"))),
]
GENERATOR_KEYS = [*ENCODER,
                  ("head_dense.weight", "head.dense.weight"),
                  ("head_norm.weight", "head.norm.weight"),
                  ("output_bias", "decoder.bias")]
RTD_HEAD = [("head_dense.weight", "discriminator_predictions.dense.weight"),
            ("head_out.weight", "discriminator_predictions.dense_prediction.weight"),
            ("head_out.bias", "discriminator_predictions.dense_prediction.bias")]
DISCRIMINATOR_KEYS = [*((ours, theirs.removeprefix("model.")) for ours, theirs in ENCODER),
                      *RTD_HEAD]
CLASSES = {"discriminator": "ModernBertModel", "generator": "ModernBertForMaskedLM"}
# A fine-tuned head on the ModernBERT body (ModernBERT's head, then the task's classifier) ->
# its ModernBertFor* class (ElectraFor*'s counterpart), all four alike.
TASK_HEAD = [("transform.dense.weight", "head.dense.weight"),
             ("transform.norm.weight", "head.norm.weight"),
             ("head_out.weight", "classifier.weight"),
             ("head_out.bias", "classifier.bias")]
_TIED = ("decoder.weight", "model.embeddings.tok_embeddings.weight")
# (our ModelConfig field, transformers' key, the default where the file has none)
CONFIG = [
    ("vocab_size", "vocab_size", REQUIRED), ("hidden_size", "hidden_size", REQUIRED),
    ("num_layers", "num_hidden_layers", REQUIRED),
    ("num_heads", "num_attention_heads", REQUIRED),
    ("intermediate_size", "intermediate_size", REQUIRED),
    ("max_position_embeddings", "max_position_embeddings", 8192),
    ("hidden_dropout", "mlp_dropout", 0.0), ("attention_dropout", "attention_dropout", 0.0),
    ("layer_norm_eps", "norm_eps", 1e-5), ("initializer_range", "initializer_range", 0.02),
    ("local_attention", "local_attention", 128),
    ("global_every", "global_attn_every_n_layers", 3)]


def to_state(state: dict[str, torch.Tensor], part: str = "generator",
             task: Any = None) -> dict[str, torch.Tensor]:
    """A ModernBERT generator's state dict (or an encoder's, keys ``encoder.*``) in
    transformers' ``ModernBertForMaskedLM`` names, the tied decoder included; a
    discriminator's (``part``) in ModernBertModel's names with its RTD head."""
    if part == "discriminator":
        return rename(state, DISCRIMINATOR_KEYS, reverse=False)
    if part not in CLASSES:  # a fine-tuned head
        return rename(state, [*ENCODER, *TASK_HEAD], reverse=False)
    table = GENERATOR_KEYS if "output_bias" in state else ENCODER
    out = rename(state, table, reverse=False)
    if "decoder.bias" in out:
        out[_TIED[0]] = out[_TIED[1]]
    return out


def from_state(state: dict[str, torch.Tensor], part: str,
               fresh: Callable[[], State]) -> dict[str, torch.Tensor]:
    """Our ``part``'s state dict from any ModernBERT class's weights (ModernBertModel's keys
    bare, every other class's under ``model.``). A discriminator takes the encoder and the
    RTD head where the folder has it, else ``fresh``'s head (the other classes' heads are
    left aside); a generator needs ForMaskedLM's head."""
    encoder = {k if k.startswith("model.") else f"model.{k}": v for k, v in state.items()
               if k.split(".")[0] in ("model", "embeddings", "layers", "final_norm")}
    out = rename(encoder, ENCODER, reverse=True)
    if part == "discriminator":
        head = {k: v for k, v in state.items() if k.startswith("discriminator_predictions.")}
        out.update(rename(head, RTD_HEAD, reverse=True) if head else
                   {k: v for k, v in fresh().items() if k.startswith("head_")})
        return out
    head = {k: v for k, v in state.items() if k.split(".")[0] in ("head", "decoder")
            and k != _TIED[0]}
    out.update(rename(head, GENERATOR_KEYS[len(ENCODER):], reverse=True))
    return out


def from_config(hf: dict[str, Any], where: str = "config.json",
                generator: bool = False) -> ModelConfig:
    """Our ModelConfig (body ``modernbert``) from a transformers ModernBERT ``config.json``:
    either layout of the RoPE thetas (``rope_parameters``, transformers 5; or
    ``global_rope_theta``/``local_rope_theta``, the released checkpoints'). Settings our body
    does not have (biases, another activation) are refused."""
    unlike = [f"{k}={hf[k]!r}" for k, want in (
        ("attention_bias", False), ("mlp_bias", False), ("norm_bias", False),
        ("hidden_activation", "gelu")) if k in hf and hf[k] != want]
    if unlike:
        raise UserError(f"{where}: {', '.join(unlike)}; electra's ModernBERT body has no "
                        f"biases and GeGLU with GELU, as the released models")
    rope = hf.get("rope_parameters") or {}
    thetas = {"global_rope_theta": float((rope.get("full_attention") or {}).get(
                  "rope_theta", hf.get("global_rope_theta", 160_000.0))),
              "local_rope_theta": float((rope.get("sliding_attention") or {}).get(
                  "rope_theta", hf.get("local_rope_theta", 10_000.0)))}
    return config_from(hf, CONFIG, where, "a ModernBERT", body="modernbert",
                       embedding_size=hf.get("hidden_size"),
                       generator_size=1.0 if generator else 0.25, **thetas)


def to_config(cfg: ModelConfig, **extra: Any) -> Any:
    """transformers ``ModernBertConfig`` with the same shape as ``cfg`` (needs transformers)."""
    from transformers import ModernBertConfig

    return ModernBertConfig(
        vocab_size=cfg.vocab_size, hidden_size=cfg.hidden_size,
        intermediate_size=cfg.intermediate_size, num_hidden_layers=cfg.num_layers,
        num_attention_heads=cfg.num_heads, max_position_embeddings=cfg.max_position_embeddings,
        norm_eps=cfg.layer_norm_eps, pad_token_id=cfg.pad_token_id,
        local_attention=cfg.local_attention, global_attn_every_n_layers=cfg.global_every,
        global_rope_theta=cfg.global_rope_theta, local_rope_theta=cfg.local_rope_theta,
        attention_dropout=cfg.attention_dropout, embedding_dropout=cfg.hidden_dropout,
        mlp_dropout=cfg.hidden_dropout, initializer_range=cfg.initializer_range, **extra)


def task_config(cfg: ModelConfig, **extra: Any) -> Any:
    """ModernBERT's config, its classifier as electra's heads are: [CLS] pooling, a head
    without bias, GELU, dropout at the model's."""
    return to_config(cfg, classifier_pooling="cls", classifier_bias=False,
                     classifier_activation="gelu", classifier_dropout=cfg.hidden_dropout,
                     **extra)


def hf_class(part: str, task: Any = None) -> str:
    """ModernBertModel / ...ForMaskedLM, or a head's ElectraFor* counterpart."""
    return CLASSES.get(part) or task.hf_class.replace("Electra", "ModernBert")


def why_not(cfg: ModelConfig, part: str, task: Any = None) -> str | None:
    if part not in CLASSES:
        name = hf_class(part, task)
        import transformers  # an optional dependency: export has checked it is there

        if not name.startswith("ModernBertFor") or not hasattr(transformers, name):
            return (f"transformers has no {name} for this head; electra's own commands "
                    f"use the folder as it is")
    if cfg.embedding_size != cfg.hidden_size:
        return (f"its embeddings ({cfg.embedding_size} wide) feed its {cfg.hidden_size}-wide "
                f"blocks through a projection that transformers' ModernBERT classes have no "
                f"place for")
    return None


def read(folder: Path, hf: dict[str, Any], state: dict[str, torch.Tensor], part: str,
         read_weights: Any, fresh_discriminator: Callable[[ModelConfig], State]
         ) -> tuple[ModelConfig, State, bool]:
    """A ModernBERT folder as our ``part``: a discriminator from any class (its RTD head when
    electra exported it, else a fresh one, seeded), a generator from ModernBertForMaskedLM."""
    cfg = from_config(hf, str(folder / "config.json"), part == "generator")
    if part == "generator" and "decoder.bias" not in state:
        raise keys.no_generator(folder, "a ModernBertForMaskedLM (no decoder.* weights)")
    head_fresh = part == "discriminator" and not any(
        k.startswith("discriminator_predictions.") for k in state)
    return cfg, converted(folder, "a ModernBERT model", from_state, state, part,
                          fresh_discriminator, cfg), head_fresh


ADAPTER = Adapter(
    "modernbert", task_config, to_state, hf_class, read, ("input_ids", "attention_mask"),
    why_not, specials_in_config=True,
    note=keys.rtd_beside("ModernBERT", "ModernBertModel", "discriminator_predictions.*"))
