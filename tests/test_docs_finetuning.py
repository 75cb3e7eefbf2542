"""The runnable blocks of the docs' "finetuning" pages (tests/docs_blocks.py), from the folder the
pretraining tutorial leaves (docs_blocks.START)."""

from docs_blocks import chain

workdir, test_every_runnable_block_runs = chain("finetuning", "docs_started")
