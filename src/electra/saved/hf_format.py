"""transformers' ELECTRA format: the key tables, the config mapping, reading its folders.

Our ``Discriminator`` <-> ``ElectraForPreTraining``, our ``Generator`` <-> ``ElectraForMaskedLM``,
each fine-tuning head <-> its transformers class (the head's ``hf_class`` and ``hf_keys``,
``electra.tasks``). The key mapping is one-to-one but for a block's fused query/key/value
parameter, which transformers holds as three tensors (split on export, fused on import, rows
copied as they are), so ours -> transformers -> ours is bitwise identical.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import torch

from electra.config import ModelConfig
from electra.errors import UserError
from electra.io.files import read_json
from electra.model import Discriminator, fuse_qkv, split_qkv
from electra.saved import folders
from electra.tasks.base import HEADS

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


# The ModernBERT body (electra.model.modernbert) -> transformers' ModernBertForMaskedLM (whose
# encoder is ``model.``; ModernBertModel's keys are these without it).
MODERNBERT_ENCODER = [
    ("encoder.embeddings.word_embeddings.weight", "model.embeddings.tok_embeddings.weight"),
    ("encoder.embeddings.norm.weight", "model.embeddings.norm.weight"),
    ("encoder.final_norm.weight", "model.final_norm.weight"),
    *((f"encoder.layers.{{i}}.{ours}.weight", f"model.layers.{{i}}.{theirs}.weight")
      for ours, theirs in (("attn_norm", "attn_norm"), ("qkv", "attn.Wqkv"),
                           ("attention_out", "attn.Wo"), ("mlp_norm", "mlp_norm"),
                           ("mlp_in", "mlp.Wi"), ("mlp_out", "mlp.Wo"))),
]
MODERNBERT_GENERATOR_KEYS = [*MODERNBERT_ENCODER,
                             ("head_dense.weight", "head.dense.weight"),
                             ("head_norm.weight", "head.norm.weight"),
                             ("output_bias", "decoder.bias")]


# transformers has no ModernBERT class for replaced-token detection: the discriminator exports
# as ``ModernBertModel`` (its keys, without ``model.``) with the RTD head beside it under
# ELECTRA's names, which ModernBertModel leaves aside and electra reads back.
MODERNBERT_RTD_HEAD = [("head_dense.weight", "discriminator_predictions.dense.weight"),
                       ("head_out.weight", "discriminator_predictions.dense_prediction.weight"),
                       ("head_out.bias", "discriminator_predictions.dense_prediction.bias")]
MODERNBERT_DISCRIMINATOR_KEYS = [*((ours, theirs.removeprefix("model."))
                                   for ours, theirs in MODERNBERT_ENCODER),
                                 *MODERNBERT_RTD_HEAD]
MODERNBERT_CLASSES = {"discriminator": "ModernBertModel", "generator": "ModernBertForMaskedLM"}
# A fine-tuned head on the ModernBERT body (ModernBERT's head, then the task's classifier) ->
# its ModernBertFor* class (ElectraFor*'s counterpart), all four alike.
MODERNBERT_TASK_HEAD = [("transform.dense.weight", "head.dense.weight"),
                        ("transform.norm.weight", "head.norm.weight"),
                        ("head_out.weight", "classifier.weight"),
                        ("head_out.bias", "classifier.bias")]
_MODERNBERT_TIED = ("decoder.weight", "model.embeddings.tok_embeddings.weight")


def to_modernbert_state_dict(state: dict[str, torch.Tensor],
                             part: str = "generator") -> dict[str, torch.Tensor]:
    """A ModernBERT generator's state dict (or an encoder's, keys ``encoder.*``) in
    transformers' ``ModernBertForMaskedLM`` names, the tied decoder included; a
    discriminator's (``part``) in ModernBertModel's names with its RTD head."""
    if part == "discriminator":
        return _rename(state, MODERNBERT_DISCRIMINATOR_KEYS, reverse=False)
    if part not in MODERNBERT_CLASSES:  # a fine-tuned head
        return _rename(state, [*MODERNBERT_ENCODER, *MODERNBERT_TASK_HEAD], reverse=False)
    table = MODERNBERT_GENERATOR_KEYS if "output_bias" in state else MODERNBERT_ENCODER
    out = _rename(state, table, reverse=False)
    if "decoder.bias" in out:
        out[_MODERNBERT_TIED[0]] = out[_MODERNBERT_TIED[1]]
    return out


def from_modernbert_state_dict(state: dict[str, torch.Tensor], part: str,
                               fresh: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Our ``part``'s state dict from any ModernBERT class's weights (ModernBertModel's keys
    bare, every other class's under ``model.``). A discriminator takes the encoder and the
    RTD head where the folder has it, else ``fresh``'s head (the other classes' heads are
    left aside); a generator needs ForMaskedLM's head."""
    encoder = {k if k.startswith("model.") else f"model.{k}": v for k, v in state.items()
               if k.split(".")[0] in ("model", "embeddings", "layers", "final_norm")}
    out = _rename(encoder, MODERNBERT_ENCODER, reverse=True)
    if part == "discriminator":
        head = {k: v for k, v in state.items() if k.startswith("discriminator_predictions.")}
        out.update(_rename(head, MODERNBERT_RTD_HEAD, reverse=True) if head else
                   {k: v for k, v in fresh.items() if k.startswith("head_")})
        return out
    head = {k: v for k, v in state.items() if k.split(".")[0] in ("head", "decoder")
            and k != _MODERNBERT_TIED[0]}
    out.update(_rename(head, MODERNBERT_GENERATOR_KEYS[len(MODERNBERT_ENCODER):],
                       reverse=True))
    return out


def from_modernbert_config(hf: dict[str, Any], where: str = "config.json",
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
    return _config_from(hf, MODERNBERT_CONFIG, where, "a ModernBERT", body="modernbert",
                        embedding_size=hf.get("hidden_size"),
                        generator_size=1.0 if generator else 0.25, **thetas)


# The DeBERTa body (electra.model.deberta) -> transformers' DebertaV2Model (its keys; every
# other DebertaV2 class holds them under ``deberta.``). A block's fused Q/K/V splits into
# query_proj/key_proj/value_proj (split_qkv's query/key/value, renamed).
DEBERTA_ENCODER = [
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
# transformers has no DeBERTa class for replaced-token detection: the discriminator exports as
# DebertaV2Model with its RTD head beside it under microsoft/DeBERTa's names (the released V3
# checkpoints' ``mask_predictions.*``, ``classifer`` spelt as there), which DebertaV2Model
# leaves aside and electra reads back. The generator is DebertaV2ForMaskedLM (legacy=False:
# ``lm_predictions.lm_head``, its output tied to the word table, as the released generators).
DEBERTA_RTD_HEAD = [(f"head_{ours}.{p}", f"mask_predictions.{theirs}.{p}")
                    for ours, theirs in (("norm", "LayerNorm"), ("dense", "dense"),
                                         ("out", "classifer")) for p in ("weight", "bias")]
DEBERTA_MLM_HEAD = [("head_dense.weight", "lm_predictions.lm_head.dense.weight"),
                    ("head_dense.bias", "lm_predictions.lm_head.dense.bias"),
                    ("head_norm.weight", "lm_predictions.lm_head.LayerNorm.weight"),
                    ("head_norm.bias", "lm_predictions.lm_head.LayerNorm.bias"),
                    ("output_bias", "lm_predictions.lm_head.bias")]
# transformers' first MLM head (legacy=True, the default of its config): the same weights
DEBERTA_LEGACY_MLM_HEAD = [("head_dense.weight", "cls.predictions.transform.dense.weight"),
                           ("head_dense.bias", "cls.predictions.transform.dense.bias"),
                           ("head_norm.weight", "cls.predictions.transform.LayerNorm.weight"),
                           ("head_norm.bias", "cls.predictions.transform.LayerNorm.bias"),
                           ("output_bias", "cls.predictions.bias")]
DEBERTA_CLASSES = {"discriminator": "DebertaV2Model", "generator": "DebertaV2ForMaskedLM"}
# ELECTRA's task-head names -> DeBERTa's: its ContextPooler (dropout -> dense -> GELU) is the
# dense layer of electra's sequence and choice heads
_DEBERTA_HEAD_NAMES = (("classifier.dense.", "pooler.dense."),
                       ("classifier.out_proj.", "classifier."),
                       ("sequence_summary.summary.", "pooler.dense."))
GENERATOR_WEIGHTS = "pytorch_model.generator.bin"  # beside a released V3 discriminator's


def _deberta_prefixed(table: list[tuple[str, str]]) -> list[tuple[str, str]]:
    return [(ours, f"deberta.{theirs}") for ours, theirs in table]


def _deberta_task_keys(part: str) -> list[tuple[str, str]]:
    """The encoder under ``deberta.`` and a task head's keys in DebertaV2For*'s names."""
    head = []
    for ours, theirs in _head(part).hf_keys:
        for electra, deberta in _DEBERTA_HEAD_NAMES:
            theirs = theirs.replace(electra, deberta)
        head.append((ours, theirs))
    return [*_deberta_prefixed(DEBERTA_ENCODER), *head]


def to_deberta_state_dict(state: dict[str, torch.Tensor],
                          part: str) -> dict[str, torch.Tensor]:
    """A DeBERTa-body model's state dict in transformers' names: the discriminator as
    DebertaV2Model with its RTD head, the generator as DebertaV2ForMaskedLM, a fine-tuned
    head as its DebertaV2For* class."""
    state = split_qkv(state)
    if part == "discriminator":
        return _rename(state, [*DEBERTA_ENCODER, *DEBERTA_RTD_HEAD], reverse=False)
    if part == "generator":
        return _rename(state, [*_deberta_prefixed(DEBERTA_ENCODER), *DEBERTA_MLM_HEAD],
                       reverse=False)
    return _rename(state, _deberta_task_keys(part), reverse=False)


def from_deberta_state_dict(state: dict[str, torch.Tensor], part: str,
                            fresh: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Our ``part``'s state dict from any DebertaV2 class's weights (DebertaV2Model's keys
    bare, every other class's under ``deberta.``): the encoder, and a discriminator's RTD
    head where the folder has one (``mask_predictions.*``), else ``fresh``'s; a generator's
    MLM head from either of transformers' layouts. Other heads are left aside."""
    encoder = {k.removeprefix("deberta."): v for k, v in state.items()
               if k.split(".")[0] in ("deberta", "embeddings", "encoder")}
    out = _rename(encoder, DEBERTA_ENCODER, reverse=True)
    if part == "discriminator":
        head = {k: v for k, v in state.items() if k.startswith("mask_predictions.")}
        out.update(_rename(head, DEBERTA_RTD_HEAD, reverse=True) if head else
                   {k: v for k, v in fresh.items() if k.startswith("head_")})
    else:
        head = {k: v for k, v in state.items() if k.split(".")[0] in ("lm_predictions", "cls")
                and k != "cls.predictions.decoder.weight"}  # tied: the word table
        out.update(_rename(head, [*DEBERTA_MLM_HEAD, *DEBERTA_LEGACY_MLM_HEAD,
                                  ("output_bias", "cls.predictions.decoder.bias")],
                           reverse=True))
    fuse_qkv(out)
    return out


def from_deberta_config(hf: dict[str, Any], where: str = "config.json",
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
    return _config_from(
        hf, DEBERTA_CONFIG, where, "a DeBERTa", body="deberta", embedding_size=width,
        position_buckets=max(0, hf.get("position_buckets", -1)),
        max_relative_positions=max(0, hf.get("max_relative_positions", -1)),
        pos_att_type="|".join(t.strip().lower() for t in terms if t.strip()),
        share_att_key=bool(hf.get("share_att_key", False)), generator_size=1.0,
        generator_layers=0 if generator else max(1, layers // 2))


def to_deberta_config(cfg: ModelConfig, **extra: Any) -> Any:
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


def _deberta_class(part: str) -> str:
    """DebertaV2Model / ...ForMaskedLM, or a head's ElectraFor* counterpart."""
    return DEBERTA_CLASSES.get(part) or _head(part).hf_class.replace("Electra", "DebertaV2")


def _deberta_why_not(cfg: ModelConfig, part: str) -> str | None:
    if cfg.embedding_size != cfg.hidden_size:
        return (f"its embeddings ({cfg.embedding_size} wide) are normed, then projected to its "
                f"{cfg.hidden_size}-wide blocks (ELECTRA's order); transformers' DebertaV2 "
                f"projects before the norm")
    return None


def read_deberta(folder: Path, hf: dict[str, Any], state: dict[str, torch.Tensor],
                 part: str) -> tuple[ModelConfig, dict[str, torch.Tensor]]:
    """A DebertaV2 folder as our ``part``: a discriminator from any class (its RTD head where
    the folder has ``mask_predictions.*``, else a fresh one, seeded); a generator from
    ``pytorch_model.generator.bin`` beside it (the released V3 folders': its depth read off
    its weights) or from a DebertaV2ForMaskedLM."""
    where = str(folder / "config.json")
    if part == "generator" and (folder / GENERATOR_WEIGHTS).is_file():
        state = folders.read_weights(folder / GENERATOR_WEIGHTS)
        layers = {int(m[1]) for k in state
                  if (m := re.search(r"encoder\.layer\.(\d+)\.", k))}
        hf = {**hf, "num_hidden_layers": len(layers) or hf.get("num_hidden_layers")}
    cfg = from_deberta_config(hf, where, part == "generator")
    if part == "generator" and not any(k.split(".")[0] in ("lm_predictions", "cls")
                                       for k in state):
        raise UserError(f"{folder}: not a DebertaV2ForMaskedLM (no lm_predictions.* or cls.* "
                        f"weights) and no {GENERATOR_WEIGHTS}, so no generator; import it as "
                        f"the discriminator alone (a fresh generator is built)")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        fresh = Discriminator(cfg).state_dict() if part == "discriminator" else {}
    try:
        return cfg, from_deberta_state_dict(state, part, fresh)
    except KeyError as err:
        raise UserError(f"{folder}: unexpected weight {err}; not a DeBERTa-V3 model") from None


REQUIRED = object()  # a config.json key without a default
# (our ModelConfig field, transformers' key, the default where the file has none)
MODERNBERT_CONFIG = [
    ("vocab_size", "vocab_size", REQUIRED), ("hidden_size", "hidden_size", REQUIRED),
    ("num_layers", "num_hidden_layers", REQUIRED),
    ("num_heads", "num_attention_heads", REQUIRED),
    ("intermediate_size", "intermediate_size", REQUIRED),
    ("max_position_embeddings", "max_position_embeddings", 8192),
    ("hidden_dropout", "mlp_dropout", 0.0), ("attention_dropout", "attention_dropout", 0.0),
    ("layer_norm_eps", "norm_eps", 1e-5), ("initializer_range", "initializer_range", 0.02),
    ("local_attention", "local_attention", 128),
    ("global_every", "global_attn_every_n_layers", 3)]
DEBERTA_CONFIG = [
    ("vocab_size", "vocab_size", REQUIRED), ("hidden_size", "hidden_size", REQUIRED),
    ("num_layers", "num_hidden_layers", REQUIRED),
    ("num_heads", "num_attention_heads", REQUIRED),
    ("intermediate_size", "intermediate_size", REQUIRED),
    ("max_position_embeddings", "max_position_embeddings", 512),
    ("hidden_dropout", "hidden_dropout_prob", 0.1),
    ("attention_dropout", "attention_probs_dropout_prob", 0.1),
    ("layer_norm_eps", "layer_norm_eps", 1e-7), ("initializer_range", "initializer_range", 0.02)]
ELECTRA_CONFIG = [
    ("vocab_size", "vocab_size", REQUIRED), ("hidden_size", "hidden_size", REQUIRED),
    ("num_layers", "num_hidden_layers", REQUIRED),
    ("num_heads", "num_attention_heads", REQUIRED),
    ("intermediate_size", "intermediate_size", REQUIRED),
    ("max_position_embeddings", "max_position_embeddings", REQUIRED),
    ("type_vocab_size", "type_vocab_size", 2),
    ("hidden_dropout", "hidden_dropout_prob", 0.1),
    ("attention_dropout", "attention_probs_dropout_prob", 0.1),
    ("layer_norm_eps", "layer_norm_eps", 1e-12), ("initializer_range", "initializer_range", 0.02)]


def _config_from(hf: dict[str, Any], table: list[tuple[str, str, Any]], where: str,
                 what: str, **fixed: Any) -> ModelConfig:
    """Our ModelConfig from a transformers ``config.json`` by ``table``, ``fixed`` beside;
    a required key missing is a UserError naming it."""
    missing = [theirs for _, theirs, default in table if default is REQUIRED
               and theirs not in hf]
    if missing:
        raise UserError(f"{where}: {what} config needs {missing[0]!r}; the file is incomplete")
    values = {ours: hf.get(theirs, default) for ours, theirs, default in table}
    return ModelConfig(**values, pad_token_id=hf.get("pad_token_id", 0) or 0, **fixed)


def to_modernbert_config(cfg: ModelConfig, **extra: Any) -> Any:
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


def key_table(part: str) -> list[tuple[str, str]]:
    """(our key pattern, transformers') of ``part``: the pretraining models', or a
    fine-tuning head's (e.g. classifier <-> ElectraForSequenceClassification), looked up in
    the head registry when used (a head registered later exports too)."""
    if part == "discriminator":
        return DISCRIMINATOR_KEYS
    if part == "generator":
        return GENERATOR_KEYS
    return [*_ENCODER, *_head(part).hf_keys]


def hf_class(part: str) -> str:
    """The transformers class ``part`` exports as."""
    builtin = {"discriminator": "ElectraForPreTraining", "generator": "ElectraForMaskedLM"}
    return builtin[part] if part in builtin else _head(part).hf_class


def _head(part: str) -> Any:
    found = next((h for h in HEADS.values() if h.hf_part == part), None)
    if found is None:
        raise KeyError(f"no head exports {part!r}")
    return found
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


def to_hf_state_dict(state: dict[str, torch.Tensor], part: str) -> dict[str, torch.Tensor]:
    """Our discriminator/generator/classifier state dict -> transformers' key names."""
    out = _rename(split_qkv(state), key_table(part), reverse=False)
    if part != "generator":
        return out
    out[TIED_OUTPUT_KEY] = out["electra.embeddings.word_embeddings.weight"]
    return out


def from_hf_state_dict(state: dict[str, torch.Tensor], part: str) -> dict[str, torch.Tensor]:
    """transformers' ELECTRA state dict -> our key names (the tied output layer dropped)."""
    state = {k: v for k, v in state.items() if k != TIED_OUTPUT_KEY}
    out = _rename(state, key_table(part), reverse=True)
    fuse_qkv(out)
    return out


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


def from_hf_config(hf: dict[str, Any], where: str = "config.json") -> ModelConfig:
    """Our ModelConfig from a transformers ELECTRA ``config.json`` (as a dict)."""
    return _config_from(hf, ELECTRA_CONFIG, where, "an ELECTRA",
                        embedding_size=hf.get("embedding_size", hf.get("hidden_size")))


def need_transformers() -> None:
    try:
        import transformers  # noqa: F401
    except ImportError:
        raise UserError("export and import need transformers: pip install 'electra[hf]' "
                        "(or pip install transformers)") from None



MODEL_TYPES = ("electra", "modernbert", "deberta-v2")  # the transformers folders electra reads


class HFPart(NamedTuple):
    """A transformers folder read as our ``part``: its config, our weights, and whether a
    discriminator's replaced-token head was built fresh (a folder without one: a
    ModernBertModel, a released DeBERTa-V3 discriminator saved as DebertaV2Model)."""

    config: ModelConfig
    state: dict[str, torch.Tensor]
    head_fresh: bool = False


def read_hf_folder(folder: Path, part: str) -> HFPart:
    """The config and our weights of a transformers ``part`` folder (discriminator or
    generator): ELECTRA's classes, any ModernBERT class (:func:`read_modernbert`) or any
    DebertaV2 class (:func:`read_deberta`);
    anything else is refused, naming what the folder holds."""
    cfg_path = folder / "config.json"
    if not cfg_path.is_file():
        raise UserError(f"{folder}: no config.json, so not a transformers model folder")
    hf = read_json(cfg_path, "a transformers config")
    got = hf.get("model_type") if isinstance(hf, dict) else None
    if got not in MODEL_TYPES:
        raise UserError(f"{folder}: model_type is {got!r}, not one electra reads "
                        f"({', '.join(repr(t) for t in MODEL_TYPES)})")
    weights = next((folder / n for n in ("model.safetensors", "pytorch_model.bin")
                    if (folder / n).is_file()), None)
    if weights is None:
        raise UserError(f"{folder}: no model.safetensors or pytorch_model.bin")
    state = folders.read_weights(weights)
    fresh = part == "discriminator" and not any(
        k.startswith(("discriminator_predictions.", "mask_predictions.")) for k in state)
    if got == "modernbert":
        return HFPart(*read_modernbert(folder, hf, state, part), fresh)
    if got == "deberta-v2":
        return HFPart(*read_deberta(folder, hf, state, part), fresh)
    found = sorted({k.split(".")[0] for k in state})
    head = "discriminator_predictions" if part == "discriminator" else "generator_predictions"
    if not any(k.startswith(head) for k in state):
        raise UserError(f"{folder}: not an ELECTRA {part} (expected {head}.* weights; "
                        f"found {', '.join(found)})")
    try:
        ours = from_hf_state_dict({k: v for k, v in state.items()
                                   if not k.endswith("position_ids")}, part)
    except KeyError as err:
        raise UserError(f"{folder}: unexpected weight {err}; not an ELECTRA {part}") from None
    return HFPart(from_hf_config(hf, str(cfg_path)), ours)


def read_modernbert(folder: Path, hf: dict[str, Any], state: dict[str, torch.Tensor],
                    part: str) -> tuple[ModelConfig, dict[str, torch.Tensor]]:
    """A ModernBERT folder as our ``part``: a discriminator from any class (its RTD head when
    electra exported it, else a fresh one, seeded), a generator from ModernBertForMaskedLM."""
    cfg = from_modernbert_config(hf, str(folder / "config.json"), part == "generator")
    if part == "generator" and "decoder.bias" not in state:
        raise UserError(f"{folder}: not a ModernBertForMaskedLM (no decoder.* weights), so "
                        f"no generator; import it as the discriminator alone (a fresh "
                        f"generator is built)")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        fresh = Discriminator(cfg).state_dict() if part == "discriminator" else {}
    try:
        return cfg, from_modernbert_state_dict(state, part, fresh)
    except KeyError as err:
        raise UserError(f"{folder}: unexpected weight {err}; not a ModernBERT model") from None


@dataclass(frozen=True)
class Export:
    """How one body's models are written as transformers folders: its config, its key
    names, its classes, the inputs its tokenizer returns, and why a model of it cannot be
    (None: it can)."""

    config: Callable[..., Any]  # (ModelConfig, **extra) -> a transformers config
    state: Callable[[dict[str, torch.Tensor], str], dict[str, torch.Tensor]]
    cls: Callable[[str], str]  # part -> the transformers class
    input_names: tuple[str, ...]
    why_not: Callable[[ModelConfig, str], str | None] = lambda cfg, part: None
    specials_in_config: bool = False  # the config names [CLS]/[SEP]'s ids
    note: str | None = None  # what a user of the exported pretraining folders should know


def _modernbert_class(part: str) -> str:
    """ModernBertModel / ...ForMaskedLM, or a head's ElectraFor* counterpart."""
    return MODERNBERT_CLASSES.get(part) or _head(part).hf_class.replace("Electra", "ModernBert")


def _modernbert_why_not(cfg: ModelConfig, part: str) -> str | None:
    if part not in MODERNBERT_CLASSES:
        name = _modernbert_class(part)
        import transformers  # an optional dependency: export has checked it is there

        if not name.startswith("ModernBertFor") or not hasattr(transformers, name):
            return (f"transformers has no {name} for this head; electra's own commands "
                    f"use the folder as it is")
    if cfg.embedding_size != cfg.hidden_size:
        return (f"its embeddings ({cfg.embedding_size} wide) feed its {cfg.hidden_size}-wide "
                f"blocks through a projection that transformers' ModernBERT classes have no "
                f"place for")
    return None


def _modernbert_task_config(cfg: ModelConfig, **extra: Any) -> Any:
    """ModernBERT's config, its classifier as electra's heads are: [CLS] pooling, a head
    without bias, GELU, dropout at the model's."""
    return to_modernbert_config(cfg, classifier_pooling="cls", classifier_bias=False,
                                classifier_activation="gelu",
                                classifier_dropout=cfg.hidden_dropout, **extra)


EXPORTS = {
    "bert": Export(to_hf_config, to_hf_state_dict, hf_class,
                   ("input_ids", "token_type_ids", "attention_mask")),
    "modernbert": Export(_modernbert_task_config, to_modernbert_state_dict,
                         _modernbert_class, ("input_ids", "attention_mask"),
                         _modernbert_why_not, specials_in_config=True,
                         note="transformers has no ModernBERT class for replaced-token "
                              "detection: discriminator/ loads as ModernBertModel, and its "
                              "RTD head (discriminator_predictions.*) rides beside it for "
                              "electra detect and import"),
    "deberta": Export(to_deberta_config, to_deberta_state_dict, _deberta_class,
                      ("input_ids", "attention_mask"), _deberta_why_not,
                      note="transformers has no DeBERTa class for replaced-token detection: "
                           "discriminator/ loads as DebertaV2Model, and its RTD head "
                           "(mask_predictions.*, the released V3 checkpoints' names) rides "
                           "beside it for electra detect and import"),
}


def export_of(cfg: ModelConfig) -> Export:
    """How ``cfg``'s body exports; a body without a transformers mapping is a UserError."""
    if cfg.body not in EXPORTS:
        raise UserError(f"export: the {cfg.body} body has no transformers mapping yet (its "
                        f"transformers classes are to come); the model folders work with "
                        f"electra's own commands (finetune, predict, detect)")
    return EXPORTS[cfg.body]
