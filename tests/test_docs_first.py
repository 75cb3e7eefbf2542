"""The runnable blocks of the docs' first page (tests/docs_blocks.py), from the bare folder,
as a reader starts."""

from docs_blocks import chain

workdir, test_every_runnable_block_runs = chain("first", "docs_bare")
