"""Opening a model folder: the one function every command that reads a model calls.

    RUN/                      a pretraining run (or one `electra import` wrote):
                              discriminator/ and generator/
    RUN/discriminator/, RUN/generator/, FT/seed-N/
                              one model (``electra.saved.folders``): config.json names its kind
    RUN/checkpoints/step-N/   a checkpoint (manifest.json): the run's models at that step
    a transformers folder     ElectraForPreTraining / ElectraForMaskedLM (model_type electra)

Every problem (not that kind, damaged files, weights that do not fit) is one UserError naming
the folder and the flag it came from.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torch import nn

from electra.config import ModelConfig, config_from_dict
from electra.errors import UserError
from electra.io import hub
from electra.io.checkpoint import load_checkpoint
from electra.io.files import maybe_json, read_json
from electra.model import Discriminator, Generator
from electra.objectives.config import ObjectiveConfig
from electra.objectives.pretraining import ElectraPretrainingModel
from electra.saved import folders
from electra.saved.hf_format import read_hf_folder

RUN_PARTS = ("discriminator", "generator")


@dataclass
class Opened:
    """A model folder, opened: its modules by part, where its tokenizer is, and (one model)
    its config.json."""

    parts: dict[str, nn.Module]
    tokenizer: Path
    meta: dict[str, Any] = field(default_factory=dict)
    head_fresh: bool = False  # a transformers folder without the RTD head: built fresh

    def __getitem__(self, part: str) -> nn.Module:
        return self.parts[part]


def open_model(path: str | Path, part: str | None = None, flag: str = "--model") -> Opened:
    """The model(s) in ``path``. ``part`` ("discriminator", "generator", "classifier"): that
    one module, from a run, a checkpoint, a transformers folder or its own folder; None: every
    part of a run or checkpoint, or a fine-tuned classifier."""
    src = Path(hub.resolve(path, flag))  # org/name[@revision]: its folder in the hub's cache
    if not src.is_dir():
        raise hub.no_model(path, flag)
    if (src / "manifest.json").is_file():  # a checkpoint: RUN/checkpoints/step-N
        return _pick(Opened(_checkpoint_parts(src), src.parent.parent), part, src, flag)
    meta = read_json(src / "config.json", "a model's config") if (
        src / "config.json").is_file() else {}
    if isinstance(meta, dict) and "model_type" in meta:  # a transformers folder

        kind = part or "discriminator"
        cfg, state, head_fresh = read_hf_folder(src, kind)  # refuses other heads
        module = Discriminator(cfg) if kind == "discriminator" else Generator(cfg)
        folders.fit(module, state, src)
        return Opened({kind: module}, src, head_fresh=head_fresh)
    if part is not None:  # one model: a run's part, or the part's own folder
        module, meta = folders.load(src, part, flag)
        return Opened({part: module}, folders.resolve(src, part, flag), meta)
    if (src / "discriminator" / "config.json").is_file():
        return Opened({k: folders.load(src, k, flag)[0] for k in RUN_PARTS
                       if (src / k).is_dir()}, src / "discriminator")
    if isinstance(meta, dict) and meta.get("kind") == "classifier":
        module, meta = folders.load(src, "classifier", flag)
        return Opened({"classifier": module}, src, meta)
    raise UserError(f"{src}: neither a pretraining run (discriminator/ and generator/), a "
                    f"checkpoint folder (manifest.json) nor a fine-tuned model; give RUN, "
                    f"RUN/checkpoints/step-N or FT/seed-N")


def _pick(opened: Opened, part: str | None, src: Path, flag: str) -> Opened:
    if part is None:
        return opened
    if part not in opened.parts:
        raise UserError(f"{flag} {src}: has no {part} (it holds "
                        f"{', '.join(opened.parts)})")
    return Opened({part: opened.parts[part]}, opened.tokenizer, opened.meta)


def _checkpoint_parts(src: Path) -> dict[str, nn.Module]:
    """A checkpoint's models as a finished run would keep them."""
    saved = read_json(src / "config.json", "a checkpoint's config")
    if not isinstance(saved, dict) or not isinstance(saved.get("model"), dict):
        raise UserError(f"{src}: {folders.what_instead(src, 'discriminator')}")
    where = str(src / "config.json")
    model = ElectraPretrainingModel(
        config_from_dict(ModelConfig, saved["model"], where),
        config_from_dict(ObjectiveConfig, saved.get("objective", {}), where))
    load_checkpoint(src, model)
    return model.parts()


def trained_length(meta: dict[str, Any]) -> int | None:
    """The length a fine-tuned model was trained at (its texts cut there), if it says."""
    length = (meta.get("finetune") or {}).get("max_length")
    return int(length) if isinstance(length, int) and length > 0 else None


def encoder_part(path: str | Path) -> str:
    """Which part of the folder ``path`` names holds the encoder a fine-tune or an embedding
    starts from: a fine-tuned model's classifier, else (a run, one of its parts or
    checkpoints, a transformers folder) its discriminator."""
    meta = Path(path) / "config.json"
    found = maybe_json(meta)
    kind = found.get("kind") if isinstance(found, dict) else None
    return "classifier" if kind == "classifier" else "discriminator"


def fine_tuned(path: str | Path) -> bool:
    """Whether ``path`` is a fine-tuned model's folder (its encoder part: the classifier)."""
    return encoder_part(path) == "classifier"


LayerSpec = int | str | Sequence[int]
"""A choice of states: block N (an int; 1 the first, -1 the last), or the mean of several
(``"2,4"`` or ``[2, 4]``; 0 the embeddings, the first block's input)."""


def truncate(module: Any, layer: LayerSpec, where: str) -> tuple[int, ...]:
    """``module``'s encoder cut after the highest block ``layer`` names (1 the first; -1 the
    last, -2 the one below it): what its states give, as a model of that many blocks
    (``config.num_layers``) computes them, and its export does. Returns the states to
    average, as transformers' ``hidden_states`` of the cut model index them (0 the first
    block's input, i block i's output; the top one the encoder's output, after a final norm
    where the body has one): ``()`` for one block (the cut encoder's output alone)."""
    n = len(module.encoder.layers)
    given = _layers(layer)
    several = len(given) > 1
    low = 0 if several else 1
    keep = sorted({i if i >= 0 else n + 1 + i for i in given})
    if (not several and given[0] == 0) or not all(low <= i <= n for i in keep):
        shown = ",".join(map(str, given))
        raise UserError(f"--layer {shown}: {where}'s encoder has {n} blocks; give 1 to {n} "
                        f"(or -1 the last to -{n})" + ("; 0 (the embeddings) in a list of "
                                                       "several" if several else ""))
    if len(keep) < len(given):
        raise UserError(f"--layer {','.join(map(str, given))}: names a state twice; give "
                        f"each once")
    module.encoder.layers = module.encoder.layers[:keep[-1]]
    module.config = dataclasses.replace(module.config, num_layers=keep[-1])
    return tuple(keep) if several else ()


def _layers(layer: LayerSpec) -> list[int]:
    """``--layer``'s value as ints: N, "N,M,...", or a sequence of ints."""
    if isinstance(layer, int):
        return [layer]
    if isinstance(layer, str):
        try:
            out = [int(x) for x in layer.split(",")]
        except ValueError:
            raise UserError(f"--layer {layer}: give a block (e.g. 4 or -1) or several "
                            f"separated by commas (e.g. 2,3,4: their mean)") from None
        return out
    out = [int(x) for x in layer]
    if not out:
        raise UserError("--layer: give a block (e.g. 4 or -1) or several (their mean)")
    return out
