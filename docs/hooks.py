"""MkDocs hooks: the pages generated from the code, so they cannot drift from it.

- ``<!-- electra:config -->`` becomes the configuration reference: every field of the config
  dataclasses (``electra.config``) with its ``--set`` key, type, default, range (the class's
  ``RANGES``, which is also what validation checks) and its docstring.
- ``<!-- electra:commands -->`` becomes every command's ``--help``, from the CLI's own parser.
"""

from __future__ import annotations

import dataclasses
import io
import os
import re
from contextlib import redirect_stdout

MARK = re.compile(r"<!-- electra:(config|commands) -->")


def on_page_markdown(markdown: str, page, config, files) -> str:
    return MARK.sub(lambda m: GENERATORS[m.group(1)](), markdown)


def _default(f: dataclasses.Field) -> str:
    value = f.default  # every config field has a plain default
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}"' if value else '""'
    return f"{value:g}" if isinstance(value, float) else f"{value:,}".replace(",", "_")


def _range(cls: type, name: str, kind: str) -> str:
    spec = cls.RANGES.get(name)
    if name == "kind" and cls.__name__ == "ObjectiveConfig":
        from electra.objectives.registry import OBJECTIVES

        spec = tuple(OBJECTIVES)
    if isinstance(spec, tuple):
        return " \\| ".join(f"`{c}`" for c in spec)
    if spec:
        return f"`{spec}`"
    return "true \\| false" if kind == "bool" else "any"


def config_reference() -> str:
    from electra.config import FinetuneConfig, ModelConfig, TrainConfig, config_keys, field_docs
    from electra.model.bodies import BODIES
    from electra.objectives.config import ObjectiveConfig
    from electra.tasks.base import HEADS

    fine = "`electra finetune` / `evaluate` / `compare --finetune-set`: `--set KEY=VALUE`"
    families: dict[type, list[str]] = {}
    for head in HEADS.values():
        if dataclasses.fields(head.Settings):
            families.setdefault(head.Settings, []).append(head.name)
    out = []
    model = "`[model]` in a `--config` TOML, or `--set model.KEY=VALUE`"
    for cls, how in ((ModelConfig, model),
                     *((b.settings, f"{model}, with `model.body={b.name}`")
                       for b in BODIES.values() if dataclasses.fields(b.settings)),
                     (ObjectiveConfig, "`[objective]`, or `--set objective.KEY=VALUE`"),
                     (TrainConfig, "`[train]`, or `--set train.KEY=VALUE`"),
                     (FinetuneConfig, f"{fine} (no section)"),
                     *((settings, f"{fine} (no section), for the {' and '.join(names)} "
                       f"famil{'ies' if len(names) > 1 else 'y'}'s tasks")
                       for settings, names in families.items())):
        docs = field_docs(cls)
        section = cls.SECTION
        title = (f"`[{section}]`, a body's own: {cls.__name__}" if section and cls is not
                 ModelConfig else f"`[{section}]`: {cls.__name__}" if section else
                 f"Fine-tuning: {cls.__name__}" if cls is FinetuneConfig else
                 f"A task family's: {cls.__name__}")
        out += [f"## {title}", "", (cls.__doc__ or "").strip().splitlines()[0], "",
                f"Set with {how}.", "",
                "| key | type | default | range | what it does |", "|---|---|---|---|---|"]
        by_name = {f.name: f for f in dataclasses.fields(cls)}
        for f in (by_name[k] for k in config_keys(cls)):
            kind = str(f.type).replace("|", "or").replace(" or None", ", unset")
            key = f"{section}.{f.name}" if section else f.name
            doc = docs.get(f.name, "").replace("|", "\\|")
            out.append(f"| `{key}` | {kind} | `{_default(f)}` | {_range(cls, f.name, str(f.type))}"
                       f" | {doc} |")
        out.append("")
    from electra import environ

    out += ["## Environment variables", "", "Read by every command through one checked parser "
            "(`electra.environ`): a value that does not parse or is out of range is one line "
            "naming it, exit 2, before any work; unset or empty is the default.", "",
            environ.reference(), ""]
    return "\n".join(out)


def commands_reference() -> str:
    from electra.cli import COMMANDS, build_parser

    os.environ["COLUMNS"] = "100"  # argparse wraps to the terminal's width
    parser = build_parser()
    out = []
    for name in COMMANDS:
        words = name.split()
        buf = io.StringIO()
        try:
            with redirect_stdout(buf):
                parser.parse_args([*words, "--help"])
        except SystemExit:
            pass
        text = re.sub(r"usage: \S+ ", "usage: electra ", buf.getvalue(), count=1)
        out += [f"## `electra {name}`", "", "```text", text.rstrip(), "```", ""]
    return "\n".join(out)


GENERATORS = {"config": config_reference, "commands": commands_reference}
