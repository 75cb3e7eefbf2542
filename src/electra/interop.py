"""`electra export` / `electra import`: our models <-> transformers' ELECTRA folders.

Export writes ``DIR/discriminator`` (``ElectraForPreTraining``) and ``DIR/generator``
(``ElectraForMaskedLM``), each with ``config.json``, ``model.safetensors`` and the tokenizer
files, loadable with ``from_pretrained`` and no missing or unexpected weights. Import reads
such folders (the layout of the released google/electra-* checkpoints) into our
``RUN/discriminator`` and ``RUN/generator`` folders. A fine-tuned model (``OUT/seed-N`` of
``electra finetune``) exports as one ``ElectraForSequenceClassification`` folder with its
label names. The key mapping is ``electra.hf``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from electra.atomic import publish, staging_dir
from electra.config import ModelConfig
from electra.errors import UserError
from electra.hf import from_hf_state_dict, to_hf_config, to_hf_state_dict
from electra.model import Discriminator, ElectraPretrainingModel, Generator
from electra.pretrained import KINDS, load_pretrained, save_pretrained
from electra.tokenizer import load_tokenizer, save_tokenizer

HF_CLASSES = {"discriminator": "ElectraForPreTraining", "generator": "ElectraForMaskedLM"}


def _need_transformers() -> None:
    try:
        import transformers  # noqa: F401
    except ImportError:
        raise UserError("export and import need transformers: pip install 'electra[hf]' "
                        "(or pip install transformers)") from None


def _fresh_out(out: Path, overwrite: bool) -> Path:
    if out.exists() and any(out.iterdir()) and not overwrite:
        raise UserError(f"--out {out} already exists; pass --overwrite to replace it or "
                        f"choose another folder")
    return staging_dir(out)


def _load_source(src: Path) -> tuple[dict[str, torch.nn.Module], Path]:
    """Discriminator and generator from a run folder or a checkpoint folder; tokenizer path."""
    if (src / "discriminator" / "config.json").is_file():
        models = {k: load_pretrained(src, k) for k in KINDS}
        models["generator"].encoder.embeddings = models["discriminator"].encoder.embeddings
        return models, src / "discriminator"
    if (src / "manifest.json").is_file():  # a checkpoint: RUN/checkpoints/step-N
        from electra.checkpoint import load_checkpoint

        cfg_dict = json.loads((src / "config.json").read_text())
        cfg = ModelConfig(**cfg_dict["model"])
        model = ElectraPretrainingModel(cfg)
        load_checkpoint(src, model)
        run = src.parent.parent
        return {"discriminator": model.discriminator, "generator": model.generator}, run
    raise UserError(f"{src}: neither a pretraining run (discriminator/ and generator/) nor a "
                    f"checkpoint folder (manifest.json); give RUN or RUN/checkpoints/step-N")


def _write_hf_folder(folder: Path, cfg: ModelConfig, state: dict[str, torch.Tensor],
                     hf_class: str, tok: Any, **hf_extra: Any) -> None:
    """config.json, model.safetensors and the tokenizer files transformers expects."""
    folder.mkdir(exist_ok=True)
    hf_cfg = to_hf_config(cfg, **hf_extra)
    hf_cfg.architectures = [hf_class]
    hf_cfg.save_pretrained(folder)
    # safetensors refuses tensors that share memory: the tied output layer is a copy.
    state = {k: v.detach().cpu().contiguous().clone() for k, v in state.items()}
    save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
    save_tokenizer(tok, folder)
    normalizer = json.loads(tok.to_str()).get("normalizer") or {}
    specials = {"unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]",
                "cls_token": "[CLS]", "mask_token": "[MASK]"}
    (folder / "special_tokens_map.json").write_text(json.dumps(specials, indent=2))
    (folder / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "ElectraTokenizer",
         "do_lower_case": bool(normalizer.get("lowercase", False)),
         "model_max_length": cfg.max_position_embeddings, **specials}, indent=2))


def _is_classifier(src: Path) -> bool:
    path = src / "config.json"
    return path.is_file() and json.loads(path.read_text()).get("kind") == "classifier"


def _export_classifier(src: Path, out: Path, overwrite: bool) -> Path:
    """A fine-tuned model (OUT/seed-N) -> one ElectraForSequenceClassification folder."""
    from electra.finetune import load_classifier

    model, meta = load_classifier(src)
    tmp = _fresh_out(out, overwrite)
    if meta["regression"]:
        labels = {"id2label": {0: "score"}, "label2id": {"score": 0},
                  "problem_type": "regression"}
    else:
        ids = meta["labels"]  # name -> id
        labels = {"id2label": {i: name for name, i in ids.items()}, "label2id": dict(ids),
                  "problem_type": "single_label_classification"}
    _write_hf_folder(tmp, model.config, to_hf_state_dict(model.state_dict(), "classifier"),
                     "ElectraForSequenceClassification", load_tokenizer(src),
                     finetuning_task=meta["task"], **labels)
    publish(tmp, out)
    print(f"wrote {out} (ElectraForSequenceClassification, task {meta['task']}, "
          f"labels {list(labels['label2id'])})")
    return out


def export_hf(src: str | Path, out: str | Path, overwrite: bool = False) -> Path:
    """Write transformers folders for a run's (or checkpoint's) discriminator and generator,
    or one ``ElectraForSequenceClassification`` folder for a fine-tuned model."""
    _need_transformers()
    src, out = Path(src), Path(out)
    if _is_classifier(src):
        return _export_classifier(src, out, overwrite)
    models, tok_path = _load_source(src)
    tok = load_tokenizer(tok_path)
    tmp = _fresh_out(out, overwrite)
    for kind, module in models.items():
        _write_hf_folder(tmp / kind, module.config, to_hf_state_dict(module.state_dict(), kind),
                         HF_CLASSES[kind], tok)
    publish(tmp, out)
    print(f"wrote {out}/discriminator ({HF_CLASSES['discriminator']}) and {out}/generator "
          f"({HF_CLASSES['generator']})")
    return out


def _read_hf_folder(folder: Path, kind: str) -> tuple[ModelConfig, dict[str, torch.Tensor]]:
    cfg_path = folder / "config.json"
    if not cfg_path.is_file():
        raise UserError(f"{folder}: no config.json, so not a transformers model folder")
    hf = json.loads(cfg_path.read_text())
    if hf.get("model_type") != "electra":
        raise UserError(f"{folder}: model_type is {hf.get('model_type')!r}, not 'electra'")
    if (folder / "model.safetensors").is_file():
        state = load_file(str(folder / "model.safetensors"))
    elif (folder / "pytorch_model.bin").is_file():
        state = torch.load(folder / "pytorch_model.bin", map_location="cpu", weights_only=True)
    else:
        raise UserError(f"{folder}: no model.safetensors or pytorch_model.bin")
    found = sorted({k.split(".")[0] for k in state})
    head = "discriminator_predictions" if kind == "discriminator" else "generator_predictions"
    if not any(k.startswith(head) for k in state):
        raise UserError(f"{folder}: not an ELECTRA {kind} (expected {head}.* weights; "
                        f"found {', '.join(found)})")
    cfg = ModelConfig(
        vocab_size=hf["vocab_size"], embedding_size=hf.get("embedding_size", hf["hidden_size"]),
        hidden_size=hf["hidden_size"], num_layers=hf["num_hidden_layers"],
        num_heads=hf["num_attention_heads"], intermediate_size=hf["intermediate_size"],
        max_position_embeddings=hf["max_position_embeddings"],
        type_vocab_size=hf.get("type_vocab_size", 2),
        hidden_dropout=hf.get("hidden_dropout_prob", 0.1),
        attention_dropout=hf.get("attention_probs_dropout_prob", 0.1),
        layer_norm_eps=hf.get("layer_norm_eps", 1e-12),
        initializer_range=hf.get("initializer_range", 0.02),
        pad_token_id=hf.get("pad_token_id", 0) or 0)
    try:
        ours = from_hf_state_dict({k: v for k, v in state.items()
                                   if not k.endswith("position_ids")}, kind)
    except KeyError as err:
        raise UserError(f"{folder}: unexpected weight {err}; not an ELECTRA {kind}") from None
    return cfg, ours


def import_hf(disc_dir: str | Path, out: str | Path, gen_dir: str | Path | None = None,
              overwrite: bool = False) -> Path:
    """Read a transformers ELECTRA discriminator (and generator) into our run layout.

    Without a generator folder a fresh one (¼ width) is made, sharing the discriminator's
    embeddings, so the run can be fine-tuned or pretrained further.
    """
    disc_dir, out = Path(disc_dir), Path(out)
    d_cfg, d_state = _read_hf_folder(disc_dir, "discriminator")
    disc = Discriminator(d_cfg)
    disc.load_state_dict(d_state)
    if gen_dir is not None:
        g_cfg, g_state = _read_hf_folder(Path(gen_dir), "generator")
        if (g_cfg.vocab_size, g_cfg.embedding_size) != (d_cfg.vocab_size, d_cfg.embedding_size):
            raise UserError(f"generator {gen_dir} has vocabulary {g_cfg.vocab_size} and "
                            f"embedding size {g_cfg.embedding_size}, the discriminator "
                            f"{d_cfg.vocab_size} and {d_cfg.embedding_size}; they must match "
                            f"to share embeddings")
        gen = Generator(g_cfg.replace(generator_size=1.0))
        gen.load_state_dict(g_state)
    else:
        gen = Generator(d_cfg.generator_config(), disc.encoder.embeddings)
    tok_src = next((p for p in (disc_dir / "tokenizer.json", disc_dir / "vocab.txt")
                    if p.is_file()), None)
    if tok_src is None:
        raise UserError(f"{disc_dir}: no tokenizer.json or vocab.txt beside the weights")
    tok_json = load_tokenizer(tok_src).to_str()
    tmp = _fresh_out(out, overwrite)
    save_pretrained(disc, "discriminator", tmp / "discriminator", tok_json)
    save_pretrained(gen, "generator", tmp / "generator", tok_json)
    publish(tmp, out)
    print(f"wrote {out}/discriminator and {out}/generator"
          + ("" if gen_dir else " (a fresh generator, sharing the discriminator's embeddings)"))
    return out
