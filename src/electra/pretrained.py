"""Final model folders (``RUN/discriminator``, ``RUN/generator``) that later steps read.

    model.safetensors   the module's weights
    config.json         {"kind": ..., "model": ModelConfig fields, "format_version": 1}
    tokenizer.json      the tokenizer the model was trained with
    vocab.txt           the same vocabulary, one token per line (ids in order)
"""

from __future__ import annotations

import json
from pathlib import Path

from safetensors.torch import load_file, save_file
from torch import nn

from electra.atomic import publish, staging_dir
from electra.config import ModelConfig, config_from_dict
from electra.errors import UserError

KINDS = ("discriminator", "generator")


def save_pretrained(module: nn.Module, kind: str, folder: Path, tokenizer_json: str) -> None:
    """Write ``module`` (a Discriminator or Generator) to ``folder`` atomically."""
    from tokenizers import Tokenizer

    from electra.tokenizer import save_tokenizer

    tmp = staging_dir(folder)
    state = {k: v.detach().contiguous().cpu() for k, v in module.state_dict().items()}
    save_file(state, str(tmp / "model.safetensors"), metadata={"kind": kind})
    cfg: ModelConfig = module.config  # type: ignore[assignment]
    (tmp / "config.json").write_text(json.dumps(
        {"format_version": 1, "kind": kind, "model": cfg.to_dict()}, indent=2))
    save_tokenizer(Tokenizer.from_str(tokenizer_json), tmp)
    publish(tmp, folder)


def load_pretrained(folder: str | Path, kind: str = "discriminator") -> nn.Module:
    """Load a folder written by :func:`save_pretrained` into a fresh module."""
    from electra.model import Discriminator, Generator

    folder = Path(folder)
    if (folder / kind / "config.json").is_file():  # a run folder was given
        folder = folder / kind
    cfg_path, weights = folder / "config.json", folder / "model.safetensors"
    if not cfg_path.is_file() or not weights.is_file():
        raise UserError(f"--model {folder}: no {kind} weights (config.json and "
                        f"model.safetensors); give a pretraining run or its {kind}/ folder")
    meta = json.loads(cfg_path.read_text())
    if meta.get("kind") != kind:
        raise UserError(f"--model {folder}: holds a {meta.get('kind')}, not a {kind}")
    cfg = config_from_dict(ModelConfig, meta["model"], f"{cfg_path}")
    module = (Discriminator if kind == "discriminator" else Generator)(cfg)
    module.load_state_dict(load_file(str(weights)))
    return module
