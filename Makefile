# Set-up is part of every target: `make run` and `make test` work on a fresh machine with Python 3.11.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
# `make run PORT=8080 HOST=0.0.0.0` (a non-loopback host needs API keys, or the server refuses)
PORT ?= 8000
HOST ?= 127.0.0.1
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp

.PHONY: install run test lint format clean

install: $(STAMP)

$(STAMP): pyproject.toml clients/pyproject.toml setup.py service/_features.c service/_decisions.c
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ./clients -e '.[dev,lab,bench]'
	touch $(STAMP)

run: install
	$(PY) -m service serve --host $(HOST) --port $(PORT) --demo

test: install
	$(PY) -m ruff check .
	$(PY) -m pytest

lint: install
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

format: install
	$(PY) -m ruff check --fix .
	$(PY) -m ruff format .

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache build *.egg-info
