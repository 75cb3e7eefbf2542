"""Every body by name (``model.body``). A body is one folder, ``bodies/<name>/``: its
encoder (``model.py``), its transformers format (``hf.py``: key tables, config both ways,
classes, the folder reader), its recipes, defaults and the checks of its own settings
(``recipes.py``), joined in one :class:`~electra.model.bodies.spec.Body`. The generator,
the discriminator, every task head, the objectives, the FLOP count, ``--preset``, export and
import reach a body through this registry and never ask which body they hold. Adding a body
is a folder here and one line below (``tests/toy_body`` is one)."""

from __future__ import annotations

from typing import Any

from torch import nn

from electra.config import BODY_SETTINGS, ModelConfig
from electra.errors import UserError
from electra.model.bodies import bert, deberta, modernbert
from electra.model.bodies.spec import Adapter, Body, Recipe, published
from electra.registry import Registry

__all__ = ["BODIES", "Adapter", "Body", "Recipe", "adapter_of", "blocks", "body_of", "check",
           "encoder_for", "model_preset", "model_types", "preset_names", "recipe",
           "register", "remove", "task_transform"]

BODIES: Registry[Body] = Registry("body")


def register(body: Body) -> Body:
    """Add a body (a plug-in, or a test's toy) under its name, and its own settings
    (``config.BODY_SETTINGS``, what ``[model]`` keys and ``cfg.KEY`` read); returns it. A name
    already registered is refused (ValueError)."""
    BODIES.add(body.name, body)
    BODY_SETTINGS.add(body.name, body.settings)
    return body


def remove(name: str) -> None:
    """Take a body and its settings out (a test's toy, after the test)."""
    BODIES.remove(name)
    BODY_SETTINGS.remove(name)


for _body in (bert.BODY, modernbert.BODY, deberta.BODY):  # a new body: one more here
    register(_body)


def body_of(cfg: ModelConfig) -> Body:
    """The body ``cfg.body`` names; an unknown one is a UserError naming the choices."""
    if cfg.body not in BODIES:
        raise UserError(f"model.body={cfg.body!r} is not a body; choose one of "
                        f"{', '.join(BODIES)}")
    return BODIES[cfg.body]


def check(cfg: ModelConfig) -> None:
    """``cfg``'s body exists and accepts its own settings (their types and ranges, then
    ``Body.check``)."""
    body = body_of(cfg)
    body.settings.of(cfg)
    body.check(cfg)


def encoder_for(cfg: ModelConfig, embeddings: nn.Module | None = None,
                kernels: Any = None) -> nn.Module:
    """The encoder of ``cfg``'s body, with ``embeddings`` (shared) or its own."""
    check(cfg)
    return body_of(cfg).encoder(cfg, embeddings, kernels)


def blocks() -> tuple[type[nn.Module], ...]:
    """Every body's block class."""
    return tuple(b.block for b in BODIES.values())


def task_transform(cfg: ModelConfig) -> nn.Module | None:
    """The body's module before a fine-tuning head's classifier (``Body.task_head``), or
    None where each head keeps its own (the BERT body: ELECTRA's heads)."""
    make = body_of(cfg).task_head
    return None if make is None else make(cfg)


_PUBLISHED: dict[str, dict[str, Recipe]] = {}  # each body's published/ files, read once


def _recipes() -> dict[str, Recipe]:
    out = {name: r for b in BODIES.values() for name, r in b.recipes.items()}
    for b in BODIES.values():
        if b.folder is not None and (b.folder / "published").is_dir():
            if b.name not in _PUBLISHED:  # (read once its settings are registered)
                _PUBLISHED[b.name] = published(b.folder / "published", b.name, b.defaults)
            out.update(_PUBLISHED[b.name])
    return out


def preset_names() -> list[str]:
    """Every body's recipe names (``--preset``), in the registry's order."""
    return list(_recipes())


def recipe(name: str) -> Recipe:
    """The recipe ``name``; an unknown one is a UserError naming the presets."""
    found = _recipes().get(name)
    if found is None:
        raise UserError(f"unknown preset {name!r}; valid presets: {', '.join(_recipes())}")
    return found


def model_preset(name: str, **overrides: Any) -> Any:
    """A named preset's model (``tiny``, ``small``, ``base``, ``large``;
    ``modernbert-small``, ``modernbert-base``, and each with ``-mask30``;
    ``debertav3-xsmall``, ``-small``, ``-base``) with ``overrides`` applied."""
    cfg = recipe(name).model.replace(**overrides)
    check(cfg)
    return cfg


def model_types() -> dict[str, Body]:
    """Each transformers ``model_type`` a body reads -> that body."""
    return {b.adapter.model_type: b for b in BODIES.values() if b.adapter is not None}


def adapter_of(cfg: ModelConfig) -> Adapter:
    """How ``cfg``'s body exports; a body without a transformers mapping is a UserError."""
    adapter = body_of(cfg).adapter
    if adapter is None:
        raise UserError(f"export: the {cfg.body} body has no transformers mapping yet (its "
                        f"transformers classes are to come); the model folders work with "
                        f"electra's own commands (finetune, predict, detect)")
    return adapter


