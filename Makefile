# The two commands of the quick start are `make run` and `make test`; every target installs what it
# needs into .venv first, and does nothing more when nothing changed.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
export PATH := $(CURDIR)/$(BIN):$(PATH)

#: the pinned, hash-checked dependency sets (`make lock` regenerates them from pyproject.toml)
LOCK := requirements/runtime.txt
DEV_LOCK := requirements/dev.txt
LOCK_FLAGS := --quiet --generate-hashes --strip-extras --allow-unsafe --no-emit-index-url --no-emit-find-links

.PHONY: install install-dev console-assets browser promtool run test lint fmt bench mutation soak flower clean services lock conformance

# quickjs-ng replaced the unmaintained quickjs package; both install the module `quickjs`, so a
# venv that still has the old one gets both removed and quickjs-ng installed afresh.
DROP_OLD_QUICKJS = @if $(BIN)/python -m pip show --quiet quickjs >/dev/null 2>&1; then \
	$(BIN)/python -m pip uninstall --quiet --yes quickjs quickjs-ng; fi

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# The dependencies exactly as locked (every file hash-checked), then the project itself without
# resolving anything more. The dev set holds the runtime set (same pins), so installing it over a
# runtime install only adds.
$(VENV)/.installed: $(BIN)/python $(LOCK) pyproject.toml
	$(DROP_OLD_QUICKJS)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --require-hashes -r $(LOCK)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps -e .
	@touch $@

#: the example team package of Python activities (docs/activities.md); its tests run in `make test`
EXAMPLE_ACTIVITIES := examples/order-activities

$(VENV)/.installed-dev: $(BIN)/python $(DEV_LOCK) pyproject.toml $(EXAMPLE_ACTIVITIES)/pyproject.toml
	$(DROP_OLD_QUICKJS)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --require-hashes -r $(DEV_LOCK)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps -e .
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps -e $(EXAMPLE_ACTIVITIES)
	@touch $@ $(VENV)/.installed

# Regenerate the locks after a change of dependencies in pyproject.toml: existing pins are kept
# where they still fit (add `--upgrade` to LOCK_FLAGS to move everything to the newest).
lock: $(BIN)/python
	$(BIN)/python -m pip install --quiet --disable-pip-version-check 'pip-tools>=7.4'
	$(BIN)/pip-compile $(LOCK_FLAGS) --extra postgres --extra flower --extra otel -o $(LOCK) pyproject.toml
	$(BIN)/pip-compile $(LOCK_FLAGS) --all-extras -c $(LOCK) -o $(DEV_LOCK) pyproject.toml

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

# The alert rules (deploy/alerts/) are checked with promtool, from Debian's prometheus package.
promtool:
	@command -v promtool >/dev/null 2>&1 || (apt-get update -qq && apt-get install -y -qq --no-install-recommends prometheus) \
		|| echo "promtool is missing and could not be installed: the alert-rule tests will skip (and fail under CI=true)"

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

# The suite runs on TEST_WORKERS processes (pytest-xdist), each test file on one of them, so that a
# file's module fixtures (a live stack, a browser) start once; TEST_WORKERS=0 runs it in this one.
# Then the chaos tests, alone and one at a time: they kill, pause and restart processes and time
# their recovery, which other tests' load would only blur. (Exit status 5: none was selected.)
TEST_WORKERS ?= 2
test: install-dev services browser promtool lint conformance
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile -m "not chaos" --ignore=tests/conformance $(PYTEST_ARGS)
	$(BIN)/python -m pytest -m chaos $(PYTEST_ARGS) || test $$? -eq 5

# Elsa conformance (docs/conformance.md): the public corpus and the ported elsa-core cases, run
# in-process; it ends with the summary `elsa_cases=...` and `activities elsa=...` lines.
conformance: install-dev
	$(BIN)/python -m tests.conformance.summary $(CONFORMANCE_ARGS)

bench: install-dev services
	$(BIN)/python -m tests.perf.bench $(BENCH_ARGS)

# Mutation testing of the core (docs/mutation.md); not part of `make test`.
mutation: install-dev services
	$(BIN)/python -m tests.mutation.run $(MUTATION_ARGS)

# The soak (docs/soak.md): the production roles on private PostgreSQL and Redis under a steady
# mixed load and scheduled faults for SOAK_MINUTES (default 30) at SOAK_RATE requests a second
# (default 2); writes var/soak/soak.json and soak.png. Not part of `make test`.
SOAK_MINUTES ?= 30
SOAK_RATE ?= 2
soak: install-dev
	SOAK_MINUTES=$(SOAK_MINUTES) SOAK_RATE=$(SOAK_RATE) $(BIN)/python -m tests.soak

flower: install
	$(BIN)/broker flower $(FLOWER_ARGS)

clean:
	rm -rf var .mypy_cache .ruff_cache mutants mutants-run.log
