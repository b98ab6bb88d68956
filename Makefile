# Two commands do all the set-up on a fresh machine with only Python 3.11+:
#   make run   — create .venv, install, start the proxy on an embedded PostgreSQL
#   make test  — create .venv, install, run the whole suite
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test lint bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test,bench]'
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/cascade-proxy serve

test: $(STAMP)
	$(BIN)/ruff check proxy tests bench
	$(BIN)/lint-imports
	$(BIN)/mypy proxy
	$(BIN)/pytest

bench: $(STAMP)
	$(BIN)/python -m bench.run

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
