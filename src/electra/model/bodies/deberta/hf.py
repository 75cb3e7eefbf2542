"""The DeBERTa body's transformers format: ``DebertaV2Model``'s keys (every other DebertaV2
class holds them under ``deberta.``; a block's fused Q/K/V splits into
query_proj/key_proj/value_proj). transformers has no DeBERTa class for replaced-token
detection: the discriminator exports as DebertaV2Model with its RTD head beside it under
microsoft/DeBERTa's names (the released V3 checkpoints' ``mask_predictions.*``,
``classifer`` spelt as there), which DebertaV2Model leaves aside and electra reads back. The
generator is DebertaV2ForMaskedLM (legacy=False: ``lm_predictions.lm_head``, its output tied
to the word table, as the released generators)."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

import electra.model.bodies.keys as keys
from electra.config import ModelConfig
from electra.errors import UserError
from electra.model.bodies.keys import REQUIRED, config_from, converted, rename
from electra.model.bodies.spec import Adapter, State
from electra.model.layers import fuse_qkv, split_qkv

ENCODER = [
    ("encoder.embeddings.word_embeddings.weight", "embeddings.word_embeddings.weight"),
    ("encoder.embeddings.layer_norm.weight", "embeddings.LayerNorm.weight"),
    ("encoder.embeddings.layer_norm.bias", "embeddings.LayerNorm.bias"),
    ("encoder.rel_embeddings.weight", "encoder.rel_embeddings.weight"),
    ("encoder.rel_norm.weight", "encoder.LayerNorm.weight"),
    ("encoder.rel_norm.bias", "encoder.LayerNorm.bias"),
    *((f"encoder.layers.{{i}}.{ours}.{p}", f"encoder.layer.{{i}}.{theirs}.{p}")
      for ours, theirs in (("query", "attention.self.query_proj"),
                           ("key", "attention.self.key_proj"),
                           ("value", "attention.self.value_proj"),
                           ("pos_key", "attention.self.pos_key_proj"),
                           ("pos_query", "attention.self.pos_query_proj"),
                           ("attention_out", "attention.output.dense"),
                           ("attention_norm", "attention.output.LayerNorm"),
                           ("ffn_in", "intermediate.dense"), ("ffn_out", "output.dense"),
                           ("ffn_norm", "output.LayerNorm"))
      for p in ("weight", "bias")),
]
RTD_HEAD = [(f"head_{ours}.{p}", f"mask_predictions.{theirs}.{p}")
            for ours, theirs in (("norm", "LayerNorm"), ("dense", "dense"),
                                 ("out", "classifer")) for p in ("weight", "bias")]
MLM_HEAD = [("head_dense.weight", "lm_predictions.lm_head.dense.weight"),
            ("head_dense.bias", "lm_predictions.lm_head.dense.bias"),
            ("head_norm.weight", "lm_predictions.lm_head.LayerNorm.weight"),
            ("head_norm.bias", "lm_predictions.lm_head.LayerNorm.bias"),
            ("output_bias", "lm_predictions.lm_head.bias")]
# transformers' first MLM head (legacy=True, the default of its config): the same weights
LEGACY_MLM_HEAD = [("head_dense.weight", "cls.predictions.transform.dense.weight"),
                   ("head_dense.bias", "cls.predictions.transform.dense.bias"),
                   ("head_norm.weight", "cls.predictions.transform.LayerNorm.weight"),
                   ("head_norm.bias", "cls.predictions.transform.LayerNorm.bias"),
                   ("output_bias", "cls.predictions.bias")]
CLASSES = {"discriminator": "DebertaV2Model", "generator": "DebertaV2ForMaskedLM"}
# ELECTRA's task-head names -> DeBERTa's: its ContextPooler (dropout -> dense -> GELU) is the
# dense layer of electra's sequence and choice heads
_HEAD_NAMES = (("classifier.dense.", "pooler.dense."),
               ("classifier.out_proj.", "classifier."),
               ("sequence_summary.summary.", "pooler.dense."))
GENERATOR_WEIGHTS = "pytorch_model.generator.bin"  # beside a released V3 discriminator's
CONFIG = [
    ("vocab_size", "vocab_size", REQUIRED), ("hidden_size", "hidden_size", REQUIRED),
    ("num_layers", "num_hidden_layers", REQUIRED),
    ("num_heads", "num_attention_heads", REQUIRED),
    ("intermediate_size", "intermediate_size", REQUIRED),
    ("max_position_embeddings", "max_position_embeddings", 512),
    ("hidden_dropout", "hidden_dropout_prob", 0.1),
    ("attention_dropout", "attention_probs_dropout_prob", 0.1),
    ("layer_norm_eps", "layer_norm_eps", 1e-7), ("initializer_range", "initializer_range", 0.02)]


def _prefixed(table: list[tuple[str, str]]) -> list[tuple[str, str]]:
    return [(ours, f"deberta.{theirs}") for ours, theirs in table]


def _task_keys(task: Any) -> list[tuple[str, str]]:
    """The encoder under ``deberta.`` and a task head's keys in DebertaV2For*'s names."""
    head = []
    for ours, theirs in task.hf_keys:
        for electra, deberta in _HEAD_NAMES:
            theirs = theirs.replace(electra, deberta)
        head.append((ours, theirs))
    return [*_prefixed(ENCODER), *head]


def to_state(state: dict[str, torch.Tensor], part: str,
             task: Any = None) -> dict[str, torch.Tensor]:
    """A DeBERTa-body model's state dict in transformers' names: the discriminator as
    DebertaV2Model with its RTD head, the generator as DebertaV2ForMaskedLM, a fine-tuned
    head as its DebertaV2For* class."""
    state = split_qkv(state)
    if part == "discriminator":
        return rename(state, [*ENCODER, *RTD_HEAD], reverse=False)
    if part == "generator":
        return rename(state, [*_prefixed(ENCODER), *MLM_HEAD], reverse=False)
    return rename(state, _task_keys(task), reverse=False)


def from_state(state: dict[str, torch.Tensor], part: str,
               fresh: Callable[[], State]) -> dict[str, torch.Tensor]:
    """Our ``part``'s state dict from any DebertaV2 class's weights (DebertaV2Model's keys
    bare, every other class's under ``deberta.``): the encoder, and a discriminator's RTD
    head where the folder has one (``mask_predictions.*``), else ``fresh``'s; a generator's
    MLM head from either of transformers' layouts. Other heads are left aside."""
    encoder = {k.removeprefix("deberta."): v for k, v in state.items()
               if k.split(".")[0] in ("deberta", "embeddings", "encoder")}
    out = rename(encoder, ENCODER, reverse=True)
    if part == "discriminator":
        head = {k: v for k, v in state.items() if k.startswith("mask_predictions.")}
        out.update(rename(head, RTD_HEAD, reverse=True) if head else
                   {k: v for k, v in fresh().items() if k.startswith("head_")})
    else:
        head = {k: v for k, v in state.items() if k.split(".")[0] in ("lm_predictions", "cls")
                and k != "cls.predictions.decoder.weight"}  # tied: the word table
        out.update(rename(head, [*MLM_HEAD, *LEGACY_MLM_HEAD,
                                 ("output_bias", "cls.predictions.decoder.bias")],
                          reverse=True))
    fuse_qkv(out)
    return out


def from_config(hf: dict[str, Any], where: str = "config.json",
                generator: bool = False) -> ModelConfig:
    """Our ModelConfig (body ``deberta``) from a transformers DebertaV2 ``config.json``, as
    the V3 checkpoints set it; settings the body does not have are refused, naming them. A
    generator built for it is V3's: as wide, half as deep."""
    pos = hf.get("pos_att_type") or []
    terms = pos.split("|") if isinstance(pos, str) else list(pos)
    heads, width = hf.get("num_attention_heads"), hf.get("hidden_size")
    unlike = [f"{k}={hf.get(k)!r}" for k, ok in (
        ("relative_attention", hf.get("relative_attention") is True),
        ("position_biased_input", hf.get("position_biased_input") is False),
        ("type_vocab_size", not hf.get("type_vocab_size")),
        ("norm_rel_ebd", "layer_norm" in str(hf.get("norm_rel_ebd", "none"))),
        ("conv_kernel_size", not hf.get("conv_kernel_size")),
        ("hidden_act", hf.get("hidden_act", "gelu") == "gelu"),
        ("embedding_size", hf.get("embedding_size", width) == width),
        ("attention_head_size", not heads or not width or hf.get(
            "attention_head_size", width // heads) * heads == width)) if not ok]
    if unlike:
        raise UserError(f"{where}: {', '.join(unlike)}; electra's DeBERTa body is DeBERTa-V3's "
                        f"(relative attention with a normed table, no absolute positions, no "
                        f"segments, no convolution, GELU, embeddings as wide as the blocks)")
    layers = hf.get("num_hidden_layers") or 2
    return config_from(
        hf, CONFIG, where, "a DeBERTa", body="deberta", embedding_size=width,
        position_buckets=max(0, hf.get("position_buckets", -1)),
        max_relative_positions=max(0, hf.get("max_relative_positions", -1)),
        pos_att_type="|".join(t.strip().lower() for t in terms if t.strip()),
        share_att_key=bool(hf.get("share_att_key", False)), generator_size=1.0,
        generator_layers=0 if generator else max(1, layers // 2))


def to_config(cfg: ModelConfig, **extra: Any) -> Any:
    """transformers ``DebertaV2Config`` with the same shape as ``cfg`` (needs transformers);
    its pooler as electra's heads are: dense -> GELU at the model's dropout."""
    from transformers import DebertaV2Config

    return DebertaV2Config(
        vocab_size=cfg.vocab_size, hidden_size=cfg.hidden_size,
        num_hidden_layers=cfg.num_layers, num_attention_heads=cfg.num_heads,
        intermediate_size=cfg.intermediate_size, hidden_act="gelu",
        hidden_dropout_prob=cfg.hidden_dropout,
        attention_probs_dropout_prob=cfg.attention_dropout,
        max_position_embeddings=cfg.max_position_embeddings, type_vocab_size=0,
        initializer_range=cfg.initializer_range, layer_norm_eps=cfg.layer_norm_eps,
        relative_attention=True, position_biased_input=False, norm_rel_ebd="layer_norm",
        position_buckets=cfg.position_buckets or -1,
        max_relative_positions=cfg.max_relative_positions or -1,
        pos_att_type=[t for t in cfg.pos_att_type.split("|") if t],
        share_att_key=cfg.share_att_key, pad_token_id=cfg.pad_token_id,
        pooler_hidden_size=cfg.hidden_size, pooler_dropout=cfg.hidden_dropout,
        pooler_hidden_act="gelu", legacy=False, **extra)


def hf_class(part: str, task: Any = None) -> str:
    """DebertaV2Model / ...ForMaskedLM, or a head's ElectraFor* counterpart."""
    return CLASSES.get(part) or task.hf_class.replace("Electra", "DebertaV2")


def why_not(cfg: ModelConfig, part: str, task: Any = None) -> str | None:
    if cfg.embedding_size != cfg.hidden_size:
        return (f"its embeddings ({cfg.embedding_size} wide) are normed, then projected to its "
                f"{cfg.hidden_size}-wide blocks (ELECTRA's order); transformers' DebertaV2 "
                f"projects before the norm")
    return None


def read(folder: Path, hf: dict[str, Any], state: dict[str, torch.Tensor], part: str,
         read_weights: Callable[[Path], State],
         fresh_discriminator: Callable[[ModelConfig], State]
         ) -> tuple[ModelConfig, State, bool]:
    """A DebertaV2 folder as our ``part``: a discriminator from any class (its RTD head where
    the folder has ``mask_predictions.*``, else a fresh one, seeded); a generator from
    ``pytorch_model.generator.bin`` beside it (the released V3 folders': its depth read off
    its weights) or from a DebertaV2ForMaskedLM."""
    where = str(folder / "config.json")
    head_fresh = part == "discriminator" and not any(
        k.startswith("mask_predictions.") for k in state)
    if part == "generator" and (folder / GENERATOR_WEIGHTS).is_file():
        state = read_weights(folder / GENERATOR_WEIGHTS)
        layers = {int(m[1]) for k in state
                  if (m := re.search(r"encoder\.layer\.(\d+)\.", k))}
        hf = {**hf, "num_hidden_layers": len(layers) or hf.get("num_hidden_layers")}
    cfg = from_config(hf, where, part == "generator")
    if part == "generator" and not any(k.split(".")[0] in ("lm_predictions", "cls")
                                       for k in state):
        raise keys.no_generator(folder, f"a DebertaV2ForMaskedLM (no lm_predictions.* or cls.* "
                                   f"weights) and no {GENERATOR_WEIGHTS}")
    return cfg, converted(folder, "a DeBERTa-V3 model", from_state, state, part,
                          fresh_discriminator, cfg), head_fresh


ADAPTER = Adapter(
    "deberta-v2", to_config, to_state, hf_class, read, ("input_ids", "attention_mask"),
    why_not, generator_weights=GENERATOR_WEIGHTS,
    note=keys.rtd_beside("DeBERTa", "DebertaV2Model",
                    "mask_predictions.*, the released V3 checkpoints' names"))
