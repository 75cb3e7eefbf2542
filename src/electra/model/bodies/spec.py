"""What a body is (:class:`Body`), how it reads and writes transformers' folders
(:class:`Adapter`, its ``hf.py``) and its named recipes (:class:`Recipe`, its
``recipes.py``). A body is one folder, ``electra/model/bodies/<name>/``: ``model.py`` (its
encoder), ``hf.py``, ``recipes.py`` (its presets, defaults and the checks of its own settings),
and ``__init__.py`` joining them in one :class:`Body`; ``electra.model.bodies`` registers it
in one line."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from electra.config import BodySettings, ModelConfig, config_from_dict
from electra.errors import UserError

State = dict[str, torch.Tensor]


@dataclass(frozen=True)
class Recipe:
    """A named preset: the model, and the objective's and the training loop's settings that
    differ from their defaults (``--preset NAME``); a published one (a file in the body's
    ``published/`` folder, :func:`published`) also says what it reproduces, from where, and
    what a CPU run scales down."""

    model: ModelConfig
    train: dict[str, Any] = field(default_factory=dict)
    objective: dict[str, Any] = field(default_factory=dict)
    file: Path | None = None  # a published recipe's file
    about: dict[str, Any] = field(default_factory=dict)  # its [recipe] table


def _toml(path: Path) -> dict[str, Any]:
    """A packaged recipe file (electra's own, so read as it is: no size guard needed)."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]
    with path.open("rb") as f:
        return tomllib.load(f)


def published(folder: Path, body: str, defaults: dict[str, Any]) -> dict[str, Recipe]:
    """The recipes of a body's ``published/`` folder: each TOML file a run as published
    (``[model]``, ``[objective]``, ``[train]``, with ``[recipe]`` saying what it is, where each
    number comes from and what a CPU run scales down) under its file's name, and, where
    ``[recipe.twin]`` gives one, its replaced-token-detection twin as NAME-rtd (the same run
    with the twin's changes: the objective, the generator's size)."""
    out: dict[str, Recipe] = {}
    for path in sorted(folder.glob("*.toml")):
        raw = _toml(path)
        about = dict(raw.get("recipe", {}))
        twin = about.get("twin")
        model_given = {**defaults, **raw.get("model", {}), "body": body}
        model = config_from_dict(ModelConfig, model_given, f"{path} [model]")
        train, objective = dict(raw.get("train", {})), dict(raw.get("objective", {}))
        out[path.stem] = Recipe(model, train, objective, path, about)
        if twin:
            out[f"{path.stem}-rtd"] = Recipe(
                config_from_dict(ModelConfig, {**model_given, **twin.get("model", {})},
                                 f"{path} [recipe.twin.model]"),
                {**train, **twin.get("train", {})}, {**objective, **twin.get("objective", {})},
                path, about)
    return out


@dataclass(frozen=True)
class Adapter:
    """How one body's models are transformers folders. ``task`` is a fine-tuning head's
    transformers mapping (its ``hf_keys`` and ``hf_class``, ELECTRA's names), None for the
    pretraining parts (``discriminator``, ``generator``).

    ``config(cfg, **extra)``: a transformers config of ``cfg``'s shape; ``state(state, part,
    task)``: our weights in transformers' names; ``cls(part, task)``: the class ``part``
    exports as; ``read(folder, hf, state, part, read_weights, fresh_discriminator)``: a
    folder of ``model_type`` (its config.json ``hf``, its weights ``state``) as our
    ``(config, weights, head_fresh)``, a discriminator without a replaced-token head given
    ``fresh_discriminator(config)``'s, anything it does not hold refused in one line;
    ``why_not(cfg, part, task)``: why such a model cannot be exported (None: it can)."""

    model_type: str
    config: Callable[..., Any]
    state: Callable[[State, str, Any], State]
    cls: Callable[[str, Any], str]
    read: Callable[[Path, dict[str, Any], State, str, Callable[[Path], State],
                    Callable[[ModelConfig], State]], tuple[ModelConfig, State, bool]]
    input_names: tuple[str, ...]
    why_not: Callable[[ModelConfig, str, Any], str | None] = lambda cfg, part, task: None
    specials_in_config: bool = False  # the config names [CLS]/[SEP]'s ids
    note: str | None = None  # what a user of the exported pretraining folders should know
    generator_weights: str | None = None  # a file beside a discriminator holding a generator


def _no_check(cfg: ModelConfig) -> None:
    return None


@dataclass(frozen=True)
class Body:
    """One body: ``encoder(cfg, embeddings, kernels)`` (its own embeddings when None),
    ``gdes(cfg, shared_table, kernels)``, its block class (the unit FSDP shards and
    ``train.compile`` compiles), its multiply-accumulates per token of a sequence (what the
    FLOP count adds up), ``bias``: whether the heads' dense layers and norms carry biases
    (BERT's do, ModernBERT's do not), ``length_error(cfg, seq_len)``: why rows of that
    length do not suit the body's settings (None: they do), and ``task_head``: the module a
    fine-tuning head applies before its classifier (ModernBERT's dense -> GELU -> norm, as
    its ``ModernBertFor*`` classes; None: each head its own, as ELECTRA's classes),
    ``packed_rows``: whether it reads rows of several sequences (``prepare --pack``),
    ``rtd_context``: whether the discriminator's head first norms each state plus its row's
    [CLS] state (DeBERTa's replaced-token head; ELECTRA's reads the state alone).

    Its settings: ``settings`` the class of its own (a ``BodySettings``: fields, ranges and
    docs, in its folder; read as ``cfg.KEY``), ``check(cfg)`` refuses values it cannot run (a
    UserError), ``check_exportable(cfg)`` what a pretraining run refuses before it starts
    because export would, ``defaults`` what a config switching to it brings (its published
    dropout and LayerNorm epsilon), ``recipes`` its named presets (and the files of
    ``folder/published/``, :func:`published`), ``adapter`` its transformers format (None: the
    folders work with electra's own commands only)."""

    name: str
    encoder: Callable[..., nn.Module]
    gdes: Callable[..., nn.Module]
    block: type[nn.Module]
    macs_per_token: Callable[[Any, int], int]
    bias: bool = True
    length_error: Callable[[Any, int], str | None] = lambda cfg, seq_len: None
    task_head: Callable[[Any], nn.Module] | None = None
    packed_rows: bool = True  # whether it keeps the sequences of a packed row apart
    rtd_context: bool = False
    settings: type[BodySettings] = BodySettings
    check: Callable[[Any], None] = _no_check
    check_exportable: Callable[[Any], None] = _no_check
    defaults: dict[str, Any] = field(default_factory=dict)
    recipes: dict[str, Recipe] = field(default_factory=dict)
    adapter: Adapter | None = None
    folder: Path | None = None  # its folder: published/ holds its recipes as files


def as_wide_as_blocks(cfg: ModelConfig) -> None:
    """A body whose transformers classes have no place for ELECTRA's projection of narrower
    embeddings: such a model trains, but ``electra export`` would refuse it hours later, so
    a pretraining run refuses it before it starts (``Body.check_exportable``)."""
    if cfg.embedding_size != cfg.hidden_size:
        raise UserError(
            f"model.embedding_size={cfg.embedding_size} differs from "
            f"model.hidden_size={cfg.hidden_size}: a {cfg.body} body's embeddings are "
            f"as wide as its blocks (transformers' classes have no place for ELECTRA's "
            f"projection, so the model could not be exported); set "
            f"model.embedding_size={cfg.hidden_size}")


def published_table(recipe: Recipe) -> str:
    """A published recipe's settings as a markdown table: each setting, its value in the
    file, and where the number comes from (``[recipe.from]``) or what a CPU run scaled down
    from (``[recipe.scaled]``); what docs/reference/recipes.md shows (a test holds the page
    to the files)."""
    about = recipe.about
    assert recipe.file is not None, "a published recipe (a file's)"
    rows = ["| setting | value | from |", "|---|---|---|"]
    values = {**{f"model.{k}": v for k, v in _toml(recipe.file).get("model", {}).items()},
              **{f"objective.{k}": v for k, v in recipe.objective.items()},
              **{f"train.{k}": v for k, v in recipe.train.items()}}
    for key, value in values.items():
        if key in about.get("scaled", {}):
            where = f"scaled for a CPU (published: {about['scaled'][key]})"
        else:
            where = about.get("from", {}).get(key, "")
        rows.append(f"| `{key}` | `{value!r}` | {where} |")
    return "\n".join(rows)
