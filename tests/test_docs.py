"""The documentation cannot drift from the CLI.

- Every block marked runnable in the pages of the site's navigation runs, in the
  `test_docs_*.py` files (their chains and the folder they run in: tests/docs_blocks.py);
  here, that the chains hold every such page once, in the navigation's order.
- The README's quickstart is the getting-started page's, line for line, and its links
  point at files that exist.
- The generated configuration reference lists every field of every config.

The first page also runs cold, each command its own process. `mkdocs build --strict`
itself (broken links, missing pages, API symbols that do not resolve) runs in `make test`,
beside the tests.
"""

from __future__ import annotations

import re
import sys

import pytest
from docs_blocks import CHAINS, START, nav_pages, runnable
from helpers import ROOT


def test_the_chains_hold_every_runnable_page_once_in_the_navigations_order():
    """A page missing from the chains would never run; one in two would run twice; a chain
    out of order would run a page before the one that makes what it reads."""
    pages = [p for p in nav_pages() if runnable(p)]
    whole = [page for page, block in START if block is None]  # run where the chains start
    chained = [p for chain in CHAINS.values() for p in chain]
    assert sorted(whole + chained) == sorted(pages)
    for chain in CHAINS.values():
        assert chain == [p for p in pages if p in chain]
    # START is the first pages in the navigation's order (after the first chain's, which
    # start from nothing), a page it runs a block of is in a chain (its other blocks run)
    assert [page for page, _ in START] == [p for p in pages if p not in CHAINS["first"]][
        :len(START)]
    assert all(page in chained for page, block in START if block is not None)


def test_the_pages_have_runnable_blocks_where_a_tutorial_promises_them():
    """Every tutorial and the getting-started page has at least one runnable block."""
    pages = [p for p in nav_pages() if p.startswith("tutorials/") and not
             p.endswith("index.md")] + ["getting-started.md"]
    assert [p for p in pages if not runnable(p)] == []


def test_readme_quickstart_is_the_getting_started_one():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    quick = runnable("getting-started.md")[0]
    assert quick in readme, "README.md's quickstart differs from docs/getting-started.md's"
    assert len(readme.splitlines()) <= 200
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", readme)
    assert [link for link in links if not link.startswith("http")
            and not (ROOT / link).exists()] == []


def test_configuration_reference_lists_every_setting():
    sys.path.insert(0, str(ROOT / "docs"))
    try:
        import hooks
    finally:
        sys.path.pop(0)
    from dataclasses import fields

    from electra.config import FinetuneConfig, ModelConfig, TrainConfig
    from electra.objectives.config import ObjectiveConfig
    from electra.tasks.base import HEADS

    text = hooks.config_reference()
    for cls in (ModelConfig, ObjectiveConfig, TrainConfig, FinetuneConfig,
                *(h.Settings for h in HEADS.values())):
        for f in fields(cls):
            if f.metadata.get("flat"):  # FinetuneConfig.family: the families' own, below
                continue
            key = f"{cls.SECTION}.{f.name}" if cls.SECTION else f.name
            assert f"| `{key}` |" in text, key


@pytest.mark.slow
def test_the_first_page_runs_cold(docs_bare, tmp_path, monkeypatch):
    """The chains run `electra` forked from a warm server (tests/warm_cli.py); the first
    page also runs as a reader runs it, each command its own process from a cold start, so
    what only a cold start does (imports, the entry point, its environment) is checked too."""
    from docs_blocks import copy_folder, run_blocks

    monkeypatch.setenv("ELECTRA_DOCS_COLD", "1")
    workdir = copy_folder(docs_bare, tmp_path)
    run_blocks(runnable("getting-started.md"), workdir, "getting-started.md, cold")
