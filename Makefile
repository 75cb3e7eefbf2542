# The two commands a newcomer needs: `make demo` and `make test` (each sets up first).
VENV ?= .venv
SHELL := /bin/bash
.SHELLFLAGS := -o pipefail -ec
PY := $(VENV)/bin/python
PIP := $(PY) -m pip -q --disable-pip-version-check

.PHONY: setup demo test test-fast lint docs docs-build bench gpu-data
setup: $(VENV)/.installed

# torch first, pinned to the CPU wheel on this machine's disk; `torch>=2.4` in pyproject
# then installs nothing more (a plain `torch` would pull a multi-GB CUDA build).
$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PIP) install torch==2.13.0 2>&1 | sed "/^WARNING: Location/d"
	$(PIP) install -e '.[dev]' 2>&1 | sed "/^WARNING: Location/d"
	$(PY) -c "import electra, torch, tokenizers, safetensors, transformers, sklearn, tensorboard, matplotlib, pyarrow, datasets, seqeval, mkdocs, mkdocstrings, material, xdist, hypothesis, pytest_randomly, mypy, mlflow, wandb, pytorch_optimizer, sentencepiece, s3fs, moto, ray, sentence_transformers, bm25s"
	touch $@

# ARGS: the demo's flags, e.g. make demo ARGS="--resume" or ARGS="--set train.threads=1"
demo: setup
	$(VENV)/bin/electra demo $(ARGS)

# A pytest-xdist worker per core, each test file on one worker; TEST_WORKERS=0: one process.
# The tests run in a new random order each time (pytest-randomly; the header says its seed):
# TEST_SEED=N repeats an order, TEST_SEED=off keeps the files' own. Times per CPU:
# docs/results/machines.md.
TEST_WORKERS ?= auto
ifeq ($(origin TEST_SEED), undefined)
TEST_SEED := $(shell python3 -c "import random; print(random.randrange(1 << 31))")
endif
ORDER = $(if $(filter off,$(TEST_SEED)),-p no:randomly,-p randomly --randomly-seed=$(TEST_SEED))
test: setup
	$(VENV)/bin/ruff check .
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict
	@echo "the tests' order: TEST_SEED=$(TEST_SEED) (make test TEST_SEED=$(TEST_SEED) repeats it)"
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile $(ORDER)

# Everything but the tests marked slow (a quick check while working; `make test` is the suite).
test-fast: setup
	$(VENV)/bin/ruff check .
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile $(ORDER) -m "not slow"

lint: setup
	$(VENV)/bin/ruff check .

# The documentation site (docs/, mkdocs.yml): built with --strict (a broken link, a missing page
# or an API symbol that does not resolve fails it), then served on http://127.0.0.1:8000.
docs: docs-build
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs serve

docs-build: setup
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

# The headline benchmark (bench/README.md lists the others): our ELECTRA-Small pretraining step
# against the transformers-based one, interleaved in one run, at batch 32 and 128.
bench: setup
	$(PY) bench/pretrain_step.py

# The GPU kit's data (bench/gpu_kit.py), inside the repo so it travels to a GPU machine that
# has no ../shared: the first 4,000 SST-2 training rows, its dev set, BERT's vocabulary, and
# the demo's corpus prepared with that vocabulary at 128 and 512 tokens (demo-128/, demo-512/),
# and packed (--pack: pack-128/, pack-512/).
SHARED ?= ../shared/data
gpu-data: setup
	mkdir -p bench/data/SST-2
	head -n 4001 $(SHARED)/glue/SST-2/train.tsv > bench/data/SST-2/train.tsv
	install -m 644 $(SHARED)/glue/SST-2/dev.tsv bench/data/SST-2/dev.tsv
	install -m 644 $(SHARED)/vocab/bert-base-uncased-vocab.txt bench/data/vocab.txt
	$(PY) bench/gpu_kit.py data bench/data
