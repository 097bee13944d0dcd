# Set-up is part of every target: `make run` and `make test` work on a fresh machine with Python 3.11.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
# `make run PORT=8080 HOST=0.0.0.0` (a non-loopback host needs API keys, or the server refuses)
PORT ?= 8000
HOST ?= 127.0.0.1
VENV := .venv
PY := $(VENV)/bin/python
SOURCES := pyproject.toml clients/pyproject.toml setup.py service/_features.c service/_decisions.c
# What `make run` needs (the server and the SDK), and what the tests and benchmarks add.
STAMP := $(VENV)/.installed-stamp
DEV_STAMP := $(VENV)/.installed-dev-stamp

.PHONY: install install-dev run test lint format clean

install: $(STAMP)

install-dev: $(DEV_STAMP)

# uv (PyPI's `uv`, a binary wheel) installs the same packages as pip about ten times faster
# (5 s instead of 50 s for the server here): most of a first `make run` was pip.
UV := $(VENV)/bin/uv pip install --quiet --python $(PY)

$(STAMP): $(SOURCES)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check uv
	$(UV) -e ./clients -e .
	touch $(STAMP)

$(DEV_STAMP): $(STAMP)
	$(UV) -e ./clients -e '.[dev,lab,bench]'
	touch $(DEV_STAMP)

# The first start compiles the default learner's kernels (about 20 s, cached afterwards); the
# server answers /healthz at once and /readyz once ready.
run: install
	$(PY) -m service serve --host $(HOST) --port $(PORT) --demo

# Two pytest-xdist workers: most tests wait on servers, subprocesses or the network, and the
# machines are 2 cores. Whole files to a worker (--dist loadfile): a module's fixtures (servers,
# replicas, venvs) are built once. The tests marked `serial` (wall-clock bounds) run afterwards in
# one process. `$(PY) -m pytest` alone runs the whole suite in one process.
test: install-dev
	$(PY) -m ruff check .
	$(PY) -m pytest -n 2 --dist loadfile -m "not serial"
	$(PY) -m pytest -m serial

lint: install-dev
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

format: install-dev
	$(PY) -m ruff check --fix .
	$(PY) -m ruff format .

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache build *.egg-info
