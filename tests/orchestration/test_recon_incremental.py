"""Incremental reconciliation against a backfill, with real streams, Delta tables and dbt.

Three waves of the five demo streams span three days of event time, with late events and
duplicates. After each wave every job streams and a reconciliation runs, as on a schedule:
the first in full, the next ones only from the first day their new events can change (the
sessions and profiles composed from the rows their tables hold and the new clicks). After the
second wave a run is cut short before it records its positions, as a kill would. Then a
backfill (``tidemark-dbt --full build``) recomputes every day of every job: each batch and recon
table must hold exactly the rows the incremental runs left.
"""

from __future__ import annotations

import datetime as dt

import pytest

from helpers import dbt, scopes, table_rows, write_wave
from streaming_jobs.storage.generator import GeneratorConfig, generate
from streaming_jobs.storage.registry import registry
from streaming_jobs.runtime.runner import run_bronze, run_job

STREAMS = ("transactions", "rides", "orders", "payments", "clicks")
DAYS = 3
EVENTS = 3_000  # per stream
WAVES = 3
# What a scheduled reconciliation runs (dbt's unit tests run in test_recon and `make dbt`).
BUILD = ("build", "--exclude-resource-type", "unit_test")
# every job is incremental: by day, and user_activity_profile (keyed state without a day) by
# composing the profiles of the users with new clicks (as user_sessions composes its sessions)
INCREMENTAL = (
    "events_by_type",
    "failed_txn_velocity",
    "order_payment_match",
    "user_sessions",
    "zone_revenue_hourly",
    "user_activity_profile",
)


@pytest.mark.long
@pytest.mark.slow
def test_incremental_reconciliation_equals_a_backfill(spark, cfg):
    start = dt.datetime(2026, 3, 1, tzinfo=dt.timezone.utc)
    gens = {
        s: GeneratorConfig(
            stream=s,
            events=EVENTS,
            files=WAVES,
            seed=23,
            start=start,
            rate=EVENTS / (DAYS * 86_400),
        )
        for s in STREAMS
    }
    files = {s: generate(g) for s, g in gens.items()}
    reasons = []
    for wave in range(WAVES):
        for stream, gen in gens.items():
            write_wave(cfg, gen, files[stream], wave)
            run_bronze(spark, cfg, stream)
        for spec in registry().values():
            run_job(spark, cfg, spec)
        if wave == 1:
            # a run killed after it replaced the batch and recon tables, before recon_positions
            # recorded where it got to: the next run starts again from the last recorded
            # position, and the composed tables must not take the same events twice
            cut = dbt(*BUILD, "--exclude", "recon_positions")
            assert cut.returncode == 0, cut.stdout[-3000:] + cut.stderr[-3000:]
        built = dbt(*BUILD)
        assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
        reasons.append(scopes(built.stderr))

    # the first run is in full; the later ones start at a day after the first event's
    assert all(reasons[0][job] == "in full: first reconciliation" for job in INCREMENTAL), reasons[
        0
    ]
    for later in reasons[1:]:
        for job in INCREMENTAL:
            assert later[job].startswith(("from ", "nothing new")), (job, later)
    first_day = start.date().isoformat()
    skipped = [job for job in INCREMENTAL if reasons[-1][job] > f"from {first_day}"]
    assert skipped, f"the last run recomputed every day of every job: {reasons[-1]}"

    tables = [("batch", f"int_{job}__batch") for job in INCREMENTAL] + [
        ("recon", f"recon_{job}") for job in INCREMENTAL
    ]
    incremental = {t: table_rows(cfg, *t) for t in tables}

    backfill = dbt("--full", *BUILD)
    assert backfill.returncode == 0, backfill.stdout[-3000:] + backfill.stderr[-3000:]
    assert all(r.startswith("in full") for r in scopes(backfill.stderr).values())
    for table in tables:
        full = table_rows(cfg, *table)
        assert full, f"{table} is empty"
        assert incremental[table] == full, f"{table}: the incremental runs differ from a backfill"
    # the backfill's summary counts what the last incremental run's counted, job by job
    summary = summary_rows(cfg)
    runs = sorted({(r["reconciled_at"], r["invocation_id"]) for r in summary})
    assert len(runs) == WAVES + 2  # the waves' runs, the cut one and the backfill
    last_incremental, backfilled = (
        [r for r in summary if r["invocation_id"] == run[1]] for run in runs[-2:]
    )
    assert summary_counts(last_incremental) == summary_counts(backfilled)
    assert all(r["unexplained_rows"] == 0 for r in backfilled)


def summary_rows(cfg) -> list[dict]:
    from deltalake import DeltaTable

    path = cfg.paths.dbt_table("recon", "recon_summary")
    return DeltaTable(str(path)).to_pyarrow_table().to_pylist()


def summary_counts(rows: list[dict]) -> dict[str, tuple]:
    skip = ("invocation_id", "reconciled_at")
    return {r["job"]: tuple(v for k, v in sorted(r.items()) if k not in skip) for r in rows}
