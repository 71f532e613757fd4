# tidemark: `make run` and `make test` set up what they need first (a second run skips it).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
INSTALLED := $(VENV)/.installed
JARS_CACHE ?= $(CURDIR)/.tidemark/ivy
# Written when `tidemark setup` has finished: a setup killed half-way (before the class archive,
# say) leaves it missing, so the next `make` runs setup again (each step skips what is there).
SETUP_DONE := $(JARS_CACHE)/setup-done
PORT ?= 3000

.PHONY: setup run test lint test-long test-unit dev live summary recon dbt dbt-models bench bench-velocity-profile bench-ingestion-profile bench-compare bench-batch-cost bench-latency bench-store bench-checkpoint bench-recon bench-recon-incremental bench-recon-history bench-user-recon bench-kafka bench-live kafka-start kafka-stop s3-setup s3-start s3-stop cluster-start cluster-stop chaos soak clean

setup: $(SETUP_DONE)

# The virtual environment, with every pin from pyproject.toml, its bytecode compiled once here:
# on both cores (compileall -j 0, about 10 s) rather than by pip, one file at a time (52 s).
# Python would otherwise compile each module at its import, and keep the bytecode only where
# PYTHONDONTWRITEBYTECODE is unset: with it set, every process (a command, dbt, a Dagster run,
# a Spark Python worker) compiled everything it imported, each time (docs/testing.md). A module
# that does not compile is left to Python's import, which then says why.
$(INSTALLED): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip==25.3
	$(BIN)/pip install --quiet --no-compile -e '.[test]'
	$(BIN)/python -m compileall -q -j 0 $(VENV)/lib orchestration streaming_jobs \
		|| echo "some modules were not compiled ahead; Python compiles them as it imports them"
	touch $@

# The Delta jars, resolved once from Maven Central into the cache, the driver's class archive,
# the ops tables, the Dagster home and a parsed dbt project.
$(SETUP_DONE): $(INSTALLED) streaming_jobs/storage/spark.py
	TIDEMARK_JARS_CACHE=$(JARS_CACHE) $(BIN)/tidemark setup
	touch $@

# SOURCE=kafka: the same run through the project's Kafka broker (started and stopped by the run)
SOURCE ?= landing
run: setup
	TIDEMARK_SOURCE=$(SOURCE) $(BIN)/tidemark run --fresh

# Two worker processes (the machine's two cores), a test file each at a time: each worker has
# its own SparkSession; the servers are one for both (docs/testing.md). Each test's
# time goes to .tidemark/test-report.xml (JUnit): tools/test_times.py sums it per file.
# What it needs first runs side by side (the lint beside setup's JVMs: seconds off CI).
test: $(INSTALLED)
	$(MAKE) --no-print-directory -j2 setup s3-setup lint
	$(BIN)/pytest -n 2 --dist loadfile --no-loadscope-reorder --junitxml=.tidemark/test-report.xml

# ruff (pyproject.toml's [tool.ruff]) over every Python file of the project: its lint rules and
# its formatter (`ruff format .` formats the tree)
lint: $(INSTALLED)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	cd dbt_project && ../$(BIN)/sqlfluff lint --processes 2 .

# The long proofs CI leaves out for time (marker `long`): incremental and composed reconciliation
# against a backfill, jobs on the project's Spark cluster, the maintenance and full-disk trials,
# a lost report across a fold.
test-long: setup
	$(BIN)/pytest -m long

# The pure tests only (no Spark, no dbt): seconds.
test-unit: $(INSTALLED)
	$(BIN)/pytest tests/unit

dev: setup
	$(BIN)/tidemark dev --port $(PORT)

# The project's own Kafka broker (KRaft, 127.0.0.1:$$TIDEMARK_KAFKA_PORT, default 9092).
# The project's S3-compatible store (SeaweedFS), built once per machine (about 11 CPU-minutes;
# Go is needed) into ~/.cache/tidemark; the tests start it on a free port.
s3-setup: $(INSTALLED)
	$(BIN)/tidemark s3 install

s3-start: s3-setup
	$(BIN)/tidemark s3 start

s3-stop: $(INSTALLED)
	$(BIN)/tidemark s3 stop

kafka-start: setup
	$(BIN)/tidemark kafka start

kafka-stop: setup
	$(BIN)/tidemark kafka stop

# The project's own Spark standalone cluster (docs/running-at-scale.md); use it with
# TIDEMARK_SPARK_MASTER=spark://127.0.0.1:7077
cluster-start: setup
	$(BIN)/tidemark cluster start

cluster-stop: setup
	$(BIN)/tidemark cluster stop

# The always-on setup for MINUTES (default 5): landing, the continuous run, reconciliation every
# 2 minutes, savepoints, sensors and the UI on 127.0.0.1:$(PORT); then a clean stop and the summary.
MINUTES ?= 5
live: setup
	$(BIN)/tidemark live --fresh --minutes $(MINUTES) --port $(PORT)

summary: setup
	$(BIN)/tidemark summary

recon: setup
	$(BIN)/tidemark recon

# The built-in streams' dbt sources and staging models, written again from streaming_jobs/schemas.py
dbt-models: $(INSTALLED)
	$(BIN)/python -m orchestration.recon.dbt_models

# Any dbt command with tidemark's Spark session and job vars, e.g. make dbt ARGS="build -s recon"
dbt: setup
	$(BIN)/tidemark-dbt $(ARGS)

# Fault injection (docs/reliability.md): TRIALS kill -9 trials per fault point, results under
# the data root (results/chaos.json holds the committed evidence: pass --results to add to it). CI runs four trials (tests/streaming/test_chaos.py).
TRIALS ?= 20
SEED ?= 7
chaos: setup
	$(BIN)/python tools/chaos.py --trials $(TRIALS) --seed $(SEED)

# The soak (docs/reliability.md): `tidemark live` for SOAK_MINUTES with retention on, sampled each minute.
SOAK_MINUTES ?= 20
soak: setup
	$(BIN)/python tools/soak.py --minutes $(SOAK_MINUTES)

# The sliding-window benchmark (docs/benchmarks.md): EVENTS=200000 for a quick run.
EVENTS ?= 2000000
bench: setup
	$(BIN)/python tools/benchmarks/sliding_window.py --events $(EVENTS)

# Where failed_txn_velocity's time goes, one step of the query at a time (docs/benchmarks.md).
PROFILE_EVENTS ?= 2000000
bench-velocity-profile: setup
	$(BIN)/python tools/benchmarks/velocity_profile.py --events $(PROFILE_EVENTS)

# Where bronze ingestion's time goes, one part of the parse at a time, then run_bronze whole.
INGEST_EVENTS ?= 1000000
bench-ingestion-profile: setup
	$(BIN)/python tools/benchmarks/ingestion_profile.py --events $(INGEST_EVENTS) $(if $(RESULTS),--results $(RESULTS))

# Side by side (docs/benchmarks.md): tidemark, a bare PySpark job, PyFlink and DuckDB on the same data.
# Flink and DuckDB live in an environment of their own, apart from tidemark's pins.
BENCH_VENV := $(CURDIR)/.tidemark/bench-venv
COMPARE_EVENTS ?= 1000000
$(BENCH_VENV)/.installed: tools/benchmarks/compare-requirements.txt
	$(PYTHON) -m venv $(BENCH_VENV)
	$(BENCH_VENV)/bin/pip install --quiet --upgrade pip==25.3
	$(BENCH_VENV)/bin/pip install --quiet -r tools/benchmarks/compare-requirements.txt
	touch $@

bench-compare: setup $(BENCH_VENV)/.installed
	$(BIN)/python tools/benchmarks/compare.py --events $(COMPARE_EVENTS)

# The fixed cost of a micro-batch carrying a handful of events, per job and for ingestion.
bench-batch-cost: setup
	$(BIN)/python tools/benchmarks/batch_cost.py

# Event-to-gold latency in a continuous run hosting every job (1,000 events/s per stream for
# 5 minutes, live's trigger), then SIGKILL and the restart's first commit per query.
bench-latency: setup
	$(BIN)/python tools/benchmarks/latency.py $(if $(RESULTS),--results $(RESULTS))

# On local disk and on the project's S3 server (docs/benchmarks.md): tidemark and bare Spark
# side by side in one run (tumbling, sliding_60s), then the batch cost on each.
bench-store: setup s3-setup $(BENCH_VENV)/.installed
	$(BIN)/python tools/benchmarks/compare.py --events $(COMPARE_EVENTS) --queries tumbling sliding_60s \
		--engines duckdb tidemark tidemark@s3 spark spark@s3 --results results/compare-store.json
	$(BIN)/python tools/benchmarks/batch_cost.py --waves 6 --results results/batch_cost-disk.json
	$(BIN)/python tools/benchmarks/batch_cost.py --waves 6 --store --results results/batch_cost-store.json

# Checkpoint figures at 1,000,000 state rows: commit p50/p99, bytes per batch, SIGKILL to the
# first commit after a restart (docs/benchmarks.md)
bench-checkpoint: setup
	$(BIN)/python tools/benchmarks/checkpoint_cost.py

# The reconciliation benchmark (docs/benchmarks.md): dbt build against the same SQL run plainly.
RECON_EVENTS ?= 10000000
bench-recon: setup
	$(BIN)/python tools/benchmarks/reconciliation.py --events $(RECON_EVENTS)

# Incremental reconciliation after one more hour against the full one (docs/benchmarks.md): builds
# a lake of RECON_EVENTS over RECON_DAYS days of event time, then times both on it.
RECON_DAYS ?= 10
bench-recon-incremental: setup
	@mkdir -p .tidemark
	$(BIN)/python tools/benchmarks/reconciliation.py --events $(RECON_EVENTS) --days $(RECON_DAYS) --setup-only | tee .tidemark/bench-recon-setup.log
	$(BIN)/python tools/benchmarks/incremental_recon.py --data-root "$$(sed -n 's/.*data root kept: //p' .tidemark/bench-recon-setup.log)"

# Full against incremental reconciliation as history grows, at one rate (docs/benchmarks.md):
# RECON_EVENTS over RECON_DAYS days, in 4 steps, each timed in full and after one more hour.
bench-recon-history: setup
	$(BIN)/python tools/benchmarks/recon_history.py --events $(RECON_EVENTS) --days $(RECON_DAYS) --steps 4

# Your own jobs reconciled (docs/benchmarks.md): USER_EVENTS readings of a stream of your own over 3
# days, three jobs, in full, after one more hour, and with nothing new; each dbt run in a Spark of
# its own (TARGET=session) or on the SQL endpoint (TARGET=endpoint, as make dev's schedules run).
# RESULTS=path to keep it.
USER_EVENTS ?= 200000
TARGET ?= session
bench-user-recon: setup
	$(BIN)/python tools/benchmarks/user_recon.py --events $(USER_EVENTS) --target $(TARGET) $(if $(RESULTS),--results $(RESULTS))

# Sensor ticks and a scheduled reconciliation's wall time, session against SQL endpoint.
LIVE_EVENTS ?= 2000000
# Kafka -> bronze -> a stateful job next to the landing path (docs/benchmarks.md).
KAFKA_EVENTS ?= 200000
bench-kafka: setup
	$(BIN)/python tools/benchmarks/kafka_source.py --events $(KAFKA_EVENTS)

bench-live: setup
	$(BIN)/python tools/benchmarks/always_on.py --events $(LIVE_EVENTS)

clean:
	rm -rf .tidemark/data
