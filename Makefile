# The two commands a newcomer needs: `make demo` and `make test` (each sets up first).
VENV ?= .venv
SHELL := /bin/bash
.SHELLFLAGS := -o pipefail -ec
PY := $(VENV)/bin/python
PIP := $(PY) -m pip -q --disable-pip-version-check

.PHONY: setup demo test test-fast lint bench
setup: $(VENV)/.installed

# torch first, pinned to the CPU wheel on this machine's disk; `torch>=2.4` in pyproject
# then installs nothing more (a plain `torch` would pull a multi-GB CUDA build).
$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PIP) install torch==2.13.0 2>&1 | sed "/^WARNING: Location/d"
	$(PIP) install -e '.[dev]' 2>&1 | sed "/^WARNING: Location/d"
	$(PY) -c "import electra, torch, tokenizers, safetensors, transformers, sklearn, tensorboard, matplotlib, pyarrow, datasets, seqeval"
	touch $@

demo: setup
	$(VENV)/bin/electra demo

test: setup
	$(VENV)/bin/ruff check .
	$(PY) -m pytest -q

# Everything but the tests marked slow (a quick check while working; `make test` is the suite).
test-fast: setup
	$(VENV)/bin/ruff check .
	$(PY) -m pytest -q -m "not slow"

lint: setup
	$(VENV)/bin/ruff check .
