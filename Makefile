# The two commands of the quick start are `make run` and `make test`; every target installs what it
# needs into .venv first, and does nothing more when nothing changed.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
export PATH := $(CURDIR)/$(BIN):$(PATH)

.PHONY: install install-dev console-assets browser run test lint fmt bench flower clean services

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.installed: $(BIN)/python setup.cfg pyproject.toml
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e .
	@touch $@

$(VENV)/.installed-dev: $(VENV)/.installed
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	@touch $@

install: $(VENV)/.installed console-assets

install-dev: $(VENV)/.installed-dev console-assets

# Elsa Studio and mermaid.js for the console, from npm at pinned versions and integrity, unpacked
# into the venv (never into the repository); nothing happens when they are there already.
console-assets: $(VENV)/.installed
	@$(BIN)/broker console assets

# The browser tests drive Debian's chromium (never a downloaded browser build).
browser:
	@command -v chromium >/dev/null 2>&1 || (apt-get update -qq && apt-get install -y -qq chromium) \
		|| echo "chromium is missing and could not be installed: the browser tests will skip"

run: install
	$(BIN)/broker run

services:
	@bash .ci/services

lint: install-dev
	$(BIN)/ruff check --config config/ruff.toml broker tasks tests
	$(BIN)/ruff format --check --config config/ruff.toml broker tasks tests
	$(BIN)/mypy --config-file setup.cfg

fmt: install-dev
	$(BIN)/ruff format --config config/ruff.toml broker tasks tests
	$(BIN)/ruff check --fix --config config/ruff.toml broker tasks tests

test: install-dev services browser lint
	$(BIN)/python -m pytest $(PYTEST_ARGS)

bench: install-dev services
	$(BIN)/broker bench $(BENCH_ARGS)

flower: install
	$(BIN)/broker flower $(FLOWER_ARGS)

clean:
	rm -rf var .mypy_cache .ruff_cache
