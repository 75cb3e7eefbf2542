"""The runnable blocks of the docs' "start" pages (tests/docs_blocks.py), from the folder the
pretraining tutorial leaves (docs_blocks.START), where a reader goes on."""

from docs_blocks import chain

workdir, test_every_runnable_block_runs = chain("start", "docs_started")
