# Every target creates the virtualenv and installs what it needs itself.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# The demo needs only the package and its `embedded` extra, not the test tools.
DEMO_STAMP := $(VENV)/.demo-installed

.PHONY: demo test check fuzz lint typecheck unit integration bench bench-stats bench-ci bench-ingest bench-import bench-http bench-history bench-memory bench-reads \
	study-pages study-oracle study-forecast study-coverage study-compare study-looks study-canary soak servers clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $@

$(DEMO_STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[embedded]'
	touch $@

servers:
	./scripts/ensure-servers

## The main job: a live demo on embedded servers (the system's redis-server and mosquitto,
## else the ones in the wheels of the `embedded` extra): no root, no apt-get.
## DEMO_ARGS passes options, e.g. DEMO_ARGS="--duration 30 --no-live".
demo: $(DEMO_STAMP)
	$(PY) -m reliabilityd demo $(DEMO_ARGS)

## Everything CI checks: lint, strict types, the whole test suite against real servers:
## the unit and integration tiers as make check runs them, then the statistical checks
## that take seconds each (exact coverage, brute-force resamplers) and the fault and
## end-to-end tiers on two workers (each of their tests starts servers of its own).
test: $(STAMP) servers lint typecheck
	$(VENV)/bin/pytest -n 4 tests/unit tests/integration
	$(VENV)/bin/pytest -n 2 tests/statistics tests/faults tests/e2e

lint: $(STAMP)
	$(VENV)/bin/ruff check reliabilityd tests benchmarks studies
	$(VENV)/bin/ruff format --check reliabilityd tests benchmarks studies

typecheck: $(STAMP)
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports --no-cache

## The pure tier alone (no servers), on both cores.
unit: $(STAMP)
	$(VENV)/bin/pytest -q -n 2 tests/unit

integration: $(STAMP) servers
	$(VENV)/bin/pytest -q -n 4 tests/integration

## The developer's loop: lint, types, layers, and the unit and integration tiers. Four workers
## on two cores: most integration tests wait on a timer or a server, not on the CPU.
check: $(STAMP) servers lint typecheck
	$(VENV)/bin/pytest -q -n 4 tests/unit tests/integration

## Exploration, not a gate: every Hypothesis test and every test drawing from `rng`, with
## random seeds and RELIABILITYD_FUZZ_EXAMPLES examples per property, round after round
## until FUZZ_SECONDS have passed (a round under way is finished). A failure prints the
## seed or the `@reproduce_failure` blob that replays it.
FUZZ_SECONDS ?= 600
fuzz: $(STAMP) servers
	@end=$$(( $$(date +%s) + $(FUZZ_SECONDS) )); round=0; \
	while [ "$$(date +%s)" -lt "$$end" ]; do \
		round=$$((round + 1)); echo "fuzz round $$round"; \
		RELIABILITYD_FUZZ=1 $(VENV)/bin/pytest -q -n 2 -m 'hypothesis or seeded' \
			tests/unit tests/statistics tests/integration || exit 1; \
	done; echo "fuzz: $$round rounds, no failure"

bench: bench-stats bench-ci bench-ingest bench-import bench-http bench-history bench-memory bench-reads

bench-stats: $(STAMP)
	$(PY) -m benchmarks.bench_stats

## The README's Coverage table: 5,000 simulated suites per cell (24 min on a busy 2-core machine).
study-coverage: $(STAMP)
	$(PY) -m studies.coverage --out coverage.jsonl

## The tick's CPU by phase; 5,000 changed series recomputed by one daemon and by two replicas,
## beside the math alone; a running daemon's freshness with its ingest at 1,000 and 5,000
## changed series, one process and two replicas; /metrics with 10,000 suites (about 5 min).
## BENCH_CI_ARGS passes options, e.g. BENCH_CI_ARGS="--parts phases,fresh --fresh 5000".
bench-ci: $(STAMP) servers
	$(PY) -m benchmarks.bench_ci $(BENCH_CI_ARGS)

## The snapshot write with its history point, beside the same write without it.
bench-history: $(STAMP) servers
	$(PY) -m benchmarks.bench_history

## Redis bytes per suite of 50 tasks x 6 trials (the scale probe's shape) by kind of key,
## beside the previous history layout's figure; the per-series budget (docs/operating.md).
bench-memory: $(STAMP) servers
	$(PY) -m benchmarks.bench_memory

## The index's pages, /metrics and status from the summary rows at 1,000 and 10,000 suites,
## beside the per-suite read path in the same run, with the load average.
bench-reads: $(STAMP) servers
	$(PY) -m benchmarks.bench_reads

bench-ingest: $(STAMP) servers
	$(PY) -m benchmarks.bench_ingest

bench-import: $(STAMP) servers
	$(PY) -m benchmarks.bench_import

## False pages per day and detection delay of the alert rules at the daemon's cadence, then
## every trigger beside the oracle, the fastest detector at the same false-alarm rate
## (docs/studies.md).
study-pages: $(STAMP)
	$(PY) -m studies.pages
	$(PY) -m studies.oracle

## The oracle table alone (docs/studies.md#the-oracle); about an hour on a shared 2-core machine.
study-oracle: $(STAMP)
	$(PY) -m studies.oracle

## The forecast's error table alone (docs/studies.md#the-forecast), also the end of
## study-pages; about 5 minutes on a shared 2-core machine.
study-forecast: $(STAMP)
	$(PY) -m studies.pages --forecast

## The compare study: coverage of the paired difference interval and false "worse" verdicts
## (docs/statistics.md); about 8 minutes on a shared 2-core machine.
study-compare: $(STAMP)
	$(PY) -m studies.compare --out compare.jsonl

## The canary: each paired interval's power beside the fixed-time optimum, and false pages
## of identical agents judged every 5 s for four simulated weeks (docs/studies.md#the-canary);
## about 3 minutes on a shared 2-core machine.
study-canary: $(STAMP)
	$(PY) -m studies.canary --reps 2000 --days 28

## A gate re-run as trials arrive: false passes with and without --looks (docs/statistics.md).
study-looks: $(STAMP)
	$(PY) -m studies.looks

bench-http: $(STAMP) servers
	$(PY) -m benchmarks.bench_http

## Not in CI: SOAK_SECONDS (default two hours) of MQTT, HTTP and OTLP load on a daemon with
## SIGHUP reloads, Redis kill -9s and broker restarts; exit 1 on a trial lost or counted
## twice, or on memory growth past its limits once warm (docs/operating.md#soak).
SOAK_SECONDS ?= 7200
soak: $(STAMP) servers
	$(PY) -m benchmarks.soak --seconds $(SOAK_SECONDS) $(SOAK_ARGS)

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis
