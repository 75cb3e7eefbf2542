"""transformers' ELECTRA format: the key table, the config mapping, ``export`` and ``import``.

Our ``Discriminator`` <-> ``ElectraForPreTraining``, our ``Generator`` <-> ``ElectraForMaskedLM``,
a fine-tuned ``SequenceClassifier`` <-> ``ElectraForSequenceClassification``. The key mapping is
one-to-one (no tensor is split, fused or transposed), so ours -> transformers -> ours is
bitwise identical; the config mapping is :func:`to_hf_config` / :func:`from_hf_config`.

`electra export` writes ``DIR/discriminator`` and ``DIR/generator`` (or, for a fine-tuned model,
one ``ElectraForSequenceClassification`` folder with its label names), each with
``config.json``, ``model.safetensors`` and the tokenizer files, loadable with
``from_pretrained`` and no missing or unexpected weights. `electra import` reads such folders
(the layout of the released google/electra-* checkpoints) into our ``RUN/discriminator`` and
``RUN/generator``. transformers itself is needed only to write configs (``to_hf_config``).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import torch

from electra.config import ModelConfig
from electra.errors import UserError
from electra.io import folders
from electra.io.files import read_json, staged
from electra.io.outputs import claim_out
from electra.io.tokenizer import load_tokenizer, save_tokenizer, special_names
from electra.tasks.base import HEADS, head_of

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
_TABLES = {"discriminator": DISCRIMINATOR_KEYS, "generator": GENERATOR_KEYS,
           # each fine-tuning head's, e.g. classifier <-> ElectraForSequenceClassification
           **{h.hf_part: [*_ENCODER, *h.hf_keys] for h in HEADS.values()}}
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


HF_CLASSES = {"discriminator": "ElectraForPreTraining", "generator": "ElectraForMaskedLM",
              **{h.hf_part: h.hf_class for h in HEADS.values()}}


def _need_transformers() -> None:
    try:
        import transformers  # noqa: F401
    except ImportError:
        raise UserError("export and import need transformers: pip install 'electra[hf]' "
                        "(or pip install transformers)") from None


def _load_source(src: Path) -> tuple[dict[str, torch.nn.Module], Path]:
    """The models of a run folder or a checkpoint folder (discriminator, and the generator
    when the objective has one), and the tokenizer's path."""
    if (src / "discriminator" / "config.json").is_file():
        models = {k: folders.load(src, k, flag="export")[0]
                  for k in ("discriminator", "generator") if (src / k).is_dir()}
        return models, src / "discriminator"
    if (src / "manifest.json").is_file():  # a checkpoint: RUN/checkpoints/step-N
        from electra.config import ObjectiveConfig, config_from_dict
        from electra.objectives.pretraining import ElectraPretrainingModel
        from electra.train.checkpoint import load_checkpoint

        saved = read_json(src / "config.json", "a checkpoint's config")
        where = str(src / "config.json")
        model = ElectraPretrainingModel(
            config_from_dict(ModelConfig, saved["model"], where),
            config_from_dict(ObjectiveConfig, saved.get("objective", {}), where))
        load_checkpoint(src, model)
        return model.parts(), src.parent.parent
    raise UserError(f"{src}: neither a pretraining run (discriminator/ and generator/) nor a "
                    f"checkpoint folder (manifest.json); give RUN or RUN/checkpoints/step-N")


def _write_hf_folder(folder: Path, module: torch.nn.Module, kind: str, tok: Any,
                     **hf_extra: Any) -> None:
    """config.json, model.safetensors and the tokenizer files transformers expects."""
    from safetensors.torch import save_file

    cfg: ModelConfig = module.config  # type: ignore[assignment]
    folder.mkdir(exist_ok=True)
    hf_cfg = to_hf_config(cfg, **hf_extra)
    hf_cfg.architectures = [HF_CLASSES[kind]]
    hf_cfg.save_pretrained(folder)
    # safetensors refuses tensors that share memory: the tied output layer is a copy.
    state = {k: v.detach().cpu().contiguous().clone()
             for k, v in to_hf_state_dict(module.state_dict(), kind).items()}
    save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
    save_tokenizer(tok, folder)  # tokenizer.json, vocab.txt, special_tokens_map.json
    spec = json.loads(tok.to_str())
    specials = {f"{role}_token": name for role, name in special_names(tok).items()}
    # BERT's WordPiece loads as transformers' ElectraTokenizer; any other kind (BPE,
    # Unigram) as the generic fast tokenizer over tokenizer.json, with the same roles.
    wordpiece = (spec.get("model") or {}).get("type") == "WordPiece"
    (folder / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "ElectraTokenizer" if wordpiece else "PreTrainedTokenizerFast",
         "do_lower_case": bool((spec.get("normalizer") or {}).get("lowercase", False)),
         "model_max_length": cfg.max_position_embeddings,
         # ELECTRA reads segment ids: the generic tokenizer returns them only when asked
         "model_input_names": ["input_ids", "token_type_ids", "attention_mask"],
         **specials}, indent=2))


def _is_classifier(src: Path) -> bool:
    path = src / "config.json"
    if not path.is_file() or (src / "manifest.json").is_file():
        return False
    meta = read_json(path, "a model folder's config")
    return isinstance(meta, dict) and meta.get("kind") == "classifier"


def export_hf(source: str | Path, out: str | Path, overwrite: bool = False) -> Path:
    """Write transformers folders for a run's (or checkpoint's) discriminator and generator,
    or one ``ElectraForSequenceClassification`` folder for a fine-tuned model."""
    _need_transformers()
    src, out = Path(source), Path(out)
    with claim_out(out, "export", "export", overwrite=overwrite,
                   inputs=[("the source", src)]) as claim:
        if _is_classifier(src):
            model, meta = folders.load(src, "classifier", flag="export")
            head = head_of(meta)
            labels, kind = head.hf_labels(meta), head.hf_part
            with staged(out) as tmp:
                claim.mark(tmp)
                _write_hf_folder(tmp, model, kind, load_tokenizer(src),
                                 finetuning_task=meta["task"], **labels)
            print(f"wrote {out} ({HF_CLASSES[kind]}, task {meta['task']}"
                  + (f", labels {list(labels['label2id'])})" if labels else ")"))
            return out
        models, tok_path = _load_source(src)
        tok = load_tokenizer(tok_path)
        with staged(out) as tmp:
            claim.mark(tmp)
            for kind, module in models.items():
                _write_hf_folder(tmp / kind, module, kind, tok)
    print("wrote " + " and ".join(f"{out}/{kind} ({HF_CLASSES[kind]})" for kind in models))
    return out


def _read_hf_folder(folder: Path, kind: str) -> tuple[ModelConfig, dict[str, torch.Tensor]]:
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
    head = "discriminator_predictions" if kind == "discriminator" else "generator_predictions"
    if not any(k.startswith(head) for k in state):
        raise UserError(f"{folder}: not an ELECTRA {kind} (expected {head}.* weights; "
                        f"found {', '.join(found)})")
    try:
        ours = from_hf_state_dict({k: v for k, v in state.items()
                                   if not k.endswith("position_ids")}, kind)
    except KeyError as err:
        raise UserError(f"{folder}: unexpected weight {err}; not an ELECTRA {kind}") from None
    return from_hf_config(hf, str(cfg_path)), ours


def import_hf(hf_dir: str | Path, out: str | Path, generator: str | Path | None = None,
              overwrite: bool = False) -> Path:
    """Read a transformers ELECTRA discriminator (and generator) into our run layout.

    Without a generator folder a fresh one (¼ width) is made, sharing the discriminator's
    embeddings, so the run can be fine-tuned or pretrained further.
    """
    from electra.model import Discriminator, Generator

    disc_dir, out = Path(hf_dir), Path(out)
    inputs = [("the transformers folder", disc_dir), ("--generator", generator)]
    with claim_out(out, "run", "import", overwrite=overwrite, inputs=inputs) as claim:
        d_cfg, d_state = _read_hf_folder(disc_dir, "discriminator")
        disc = Discriminator(d_cfg)
        folders.fit(disc, d_state, disc_dir)
        if generator is not None:
            g_cfg, g_state = _read_hf_folder(Path(generator), "generator")
            if (g_cfg.vocab_size, g_cfg.embedding_size) != (d_cfg.vocab_size,
                                                             d_cfg.embedding_size):
                raise UserError(f"generator {generator} has vocabulary {g_cfg.vocab_size} "
                                f"and embedding size {g_cfg.embedding_size}, the "
                                f"discriminator {d_cfg.vocab_size} and "
                                f"{d_cfg.embedding_size}; they must match to share "
                                f"embeddings")
            gen = Generator(g_cfg.replace(generator_size=1.0))
            folders.fit(gen, g_state, Path(generator))
        else:
            gen = Generator(d_cfg.generator_config(), disc.encoder.embeddings)
        tok_src = next((p for p in (disc_dir / "tokenizer.json", disc_dir / "vocab.txt")
                        if p.is_file()), None)
        if tok_src is None:
            raise UserError(f"{disc_dir}: no tokenizer.json or vocab.txt beside the weights")
        tok = load_tokenizer(tok_src)
        with staged(out) as tmp:
            claim.mark(tmp)
            folders.write(tmp / "discriminator", disc, "discriminator", tok)
            folders.write(tmp / "generator", gen, "generator", tok)
    print(f"wrote {out}/discriminator and {out}/generator"
          + ("" if generator else " (a fresh generator, sharing the discriminator's "
                                  "embeddings)"))
    return out
