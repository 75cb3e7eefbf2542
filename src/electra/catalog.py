"""What the command line says of the registries without importing them: the task families
(their tasks, help and own settings), the presets and the objectives, in
``electra/catalog.json``. The registries import torch (1.3-2 s on a 2-core machine); `--help`
and the checks that refuse a bad flag before any work (``electra.commands.checks``) read
this instead, so they answer in a fraction of a second.

The file is written from the live registries by ``python -m electra.catalog``; a test
(tests/test_structure.py) fails, naming that command, when it differs from them. Where the
registries are imported already (a Python caller that registered a family, an objective or
a body of its own, then called ``electra.cli.main``), they are read instead: what they hold
is then known at no cost, plug-ins included.
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


def load() -> dict[str, Any]:
    """The catalog: the live registries' where all of them are imported already, else the
    file (see the module's docstring)."""
    if all(m in sys.modules for m in REGISTRIES):
        return build()
    return _written()


# The modules build() reads, each of which imports torch.
REGISTRIES = ("electra.tasks.registry", "electra.objectives.registry", "electra.model.bodies")


def build() -> dict[str, Any]:
    """The catalog from the live registries (imports torch)."""
    from electra.config import field_docs  # (here: the registries import torch)
    from electra.model.bodies import preset_names  # (here: torch)
    from electra.objectives.registry import OBJECTIVES  # (here: torch)
    from electra.tasks.registry import HEADS, settings_help  # (here: torch)

    return {
        "families": {name: {"tasks": list(h.tasks), "help": h.help,
                            "settings": sorted(field_docs(h.Settings))}
                     for name, h in HEADS.items()},
        "family_settings_help": settings_help(),
        "presets": preset_names(),
        "objectives": list(OBJECTIVES),
    }


def family_keys() -> set[str]:
    """Every task family's own settings' names."""
    return {k for f in load()["families"].values() for k in f["settings"]}


def main() -> None:
    PATH.write_text(json.dumps(build(), indent=1) + "\n", encoding="utf-8")
    print(f"wrote {PATH}")


if __name__ == "__main__":
    main()
