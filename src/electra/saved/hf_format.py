"""transformers' format, body-agnostic: which body a transformers folder holds (its
``model_type``), reading it as our model, and how a model exports. Each body's own key
tables, config mapping, classes and folder reader are its ``hf.py``
(``electra.model.bodies.<name>.hf``, an :class:`~electra.model.bodies.spec.Adapter`); a
fine-tuning head's transformers names come from the head registry (``electra.tasks``) and
are handed to the body's adapter here.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import torch

from electra.config import ModelConfig
from electra.errors import UserError
from electra.io.files import read_json
from electra.model import Discriminator
from electra.model.bodies import BODIES, Adapter, adapter_of, model_types
from electra.saved import folders
from electra.tasks.base import HEADS

PRETRAINING_PARTS = ("discriminator", "generator")


def task_of(part: str) -> Any:
    """The fine-tuning head that exports as ``part`` (its ``hf_keys``, ``hf_class``), looked
    up when used (a head registered later exports too); None for the pretraining parts."""
    if part in PRETRAINING_PARTS:
        return None
    found = next((h for h in HEADS.values() if h.hf_part == part), None)
    if found is None:
        raise KeyError(f"no head exports {part!r}")
    return found


@dataclass(frozen=True)
class Export:
    """How one body's models are written as transformers folders (its adapter, with each
    part's head looked up)."""

    adapter: Adapter

    def config(self, cfg: ModelConfig, **extra: Any) -> Any:
        return self.adapter.config(cfg, **extra)

    def state(self, state: dict[str, torch.Tensor], part: str) -> dict[str, torch.Tensor]:
        return self.adapter.state(state, part, task_of(part))

    def cls(self, part: str) -> str:
        return self.adapter.cls(part, task_of(part))

    def why_not(self, cfg: ModelConfig, part: str) -> str | None:
        return self.adapter.why_not(cfg, part, task_of(part))

    @property
    def input_names(self) -> tuple[str, ...]:
        return self.adapter.input_names

    @property
    def specials_in_config(self) -> bool:
        return self.adapter.specials_in_config

    @property
    def note(self) -> str | None:
        return self.adapter.note


def export_of(cfg: ModelConfig) -> Export:
    """How ``cfg``'s body exports; a body without a transformers mapping is a UserError."""
    return Export(adapter_of(cfg))


def need_transformers() -> None:
    try:
        import transformers  # noqa: F401
    except ImportError:
        raise UserError("export and import need transformers: pip install 'electra[hf]' "
                        "(or pip install transformers)") from None


def generator_beside(folder: Path) -> Path | None:
    """A generator's weights beside a discriminator's in one transformers folder (a body's
    released layout: DeBERTa-V3's ``pytorch_model.generator.bin``), or None."""
    for body in BODIES.values():
        name = body.adapter.generator_weights if body.adapter else None
        if name and (folder / name).is_file():
            return folder / name
    return None


class HFPart(NamedTuple):
    """A transformers folder read as our ``part``: its config, our weights, and whether a
    discriminator's replaced-token head was built fresh (a folder without one: a
    ModernBertModel, a released DeBERTa-V3 discriminator saved as DebertaV2Model)."""

    config: ModelConfig
    state: dict[str, torch.Tensor]
    head_fresh: bool = False


def read_hf_folder(folder: Path, part: str) -> HFPart:
    """The config and our weights of a transformers ``part`` folder (discriminator or
    generator), read by the body whose ``model_type`` it has (its adapter's ``read``);
    anything else is refused, naming what the folder holds."""
    cfg_path = folder / "config.json"
    if not cfg_path.is_file():
        raise UserError(f"{folder}: no config.json, so not a transformers model folder")
    hf = read_json(cfg_path, "a transformers config")
    got = hf.get("model_type") if isinstance(hf, dict) else None
    readers = model_types()
    if got not in readers:
        raise UserError(f"{folder}: model_type is {got!r}, not one electra reads "
                        f"({', '.join(repr(t) for t in readers)})")
    weights = next((folder / n for n in ("model.safetensors", "pytorch_model.bin")
                    if (folder / n).is_file()), None)
    if weights is None:
        raise UserError(f"{folder}: no model.safetensors or pytorch_model.bin")
    adapter = readers[got].adapter
    assert adapter is not None
    return HFPart(*adapter.read(folder, hf, folders.read_weights(weights), part,
                                folders.read_weights, fresh_discriminator))


def fresh_discriminator(cfg: ModelConfig) -> dict[str, torch.Tensor]:
    """A discriminator's weights, seeded (0): the replaced-token head a folder without one is
    given, the same on every import."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return Discriminator(cfg).state_dict()
