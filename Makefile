# The two commands of the quick start are `make run` and `make test`; every target installs what it
# needs into .venv first, and does nothing more when nothing changed.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
export PATH := $(CURDIR)/$(BIN):$(PATH)

.PHONY: install install-dev run test lint fmt bench mutation flower clean services

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.installed: $(BIN)/python setup.cfg pyproject.toml
	@# quickjs-ng replaced the unmaintained quickjs package; both install the module `quickjs`,
	@# so a venv that still has the old one gets both removed and quickjs-ng installed afresh.
	@if $(BIN)/python -m pip show --quiet quickjs >/dev/null 2>&1; then \
		$(BIN)/python -m pip uninstall --quiet --yes quickjs quickjs-ng; fi
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e .
	@touch $@

$(VENV)/.installed-dev: $(VENV)/.installed
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	@touch $@

install: $(VENV)/.installed

install-dev: $(VENV)/.installed-dev

run: install
	$(BIN)/broker run

services:
	@bash .ci/services

lint: install-dev
	$(BIN)/ruff check --config config/ruff.toml broker tasks tests
	$(BIN)/ruff format --check --config config/ruff.toml broker tasks tests
	$(BIN)/mypy --config-file setup.cfg
	$(BIN)/lint-imports --config setup.cfg

fmt: install-dev
	$(BIN)/ruff format --config config/ruff.toml broker tasks tests
	$(BIN)/ruff check --fix --config config/ruff.toml broker tasks tests

test: install-dev services lint
	$(BIN)/python -m pytest $(PYTEST_ARGS)

bench: install-dev services
	$(BIN)/broker bench $(BENCH_ARGS)

# Mutation testing of the core (docs/mutation.md); not part of `make test`.
mutation: install-dev services
	$(BIN)/python -m tests.mutation.run $(MUTATION_ARGS)

flower: install
	$(BIN)/broker flower $(FLOWER_ARGS)

clean:
	rm -rf var .mypy_cache .ruff_cache mutants mutants-run.log
