"""What the command line says of the registries without importing them: the task families
(their tasks, help and own settings), the presets, the bodies' own settings and the
objectives, in
``electra/catalog.json``. The registries import torch (1.3-2 s on a 2-core machine); `--help`
and the checks that refuse a bad flag before any work (``electra.commands.checks``) read
this instead, so they answer in a fraction of a second.

The file is written from the live registries by ``python -m electra.catalog``; a test
(tests/test_structure.py) fails, naming that command, when it differs from them. Where a
registry is imported already (a Python caller that registered a family, an objective, a body
or an evaluation of its own, then called ``electra.cli.main``), it is read instead: what it
holds is then known at no cost, plug-ins included.
"""

from __future__ import annotations

import functools
import json
import sys
from pathlib import Path
from typing import Any

PATH = Path(__file__).with_name("catalog.json")


@functools.cache
def _written() -> dict[str, Any]:
    return json.loads(PATH.read_text(encoding="utf-8"))


def _families() -> dict[str, Any]:
    from electra.config import field_docs  # (here: the registries import torch)
    from electra.tasks.registry import HEADS, settings_help  # (here: torch)

    return {"families": {name: {"tasks": list(h.tasks), "help": h.help,
                                "settings": sorted(field_docs(h.Settings))}
                         for name, h in HEADS.items()},
            "family_settings_help": settings_help()}


def _presets() -> dict[str, Any]:
    from electra.config import body_keys  # (here: with the bodies, which import torch)
    from electra.model.bodies import preset_names  # (here: torch)

    return {"presets": preset_names(), "body_keys": sorted(body_keys())}


def _objectives() -> dict[str, Any]:
    from electra.objectives.registry import OBJECTIVES  # (here: torch)

    return {"objectives": list(OBJECTIVES)}


def _evaluations() -> dict[str, Any]:
    from electra.evaluation.registry import EVALUATORS  # (here: torch)

    return {"evaluations": {name: e.help for name, e in EVALUATORS.items()}}


# Each part of the catalog: the registry module it comes from, and how it is read there.
PARTS = {"electra.tasks.registry": _families, "electra.model.bodies": _presets,
         "electra.objectives.registry": _objectives,
         "electra.evaluation.registry": _evaluations}


def build() -> dict[str, Any]:
    """The catalog from the live registries (imports torch)."""
    out: dict[str, Any] = {}
    for part in PARTS.values():
        out.update(part())
    return out


def load() -> dict[str, Any]:
    """The catalog: each part from its live registry where that is imported already (then
    what it holds, plug-ins included, is known at no cost), else from the file."""
    out = dict(_written())
    for module, part in PARTS.items():
        if module in sys.modules:
            out.update(part())
    return out


def family_keys() -> set[str]:
    """Every task family's own settings' names."""
    return {k for f in load()["families"].values() for k in f["settings"]}


def body_keys() -> set[str]:
    """Every body's own ``[model]`` settings' names."""
    return set(load()["body_keys"])


def main() -> None:
    PATH.write_text(json.dumps(build(), indent=1) + "\n", encoding="utf-8")
    print(f"wrote {PATH}")


if __name__ == "__main__":
    main()
