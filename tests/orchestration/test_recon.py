"""Reconciliation on the hand-built case, with real dbt: each row in its expected class."""

from __future__ import annotations

import json

import pytest

import scenarios
from helpers import dbt, land, table_shape, txn
from streaming_jobs.runtime.runner import run_bronze
from orchestration.recon.dbt_models import reconciled_jobs
from orchestration.recon.recon_partitions import incremental_tags
from streaming_jobs.storage.lake import read_table


def built_messages(cfg) -> dict[str, str]:
    """What the last dbt invocation said of each node it ran (its run_results.json)."""
    return {
        r["unique_id"].split(".")[-1]: r["message"]
        for r in json.loads((cfg.paths.dbt / "target" / "run_results.json").read_text())["results"]
    }


@pytest.mark.slow
@pytest.mark.long  # three builds: make test-long (CI keeps the injected faults and the whole graph's classes)
@pytest.mark.own_sql
def test_recon_classifies_late_and_open_windows(spark, endpoint_cfg):
    cfg = endpoint_cfg  # three builds: one warm JVM for them (conftest)
    reported_late, _ = scenarios.run_waves(spark, cfg)
    # Bronze moves on before the job runs again (as on a schedule): reconciliation is as of the
    # stream's position, so these rows change nothing and are counted as not yet read.
    land(cfg, "wave-3.jsonl", [txn("n1", "u1", 40), txn("n2", "u4", 1700), txn("n3", "u2", 126)])
    run_bronze(spark, cfg, "transactions")

    result = dbt("build")
    assert result.returncode == 0, result.stdout[-3000:]
    assert not built_messages(cfg)["stg_transactions"].startswith("unchanged")  # a new view

    recon = read_table(spark, cfg.paths.dbt_table("recon", "recon_failed_txn_velocity"))
    got = {(r.user_id, r.window_start, r.window_end): r.recon_class for r in recon.collect()}
    expected = scenarios.expected_recon_classes()
    assert got == expected
    assert {"match", "late_dropped", "window_open"} <= set(expected.values())

    summary = read_table(spark, cfg.paths.dbt_table("recon", "recon_summary")).collect()
    # a row per reconciled job, also for the jobs that have nothing to compare yet
    assert sorted(r.job for r in summary) == sorted(reconciled_jobs())
    assert all(
        r.rows_compared == r.unexplained_rows == 0 and r.stream_watermark is None
        for r in summary
        if r.job != "failed_txn_velocity"
    )
    row = next(r for r in summary if r.job == "failed_txn_velocity")
    assert row.unexplained_rows == 0 and row.rows_compared == len(expected)
    assert row.late_events_replayed == row.late_events_reported == reported_late == 1
    late = (
        read_table(spark, cfg.paths.dbt_table("batch", "int_late_events"))
        .where("job = 'failed_txn_velocity'")
        .collect()[0]
    )
    assert late.events_not_yet_read == 3

    # Again, with nothing new: no stream ran a batch since, so the windows open last time are
    # still open and every job is left out (its models and checks); its tables stay as they
    # were, and its position stays the one recorded with its last batch.
    from deltalake import DeltaTable

    from helpers import scopes
    from streaming_jobs.storage import ops_tables

    def version(name):
        return DeltaTable(str(cfg.paths.dbt_table("recon", name))).version()

    before = {job: version(f"recon_{job}") for job in reconciled_jobs()}
    again = dbt("build")
    assert again.returncode == 0, again.stdout[-3000:]
    assert set(scopes(again.stderr).values()) == {
        "nothing new since the last reconciliation: left out of this run"
    }, again.stderr
    assert {job: version(f"recon_{job}") for job in reconciled_jobs()} == before
    assert "no_unexplained_rows__failed_txn_velocity" not in again.stdout
    assert "recon_summary__job_not_null" in again.stdout  # the shared models still ran
    # the lateness counts stand without a replay (bronze's 3 unread rows still counted), and
    # no stream's staging view or its tests ran: nothing new reached any of its jobs
    late = (
        read_table(spark, cfg.paths.dbt_table("batch", "int_late_events"))
        .where("job = 'failed_txn_velocity'")
        .collect()[0]
    )
    assert (late.late_events_replayed, late.events_not_yet_read) == (1, 3)
    assert not {"stg_transactions", "stg_clicks"} & set(built_messages(cfg)), built_messages(cfg)
    batches = {
        r["batch_id"]
        for r in ops_tables.read(cfg, "stream_progress")
        if r["job"] == "failed_txn_velocity"
    }
    positions = (
        DeltaTable(str(cfg.paths.dbt_table("recon", "recon_positions")))
        .to_pyarrow_table()
        .to_pylist()
    )
    assert [r["batch_id"] for r in positions if r["job"] == "failed_txn_velocity"] == [max(batches)]

    # The stream reads what bronze took meanwhile: that job is recomputed, the others are left
    # out, and the summary still gets a row for every job (theirs are current as they stand).
    from streaming_jobs.storage.registry import get_job
    from streaming_jobs.runtime.runner import run_job

    run_job(spark, cfg, get_job("failed_txn_velocity"))
    mixed = dbt("build")
    assert mixed.returncode == 0, mixed.stdout[-3000:]
    reasons = scopes(mixed.stderr)
    assert reasons.pop("failed_txn_velocity").startswith("from "), mixed.stderr
    assert set(reasons.values()) == {
        "nothing new since the last reconciliation: left out of this run"
    }, mixed.stderr
    assert version("recon_failed_txn_velocity") > before["failed_txn_velocity"]
    # Views are re-created only when their SQL changed (macros/views.sql); the progress table
    # is built again at the run's pin, which moved with the batch the stream ran; the bronze
    # views read their tables by path and are kept (their rows were read through them above). A stream none of whose jobs anything
    # new reached has its view left out.
    said = built_messages(cfg)
    assert said["stg_transactions"] == "unchanged view staging.stg_transactions: kept", said
    assert "stg_clicks" not in said, said
    assert not said["stg_stream_progress"].startswith("unchanged"), said
    summary = (
        DeltaTable(str(cfg.paths.dbt_table("recon", "recon_summary")))
        .to_pyarrow_table()
        .to_pylist()
    )
    newest = max(r["reconciled_at"] for r in summary)
    assert sorted(r["job"] for r in summary if r["reconciled_at"] == newest) == sorted(
        reconciled_jobs()
    )
    # only the job the run rebuilt moved its position (to the batch the stream ran)
    positions = (
        DeltaTable(str(cfg.paths.dbt_table("recon", "recon_positions")))
        .to_pyarrow_table()
        .to_pylist()
    )
    latest = max(r["reconciled_at"] for r in positions)
    assert {(r["job"], r["batch_id"]) for r in positions if r["reconciled_at"] == latest} == {
        (
            "failed_txn_velocity",
            max(
                r["batch_id"]
                for r in ops_tables.read(cfg, "stream_progress")
                if r["job"] == "failed_txn_velocity"
            ),
        )
    }
    # That the history grows run after run (append, not replace) is test_always_on's: two
    # reconciliations of each hosted job in one recon_summary.


@pytest.mark.slow
def test_injected_gold_faults_land_in_their_classes_and_block_what_is_downstream(
    spark, cfg, capsys
):
    from datetime import timedelta

    from dagster import AssetKey, AssetSelection, DagsterInstance
    from delta.tables import DeltaTable

    from orchestration.defs.dbt.assets import RECON_GROUP
    from orchestration.definitions import build_definitions

    scenarios.run_waves(spark, cfg)
    expected = scenarios.expected_recon_classes()
    deleted, changed, doubled = sorted(k for k, c in expected.items() if c == "match")[:3]
    ghost_start = scenarios.START + timedelta(hours=1)
    ghost = ("ghost", ghost_start, ghost_start + timedelta(seconds=scenarios.WINDOW_S))

    path = str(cfg.paths.table("gold", "failed_txn_velocity"))
    gold = DeltaTable.forPath(spark, path)

    def where(key) -> str:
        return (
            f"user_id = '{key[0]}' and window_start = timestamp'{key[1]}' "
            f"and window_end = timestamp'{key[2]}'"
        )

    gold.delete(where(deleted))
    gold.update(where(changed), {"failed_count": "failed_count + 5"})
    read_table(spark, cfg.paths.table("gold", "failed_txn_velocity")).where(
        where(doubled)
    ).write.format("delta").mode("append").save(path)
    spark.createDataFrame(
        [(*ghost, 3)],
        "user_id string, window_start timestamp, window_end timestamp, failed_count long",
    ).write.format("delta").mode("append").save(path)

    defs = build_definitions()
    # the job's models for failed_txn_velocity, and recon_summary downstream of them (the other
    # jobs' models have nothing to reconcile here)
    recon, summary = (
        AssetKey(["recon", "recon_failed_txn_velocity"]),
        AssetKey(["recon", "recon_summary"]),
    )
    selection = (
        (AssetSelection.keys(recon).upstream() & AssetSelection.groups(RECON_GROUP))
        | AssetSelection.keys(summary)
    ).resolve(defs.resolve_asset_graph())
    assert summary in selection and len(selection) < 10
    result = defs.resolve_job_def("reconciliation_job").execute_in_process(
        instance=DagsterInstance.ephemeral(),
        raise_on_error=False,
        tags=incremental_tags(cfg),
        asset_selection=list(selection),
    )
    assert not result.success

    recon = read_table(spark, cfg.paths.dbt_table("recon", "recon_failed_txn_velocity")).collect()
    got = {(r.user_id, r.window_start, r.window_end): r.recon_class for r in recon}
    faulty = {
        deleted: "missing_in_stream",
        changed: "value_mismatch",
        doubled: "value_mismatch",
        ghost: "missing_in_batch",
    }
    assert got == {**expected, **faulty}
    diffs = {
        (r.user_id, r.window_start, r.window_end): (r.failed_count_diff, r.stream_rows)
        for r in recon
    }
    assert diffs[changed] == (5, 1) and diffs[doubled] == (expected_count(doubled), 2)

    checks = {
        e.event_specific_data.asset_check_key.name: e.event_specific_data.passed
        for e in result.all_events
        if e.event_type_value == "ASSET_CHECK_EVALUATION"
    }
    blocking = [name for name in checks if name == "no_unexplained_rows__failed_txn_velocity"]
    assert blocking and not any(checks[name] for name in blocking)
    materialized = {
        e.event_specific_data.materialization.asset_key
        for e in result.get_asset_materialization_events()
    }
    assert AssetKey(["recon", "recon_failed_txn_velocity"]) in materialized
    assert AssetKey(["recon", "recon_summary"]) not in materialized  # downstream did not run

    # The failed run is what every report shows: never "no reconciliation", never 0 unexplained.
    unexplained = sum(
        1 for c in got.values() if c in ("missing_in_stream", "value_mismatch", "missing_in_batch")
    )
    assert unexplained == 4
    from orchestration.recon import recon_runs
    from orchestration.cli.main import main as tidemark
    from orchestration.lib.overview import overview

    status = recon_runs.status(cfg)
    row = status.jobs["failed_txn_velocity"]
    assert (row["status"], row["run_status"], row["unexplained_rows"], row["rows_compared"]) == (
        "failed",
        "failed",
        unexplained,
        len(got),
    )
    assert row["dagster_run_id"] == result.run_id
    assert f"no_unexplained_rows__failed_txn_velocity: {unexplained} rows" in row["failed_checks"]
    observed = [
        e.event_specific_data.asset_observation
        for e in result.all_events
        if e.event_type_value == "ASSET_OBSERVATION"
        and e.event_specific_data.asset_observation.asset_key == summary
    ]
    assert len(observed) == 1
    shown = {k: v.value for k, v in observed[0].metadata.items()}
    assert shown["run_status"] == "failed" and shown["unexplained_rows"] == unexplained
    assert shown["reconciliation"].startswith("FAILED: ")
    assert f"failed_txn_velocity: {unexplained} unexplained rows" in shown["reconciliation"]

    for command in ("recon", "summary"):
        capsys.readouterr()
        assert tidemark([command]) == 1, command
        last = capsys.readouterr().out.strip().splitlines()[-1]
        assert (
            last.startswith("reconciliation FAILED: ")
            and (f"failed_txn_velocity: {unexplained} unexplained rows") in last
        ), (command, last)
    table, totals = overview(cfg)
    assert totals["unexplained_rows"] == unexplained
    assert "**FAILED**" in next(
        line for line in table.splitlines() if line.startswith("| failed_txn_velocity ")
    )


def expected_count(key) -> int:
    """The on-time count of a streamed change point (what the duplicated row doubles)."""
    return scenarios.expected_stream_rows()[key]


def _recon_rows(spark, cfg) -> list[tuple]:
    """recon_failed_txn_velocity's rows, less what differs between runs by design."""
    table = read_table(spark, cfg.paths.dbt_table("recon", "recon_failed_txn_velocity"))
    columns = [c for c in table.columns if c not in ("reconciled_at", "stream_watermark")]
    return sorted(tuple(r) for r in table.select(*columns).collect())


@pytest.mark.slow
@pytest.mark.long  # CI: test_retention's fold; make test-long
@pytest.mark.own_sql
def test_a_full_reconciliation_after_old_batches_are_folded_classifies_every_row_as_before(
    spark, endpoint_cfg
):
    cfg = endpoint_cfg  # two builds: one warm JVM for them (conftest)
    from datetime import datetime, timedelta, timezone

    from streaming_jobs.storage import ops_tables
    from streaming_jobs.operations import lineage
    from streaming_jobs.storage.registry import get_job
    from streaming_jobs.runtime.runner import run_job

    job = "failed_txn_velocity"
    reported_late, _ = scenarios.run_waves(spark, cfg)
    land(cfg, "wave-3.jsonl", [txn("e9", "u4", 1610)])  # on time: one more batch
    run_bronze(spark, cfg, "transactions")
    run_job(spark, cfg, get_job(job))
    select = ["--select", f"+recon_{job}", "+int_late_events", "--exclude", "test_type:unit"]
    result = dbt("build", *select)
    assert result.returncode == 0, result.stdout[-3000:]
    before = _recon_rows(spark, cfg)
    assert {
        r.recon_class
        for r in read_table(spark, cfg.paths.dbt_table("recon", f"recon_{job}")).collect()
    } >= {"match", "late_dropped"}
    batches = {r["batch_id"] for r in ops_tables.read(cfg, "stream_progress") if r["job"] == job}

    replaced, rollups, ledgered = lineage.fold(
        spark, cfg, cutoff=datetime.now(timezone.utc) + timedelta(days=1)
    )

    # one rollup row and the newest batch are left of the job's batches; the counts hold
    rows = sorted(
        (r for r in ops_tables.read(cfg, "stream_progress") if r["job"] == job),
        key=lambda r: r["batch_id"],
    )
    assert [r["rolled_up_batches"] for r in rows] == [len(batches) - 1, None]
    assert rows[-1]["batch_id"] == max(batches)
    assert sum(r["rows_dropped_by_watermark"] for r in rows) == reported_late == 1
    assert rollups >= 1 and replaced >= len(batches) - 1
    # the ledger holds exactly the event the scenario made late, by its bronze row id
    late = [r for r in ops_tables.read(cfg, "stream_late_rows") if r["job"] == job]
    bronze = (
        read_table(spark, cfg.paths.table("bronze", "transactions"))
        .select("event_id", "_metadata.row_id")
        .collect()
    )
    assert sorted(e.event_id for e in bronze if e.row_id in {r["row_id"] for r in late}) == sorted(
        scenarios.LATE
    )
    assert ledgered == len(late) == 1

    result = dbt("--full", "build", *select)
    assert result.returncode == 0, result.stdout[-3000:]
    assert _recon_rows(spark, cfg) == before
    counts = (
        read_table(spark, cfg.paths.dbt_table("batch", "int_late_events"))
        .where(f"job = '{job}'")
        .collect()[0]
    )
    assert counts.late_events_replayed == counts.late_events_reported == 1


@pytest.mark.long  # a composed fault trial (lost report, then a fold): make test-long
@pytest.mark.own_sql
def test_late_rows_of_a_batch_whose_report_was_lost_are_counted_apart_before_and_after_a_fold(
    spark, endpoint_cfg
):
    """A kill between a batch's sink commit and its checkpoint commit: the batch runs again,
    the Delta sink skips it (exactly once) and Spark reports it read and dropped nothing. The
    replay still finds the rows it dropped as late; late_counts_agree holds with them apart."""
    cfg = endpoint_cfg  # two builds: one warm JVM for them (conftest)
    from datetime import datetime, timedelta, timezone

    from helpers import click
    from streaming_jobs.storage import ops_tables
    from streaming_jobs.operations import lineage
    from streaming_jobs.storage.registry import get_job
    from streaming_jobs.runtime.runner import run_job

    job, spec = "events_by_type", get_job("events_by_type")
    # a batch's late threshold is the previous batch's watermark: two batches set it (1409)
    waves = [
        [click(f"w{w}-{i}", f"u{i % 3}", 1400 + 10 * w + i) for i in range(10)] for w in range(4)
    ]
    late = [click("late-1", "u1", 1300), click("late-2", "u2", 1310)]
    spark.conf.set("spark.sql.streaming.noDataMicroBatches.enabled", "false")
    try:
        for w, events in enumerate(waves):
            land(cfg, f"w{w}.jsonl", events + (late if w == 2 else []), stream="clicks")
            run_bronze(spark, cfg, "clicks")
            dropped = run_job(spark, cfg, spec).late_rows_dropped
            if w < 2:
                continue
            if w == 2:
                assert dropped == len(late)
                # the process dies after the batch's gold commit, before its checkpoint commit
                # and before its progress was flushed
                cut = max(
                    r["batch_id"]
                    for r in ops_tables.read(cfg, "stream_progress")
                    if r["job"] == job
                )
                commits = cfg.paths.checkpoint(job) / "commits"
                for name in (str(cut), f".{cut}.crc"):
                    (commits / name).unlink(missing_ok=True)
                ops_tables.delete(cfg, "stream_progress", f"job = '{job}' and batch_id = {cut}")
                # the batch again. On a local disk it runs whole and reports its drops (its
                # write skipped by tidemark's marker); the Delta sink (append-mode gold on a
                # store) skips a batch it holds, and Spark reports it read nothing: its report
                # is lost. The replay must see through that report: it is recorded as the sink's
                assert run_job(spark, cfg, spec).late_rows_dropped == len(late)
                ops_tables.update(
                    cfg,
                    "stream_progress",
                    {"num_input_rows": 0, "rows_dropped_by_watermark": 0},
                    f"job = '{job}' and batch_id = {cut}",
                )
    finally:
        spark.conf.unset("spark.sql.streaming.noDataMicroBatches.enabled")

    rerun = [
        r
        for r in ops_tables.read(cfg, "stream_progress")
        if r["job"] == job and r["batch_id"] == cut
    ]
    assert [(r["num_input_rows"], r["rows_dropped_by_watermark"]) for r in rerun] == [(0, 0)]
    gold = read_table(spark, cfg.paths.table("gold", job)).collect()
    assert sorted(r.event_id for r in gold) == sorted(e["event_id"] for w in waves for e in w)

    select = ["--select", "+int_late_events", "--exclude", "test_type:unit"]
    for full in (False, True):
        if full:  # fold every batch but the newest: the ledger carries the lost report
            lineage.fold(spark, cfg, cutoff=datetime.now(timezone.utc) + timedelta(days=1))
            ledger = [r for r in ops_tables.read(cfg, "stream_late_rows") if r["job"] == job]
            assert sorted((r["batch_id"], r["report_lost"]) for r in ledger) == [(cut, True)] * len(
                late
            )
        result = dbt(*(["--full"] if full else []), "build", *select)
        assert result.returncode == 0, result.stdout[-3000:]
        counts = (
            read_table(spark, cfg.paths.dbt_table("batch", "int_late_events"))
            .where(f"job = '{job}'")
            .collect()[0]
        )
        assert (
            counts.late_events_replayed,
            counts.late_events_reported,
            counts.late_events_report_lost,
        ) == (len(late), 0, len(late))


@pytest.mark.slow
@pytest.mark.own_sql  # CI's proof of dbt in a session of its own (make run's default)
def test_a_bronze_row_missing_its_key_fails_the_staging_test_naming_each_column(spark, cfg):
    from pyspark.sql import functions as F

    land(cfg, "wave-1.jsonl", [txn("t1", "u1", 1), txn("t2", "u2", 2)])
    run_bronze(spark, cfg, "transactions")
    # A row the ingestion would have quarantined, written past it: no event_id and no event time.
    bronze = cfg.paths.table("bronze", "transactions")
    bad = (
        read_table(spark, bronze)
        .where("event_id = 't1'")
        .withColumn("event_id", F.lit(None).cast("string"))
        .withColumn("event_time", F.lit(None).cast("timestamp"))
    )
    bad.write.format("delta").mode("append").save(str(bronze))

    result = dbt("build", "--select", "stg_transactions", "--store-failures")
    assert result.returncode != 0, result.stdout[-3000:]
    assert "Failure in test stg_transactions__not_null" in result.stdout, result.stdout[-3000:]
    # one row per column that lacks values, with how many rows lack it (dbt stored them)
    stored = cfg.paths.warehouse / "dbt_test__audit.db" / "stg_transactions__not_null"
    rows = spark.read.parquet(str(stored)).collect()
    assert sorted((r.column_name, r.null_rows) for r in rows) == [
        ("event_id", 1),
        ("event_time", 1),
    ]


@pytest.mark.slow
def test_a_shared_endpoint_creates_the_lake_a_build_reads_as_spark_here_would(spark, cfg):
    """A data root where nothing ran: tidemark-dbt on a shared endpoint (which keeps no data
    root's lake) has the endpoint create every missing table, starting no JVM of its own, and
    each table is what `ensure_lake` makes in a Spark here (the reference)."""
    from streaming_jobs.runtime.tables import ensure_lake, missing

    reference = cfg.with_data_root(cfg.data_root.parent / "reference")
    made = ensure_lake(spark, reference)  # each job's gold schema made by Spark, and kept
    assert len(made) == len(missing(cfg)) > 0

    result = dbt("build", "--select", "stg_transactions")
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    assert "did not create" not in result.stderr, result.stderr[-3000:]
    assert missing(cfg) == []
    assert not (cfg.paths.logs / "spark.log").exists()  # no Spark started in tidemark-dbt

    for item in made:
        assert table_shape(spark, cfg, item) == table_shape(spark, reference, item), item
