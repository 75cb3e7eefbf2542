"""transformers' ELECTRA format: the key tables, the config mapping, reading its folders.

Our ``Discriminator`` <-> ``ElectraForPreTraining``, our ``Generator`` <-> ``ElectraForMaskedLM``,
each fine-tuning head <-> its transformers class (the head's ``hf_class`` and ``hf_keys``,
``electra.tasks``). The key mapping is one-to-one but for a block's fused query/key/value
parameter, which transformers holds as three tensors (split on export, fused on import, rows
copied as they are), so ours -> transformers -> ours is bitwise identical.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import torch

from electra.config import ModelConfig
from electra.errors import UserError
from electra.io.files import read_json
from electra.model import fuse_qkv, split_qkv
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
# encoder is ``model.``; ModernBertModel's keys are these without it). Its export and import
# commands are still to come (issue 42); the tests hold the body to transformers through it.
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


def to_modernbert_state_dict(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A ModernBERT generator's state dict (or an encoder's, keys ``encoder.*``) in
    transformers' ``ModernBertForMaskedLM`` names, the tied decoder included."""
    table = MODERNBERT_GENERATOR_KEYS if "output_bias" in state else MODERNBERT_ENCODER
    out = _rename(state, table, reverse=False)
    if "decoder.bias" in out:
        out["decoder.weight"] = out["model.embeddings.tok_embeddings.weight"]
    return out


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
    try:
        return ModelConfig(
            vocab_size=hf["vocab_size"],
            embedding_size=hf.get("embedding_size", hf["hidden_size"]),
            hidden_size=hf["hidden_size"], num_layers=hf["num_hidden_layers"],
            num_heads=hf["num_attention_heads"], intermediate_size=hf["intermediate_size"],
            max_position_embeddings=hf["max_position_embeddings"],
            type_vocab_size=hf.get("type_vocab_size", 2),
            hidden_dropout=hf.get("hidden_dropout_prob", 0.1),
            attention_dropout=hf.get("attention_probs_dropout_prob", 0.1),
            layer_norm_eps=hf.get("layer_norm_eps", 1e-12),
            initializer_range=hf.get("initializer_range", 0.02),
            pad_token_id=hf.get("pad_token_id", 0) or 0)
    except KeyError as err:
        raise UserError(f"{where}: an ELECTRA config needs {err.args[0]!r}; the file is "
                        f"incomplete") from None


def need_transformers() -> None:
    try:
        import transformers  # noqa: F401
    except ImportError:
        raise UserError("export and import need transformers: pip install 'electra[hf]' "
                        "(or pip install transformers)") from None



def read_hf_folder(folder: Path, part: str) -> tuple[ModelConfig, dict[str, torch.Tensor]]:
    """The config and our weights of a transformers ELECTRA ``part`` folder (discriminator
    or generator); anything else is refused, naming what the folder holds."""
    cfg_path = folder / "config.json"
    if not cfg_path.is_file():
        raise UserError(f"{folder}: no config.json, so not a transformers model folder")
    hf = read_json(cfg_path, "a transformers config")
    if not isinstance(hf, dict) or hf.get("model_type") != "electra":
        got = hf.get("model_type") if isinstance(hf, dict) else None
        raise UserError(f"{folder}: model_type is {got!r}, not 'electra'")
    weights = next((folder / n for n in ("model.safetensors", "pytorch_model.bin")
                    if (folder / n).is_file()), None)
    if weights is None:
        raise UserError(f"{folder}: no model.safetensors or pytorch_model.bin")
    state = folders.read_weights(weights)
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
    return from_hf_config(hf, str(cfg_path)), ours
