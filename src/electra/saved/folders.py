"""Model folders: what pretraining and fine-tuning leave, and what ``--model`` names.

    RUN/discriminator/, RUN/generator/   written at the end of pretraining (or by import);
                                         each folder holds one part (its "kind" on disk)
    FT/seed-N/                           a fine-tuned classifier
        model.safetensors   the module's weights
        config.json         {"format_version": 1, "kind": PART, "model": ModelConfig fields,
                             ...}  (a classifier adds task, labels, regression, metrics,
                             finetune settings)
        tokenizer.json      the tokenizer the model was trained with
        vocab.txt           the same vocabulary, one token per line (ids in order)
        special_tokens_map.json  which tokens play pad, unk, cls, sep and mask

:func:`resolve` turns what a user names (a run folder, or the part's own folder) into the
folder; :func:`load` builds the module from it. Every problem with a folder (missing, not
that part, damaged files, weights that do not fit the config) is one UserError naming it.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from torch import nn

from electra.config import ModelConfig, config_from_dict
from electra.data.tokenizer import save_tokenizer
from electra.errors import UserError
from electra.io import hub
from electra.io.files import pickle_refusal, read_json, staged, write_json
from electra.model import Discriminator, Generator
from electra.saved import cards
from electra.tasks.base import head_of

if TYPE_CHECKING:
    from tokenizers import Tokenizer  # (the types only: the readers stay light)

PARTS = ("discriminator", "generator", "classifier")
_HINT = {"classifier": "give OUT/seed-N from `electra finetune`"}


def _hint(part: str) -> str:
    return _HINT.get(part, f"give a pretraining run or its {part}/ folder")


def resolve(path: str | Path, part: str = "discriminator", flag: str = "--model") -> Path:
    """The folder holding ``part`` weights: ``path`` itself, or ``path/part`` (a run); a hub
    id's folder in the hub's cache (``electra.io.hub``)."""
    folder = Path(hub.resolve(path, flag))
    if (folder / part / "config.json").is_file():
        folder = folder / part
    if not (folder / "config.json").is_file() or not (folder / "model.safetensors").is_file():
        raise UserError(f"{flag} {path}: no {part} weights (config.json and "
                        f"model.safetensors); {what_instead(folder, part)}")
    return folder


def what_instead(folder: Path, part: str) -> str:
    """What to give instead of ``folder``, by what it holds: a multi-task seed folder (one
    model per task), a run interrupted before its final models (its checkpoints), a
    fine-tuning checkpoint (training state, not a model), or the usual hint."""
    tasks = sorted(p.parent.name for p in folder.glob("*/config.json")
                   if (p.parent / "model.safetensors").is_file())
    if part == "classifier" and tasks:
        return (f"it holds one model per task (a multi-task fine-tune): give "
                f"{folder}/TASK, e.g. {folder / tasks[0]}")
    done = sorted(p.parent for p in folder.glob("checkpoints/step-*/manifest.json")
                  if not p.parent.name.endswith(".partial"))
    last = done[-1] if done else None
    if last is not None and folder.name.startswith("seed-"):
        return ("it holds a fine-tune that was interrupted: continue it with `electra "
                "finetune ... --resume` to get its model")
    if last is not None and part != "classifier":
        return (f"the run has no final models yet (it was interrupted, or still runs): give "
                f"one of its checkpoints, e.g. {last}, or finish it with `electra pretrain "
                f"--resume`")
    if (folder / "manifest.json").is_file() and folder.parent.parent.name.startswith("seed-"):
        return ("a fine-tuning checkpoint holds training state, not a finished model: "
                "continue the fine-tune with --resume to get OUT/seed-N")
    return _hint(part)


def read_config(folder: Path, part: str, flag: str = "--model") -> tuple[ModelConfig,
                                                                          dict[str, Any]]:
    """(model config, the whole config.json) of a ``part`` folder; refuses other parts."""
    meta = read_json(folder / "config.json", "a model folder's config")
    if not isinstance(meta, dict) or "model" not in meta:
        raise UserError(f"{flag} {folder}: config.json is not an electra model config; "
                        f"{_hint(part)}")
    if meta.get("kind") not in PARTS:
        raise UserError(f"{flag} {folder}: not a model folder (config.json names no model "
                        f"part; a checkpoint's weights are read by `electra export`); "
                        f"{_hint(part)}")
    if meta.get("kind") != part:
        raise UserError(f"{flag} {folder}: holds a {meta.get('kind')}, not a {part}")
    return config_from_dict(ModelConfig, meta["model"], str(folder / "config.json")), meta


def build(part: str, cfg: ModelConfig, meta: dict[str, Any] | None = None) -> nn.Module:
    """A fresh module of ``part`` (a classifier: its head's, from ``meta``)."""
    if part == "discriminator":
        return Discriminator(cfg)
    if part == "generator":
        return Generator(cfg)
    meta = meta or {}
    return head_of(meta).build(cfg, meta.get("labels") or {}, bool(meta.get("regression")),
                               settings=meta.get("finetune"))


def read_weights(path: Path) -> dict[str, Any]:
    """The tensors in a ``.safetensors`` file (or a ``.bin``, loaded with weights_only: no
    code runs); damage or refused content is a UserError naming the file."""
    import pickle

    import torch
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        if path.suffix == ".bin":
            return torch.load(path, map_location="cpu", weights_only=True)
        return load_file(str(path))
    except pickle.UnpicklingError as err:
        raise UserError(f"{path}: refused, it holds more than tensors "
                        f"({pickle_refusal(err)}); nothing was loaded") from None
    except (SafetensorError, OSError, RuntimeError, EOFError) as err:
        raise UserError(f"{path}: cannot be read ({str(err).splitlines()[0]}); the file is "
                        f"damaged or truncated") from None


def fit(module: nn.Module, state: dict[str, Any], where: Path) -> None:
    """Load ``state`` into ``module``; a shape mismatch is a UserError naming ``where``."""
    try:
        module.load_state_dict(state)
    except RuntimeError as err:
        lines = [ln.strip() for ln in str(err).strip().splitlines()]
        detail = lines[1] if len(lines) > 1 else lines[0]
        raise UserError(f"{where}: the weights do not fit the model its config describes "
                        f"({detail})") from None


def load(path: str | Path, part: str = "discriminator",
         flag: str = "--model") -> tuple[nn.Module, dict[str, Any]]:
    """The module in a ``part`` folder (or a run's ``part``/), and its config.json."""
    folder = resolve(path, part, flag)
    cfg, meta = read_config(folder, part, flag)
    module = build(part, cfg, meta)
    fit(module, read_weights(folder / "model.safetensors"), folder)
    return module, meta


def write(folder: Path, module: nn.Module, part: str, tok: Tokenizer, **meta: Any) -> None:
    """Write ``module`` (its config from ``module.config``) and the tokenizer into ``folder``;
    ``meta`` adds to config.json; its ``card`` (electra.saved.cards) becomes README.md."""
    from safetensors.torch import save_file


    folder.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().contiguous().cpu() for k, v in module.state_dict().items()}
    save_file(state, str(folder / "model.safetensors"), metadata={"kind": part})
    cfg: ModelConfig = module.config  # type: ignore[assignment]
    write_json(folder / "config.json",
               {"format_version": 1, "kind": part, "model": cfg.to_dict(), **meta})
    save_tokenizer(tok, folder)
    if meta.get("card"):
        pipeline = (head_of(meta).pipeline_tag if part == "classifier"
                    else cards.PIPELINES.get(part, ""))
        cards.write(folder, meta["card"], f"electra-{part}", pipeline=pipeline, load=(
            f"from electra.saved.models import open_model  # pip install electra\n\n"
            f"{part} = open_model(\"path/to/this/folder\", \"{part}\")[\"{part}\"]\n"
            f"# or from the shell: electra export path/to/this/folder --out HF_FOLDER "
            f"(transformers' classes)"))


def save(module: nn.Module, part: str, folder: Path, tok: Tokenizer, **meta: Any) -> None:
    """:func:`write` into ``folder`` atomically (a staged copy replaces it when complete)."""
    with staged(folder) as tmp:
        write(tmp, module, part, tok, **meta)


# A fine-tuned model's folder holds its "classifier" part (whatever its head): the commands
# read and write it through these, and never name the part.


def load_classifier(folder: str | Path) -> tuple[nn.Module, dict[str, Any]]:
    """A fine-tuned model and its config.json (task, labels, settings)."""
    return load(folder, "classifier")


def classifier_folder(folder: str | Path) -> Path:
    """The folder of a fine-tuned model's weights and tokenizer."""
    return resolve(folder, "classifier")


def write_classifier(folder: Path, module: nn.Module, tok: Tokenizer, **meta: Any) -> None:
    """A fine-tuned model's folder (:func:`write` of its classifier part)."""
    write(folder, module, "classifier", tok, **meta)
