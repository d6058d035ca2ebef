# Every target creates the virtualenv and installs what it needs itself.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test lint typecheck unit bench bench-stats bench-ingest servers clean study-coverage

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $@

servers:
	./scripts/ensure-servers

## The main job: a live demo (private redis-server and mosquitto, the daemon, events in, numbers out).
demo: $(STAMP) servers
	$(PY) -m reliabilityd demo

## Everything CI checks: lint, strict types, the whole test suite against real servers.
test: $(STAMP) servers lint typecheck unit

lint: $(STAMP)
	$(VENV)/bin/ruff check reliabilityd tests
	$(VENV)/bin/ruff format --check reliabilityd tests

typecheck: $(STAMP)
	$(VENV)/bin/mypy

unit: $(STAMP)
	$(VENV)/bin/pytest

bench: bench-stats bench-ingest

bench-stats: $(STAMP)
	$(PY) -m reliabilityd bench stats

## The README's Coverage table: 5,000 simulated suites per cell (24 min on a busy 2-core machine).
study-coverage: $(STAMP)
	$(PY) -m reliabilityd study coverage --out coverage.jsonl

bench-ingest: $(STAMP) servers
	$(PY) -m reliabilityd bench ingest

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis
