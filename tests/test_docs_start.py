"""The runnable blocks of the docs' "start" pages (tests/docs_blocks.py), from the bare folder,
as a reader starts."""

from __future__ import annotations

from pathlib import Path

import pytest
from docs_blocks import CHAINS, copy_folder, run_page


@pytest.fixture(scope="module")
def workdir(docs_bare, tmp_path_factory) -> Path:
    return copy_folder(docs_bare, tmp_path_factory.mktemp("docs-start"))


@pytest.mark.slow
@pytest.mark.parametrize("page", CHAINS["start"])
def test_every_runnable_block_runs(workdir, page):
    run_page(workdir, page)
