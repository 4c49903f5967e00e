# Memory Catalog: `make help` lists the targets.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
BIN    := $(VENV)/bin
PYTEST_ARGS ?=

.DEFAULT_GOAL := help

# `make run` serves on HOST:PORT (make run PORT=8081, or HOST=0.0.0.0 for other machines too)
HOST ?= 127.0.0.1
PORT ?= 8080

# pip and setuptools are talkative: their output goes to .venv/install.log, shown whole if an install
# fails (and its ERROR lines if one reports a conflict)
define pip_install
	@echo "installing $(1) into $(VENV): a few minutes the first time (pip's output: $(VENV)/install.log)"
	@$(BIN)/pip install $(2) > $(VENV)/install.log 2>&1 || { cat $(VENV)/install.log; exit 1; }
	@grep -A3 '^ERROR' $(VENV)/install.log || true
endef

# Every install is held to constraints.txt: the versions of every package that `make test` last
# passed on, so that a clean checkout installs what was tested (a release made since cannot change
# it), and `make test` after `make run` moves no package (google-adk, in the dev extra, caps
# opentelemetry below the newest at times). `make lock` makes the file again from the newest
# releases that pyproject.toml admits.
PINS := -c constraints.txt

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip > $(VENV)/install.log 2>&1 || { cat $(VENV)/install.log; exit 1; }

$(VENV)/.installed-run: pyproject.toml constraints.txt | $(BIN)/python
	$(call pip_install,the server,-e . $(PINS))
	touch $@

$(VENV)/.installed-docs: pyproject.toml constraints.txt | $(BIN)/python
	$(call pip_install,the server and MkDocs,-e '.[docs]' $(PINS))
	touch $@ $(VENV)/.installed-run

$(VENV)/.installed-dev: pyproject.toml constraints.txt | $(BIN)/python
	$(call pip_install,the server with the dev extras,-e '.[dev]' $(PINS))
	touch $@ $(VENV)/.installed-run $(VENV)/.installed-docs

# the peer that bench/peer.py compares with: benchmarks only, not needed by the tests
$(VENV)/.installed-bench: $(VENV)/.installed-dev
	$(BIN)/pip install --quiet -e '.[dev,bench]' $(PINS)
	touch $@

# the optional third side of bench/peer.py: memnos in a virtualenv of its own (bench/memnos_peer.py)
MEMNOS_VENV := .venv-memnos
$(MEMNOS_VENV)/.installed:
	$(PYTHON) -m venv $(MEMNOS_VENV)
	$(MEMNOS_VENV)/bin/pip install --quiet memnos==0.1.45
	touch $@

.PHONY: help install dev run test test-fast bench bench-recall bench-peers soak lint fmt typecheck docs docs-serve lock clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

install: $(VENV)/.installed-run ## create .venv and install the server

dev: $(VENV)/.installed-dev ## create .venv and install with the dev extras

run: $(VENV)/.installed-run ## serve http://127.0.0.1:8080 on an embedded PostgreSQL in ./.data (PORT=, HOST= to change)
	@echo "In another terminal, in this directory, for the catalog command, the Python client and curl:"
	@echo "  export CATALOG_URL=http://$(HOST):$(PORT) CATALOG_TOKEN=\$$($(BIN)/catalog token --sub admin)"
	$(BIN)/catalog serve --host $(HOST) --port $(PORT)

test: $(VENV)/.installed-dev ## ruff, mypy and the import layers, then the whole test suite against a real PostgreSQL with pgvector
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy catalog
	$(BIN)/lint-imports --no-cache
	$(BIN)/pytest --durations=10 $(PYTEST_ARGS)

test-fast: $(VENV)/.installed-dev ## ruff and the tests without the process-level modules (the `slow` marker): a few minutes
	$(BIN)/ruff check .
	$(BIN)/pytest -m "not slow" $(PYTEST_ARGS)

BENCHES := authz locomo beam keyword_statistics peer search request_floor round_trips client_overhead calls write_rate model_int8 audit audit_chain embedder_memory conversations sessions responses erasure history cluster

# inside `make bench` the soak runs 30 s after a 10 s warm-up (a smoke check); `make soak` runs it in full
SOAK_SHORT := --duration 30 --warmup 10

bench: $(VENV)/.installed-bench ## type-check bench/, then run the benchmarks and print their tables (a few minutes)
	$(BIN)/mypy bench
	@set -e; for b in $(BENCHES); do echo "== bench/$$b.py"; $(BIN)/python bench/$$b.py; echo; done
	@echo "== bench/soak.py $(SOAK_SHORT)"; $(BIN)/python bench/soak.py $(SOAK_SHORT)

bench-recall: $(VENV)/.installed-bench ## retrieval on both development corpora (LoCoMo, BEAM), LangGraph's store beside
	$(BIN)/python bench/recall.py --langgraph

bench-peers: $(VENV)/.installed-bench $(MEMNOS_VENV)/.installed ## bench/peer.py with both peers: LangGraph's store and memnos (its own virtualenv)
	$(BIN)/python bench/peer.py

soak: $(VENV)/.installed-dev ## the soak benchmark in full: 32 clients, mixed load, 5 minutes (bench/soak.py)
	$(BIN)/python bench/soak.py

lint: $(VENV)/.installed-dev ## ruff check, and the one-way slice layers (import-linter)
	$(BIN)/ruff check .
	$(BIN)/lint-imports --no-cache

docs: $(VENV)/.installed-docs ## build the documentation site into site/ (MkDocs, strict)
	$(BIN)/mkdocs build --strict

docs-serve: $(VENV)/.installed-docs ## serve the documentation site on http://127.0.0.1:8000, rebuilt on each change
	$(BIN)/mkdocs serve

fmt: $(VENV)/.installed-dev ## ruff format
	$(BIN)/ruff format .

typecheck: $(VENV)/.installed-dev ## mypy
	$(BIN)/mypy catalog

# a scratch virtualenv with the newest releases pyproject.toml admits (no constraints), frozen
LOCK_VENV := .venv-lock
lock: ## pin constraints.txt again at the newest releases that pyproject.toml admits (then run make test)
	rm -rf $(LOCK_VENV)
	$(PYTHON) -m venv $(LOCK_VENV)
	$(LOCK_VENV)/bin/python -m pip install --quiet --upgrade pip
	@echo "installing the server with every extra into $(LOCK_VENV), unconstrained: a few minutes"
	$(LOCK_VENV)/bin/pip install --quiet -e '.[dev,bench]' > $(LOCK_VENV)/install.log 2>&1 || { cat $(LOCK_VENV)/install.log; exit 1; }
	@{ sed -n '/^#/p' constraints.txt; $(LOCK_VENV)/bin/pip freeze --all --exclude-editable; } > constraints.txt.new
	mv constraints.txt.new constraints.txt
	rm -rf $(LOCK_VENV)
	@git diff --stat -- constraints.txt 2>/dev/null || true

clean: ## remove the virtual environments (keeps ./.data)
	rm -rf $(VENV) $(MEMNOS_VENV) $(LOCK_VENV)
