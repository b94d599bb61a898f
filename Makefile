# The front-door commands: `make demo`, `make test` and `make test-quick`.
# Every target installs into .venv first when needed (idempotent: a stamp file tracks pyproject.toml).

PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The Dagster instance is configured by ./dagster.yaml (its files go to .dagster_home/).
export DAGSTER_HOME ?= $(CURDIR)

# The suite runs on every core (pytest-xdist): each worker has its own Spark session and
# PostgreSQL server; the cluster and Connect tests share one worker (`--dist loadgroup`).
TEST_WORKERS ?= 2
XDIST := -n $(TEST_WORKERS) --dist loadgroup
# The quick tier (docs/testing.md): every test that needs no Spark, the Spark tests marked
# `quick` (one per guarantee) and the property test on a few histories; no PostgreSQL
# server, no cluster, no Connect server, no SIGKILLed child.
QUICK := (quick or not spark) and not (postgres or cluster or connect or sigkill)

.PHONY: install class-archive demo test test-quick exactness wheel-check dev bench bench-large bench-cluster lint check-java clean

$(STAMP): pyproject.toml
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "error: $(PYTHON) not found; offset-assets needs Python 3.11 (set PYTHON=...)" >&2; exit 1; }
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[test,bench,connect]"
	@touch $(STAMP)

install: $(STAMP)

check-java:
	@sh scripts/check_java.sh

# The archive of Spark's classes that every Spark JVM of this installation starts with
# (offset_assets/class_archive.py: a driver's start and first queries take half the time).
# Built once after each install (about 40 s) by `make dev` and the benchmarks, whose runs
# start fresh JVMs. The demo and the tests use an archive that is there and do not wait
# for one: the demo starts one JVM, and the suite's JVMs are mostly its two long-lived
# sessions (its tests took 690-732 s with every JVM mapping one, 704-753 s without).
# Where it cannot be built, Spark starts without it (slower, nothing else changes) and
# the stamp keeps make from retrying.
ARCHIVE_STAMP := $(VENV)/.class-archive

$(ARCHIVE_STAMP): $(STAMP)
	@sh scripts/check_java.sh
	@$(BIN)/offset-assets class-archive || echo "warning: no class archive was built; Spark starts without it" >&2
	@touch $(ARCHIVE_STAMP)

class-archive: $(ARCHIVE_STAMP)

demo: install check-java
	$(BIN)/python -m assets_defs.demo

test: install check-java
	$(BIN)/python -m pytest $(XDIST) -m "not extended" --durations=25

test-quick: install check-java
	EXACTNESS_HISTORIES=3 $(BIN)/python -m pytest $(XDIST) -m "$(QUICK)" --durations=10

# The engine's property test on 1000 histories and ingestion's two on 200 (a fifth: each of
# their steps is a range), then the `extended` variants of stories `make test` runs
# in one form (the NULL-key story on every engine path, a SQL range's writer killed
# inside the range's commit).
exactness: install check-java
	EXACTNESS_HISTORIES=1000 $(BIN)/python -m pytest $(XDIST) -s \
		tests/test_engine_exactness.py::test_incremental_runs_equal_a_full_recompute_on_every_path \
		tests/test_ingestion_exactness.py tests/test_ingestion_sql_exactness.py
	$(BIN)/python -m pytest $(XDIST) -m extended

# The package as users install it: the built wheel in a new virtualenv outside the
# repository (no editable install, no test extra), running the guide's story and, with
# the [kafka] extra, its Kafka example (scripts/wheel_story.py; a few minutes, most of
# it pip). Only the Kafka broker runs from .venv.
wheel-check: install check-java
	$(BIN)/python -m scripts.wheel_story

# The UI with one long-lived local Spark Connect server that every run attaches to
# (assets_defs/dev.py); `make dev DEV_SPARK=local` starts Spark in each run's process.
dev: install check-java class-archive
	$(BIN)/python -m assets_defs.dev

bench: install check-java class-archive
	$(BIN)/python -m bench.run

# The copy workload at 10M and 100M rows in local[2] with a 4g driver, in one run (the
# incremental run at 100M against 10M): 6,050 s on two cores, never in `make test`.
bench-large: install check-java class-archive
	BENCH_NS=10000000,100000000 BENCH_PARTS=by_n BENCH_DRIVER_MEMORY=4g BENCH_OUT=docs/bench/large $(BIN)/python -m bench.copy_workload

# The copy workload's sizes on a throwaway standalone cluster (a master and one worker
# started from the pyspark wheel): the driver and the executor are separate JVMs.
bench-cluster: install check-java class-archive
	BENCH_MASTER=standalone BENCH_PARTS=by_n BENCH_OUT=docs/bench/cluster $(BIN)/python -m bench.copy_workload

lint: install
	$(BIN)/ruff check offset_assets assets_defs tests bench examples scripts

clean:
	rm -rf $(VENV) state .dagster_home .logs_queue .nux .telemetry
