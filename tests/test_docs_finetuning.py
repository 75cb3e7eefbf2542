"""The runnable blocks of the docs' "finetuning" pages (tests/docs_blocks.py), from the folder the
pretraining tutorial leaves (docs_blocks.START)."""

from __future__ import annotations

from pathlib import Path

import pytest
from docs_blocks import CHAINS, copy_folder, run_page


@pytest.fixture(scope="module")
def workdir(docs_started, tmp_path_factory) -> Path:
    return copy_folder(docs_started, tmp_path_factory.mktemp("docs-finetuning"))


@pytest.mark.slow
@pytest.mark.parametrize("page", CHAINS["finetuning"])
def test_every_runnable_block_runs(workdir, page):
    run_page(workdir, page)
