"""events_by_type: clicks routed into (event_type, event_date) partitions, few files each."""

from __future__ import annotations

import json
from collections import Counter
from datetime import date

import pytest

from helpers import click, land, on_store
from streaming_jobs.storage.registry import get_job
from streaming_jobs.storage.lake import read_table
from streaming_jobs.runtime.runner import run_bronze, run_job
from streaming_jobs.storage import ops_tables

ACTIONS = ("view", "purchase")


def wave_clicks(wave: int) -> list[dict]:
    """Clicks on two days (minute 1380.. crosses midnight), both types, one duplicate."""
    base = 1380 + wave * 20
    events = [
        click(f"w{wave}-{i}", f"u{i % 3}", base + i, amount=float(i % 2) * 4.5) for i in range(30)
    ]
    return events + [dict(events[0])]


@pytest.mark.long  # make test-long (CI keeps the job's any-value test and its catalogue run)
def test_clicks_land_once_in_their_partition_with_one_file_per_partition_per_batch(spark, cfg):
    spec = get_job("events_by_type")
    late = [click("late", "u9", 1300, 1.0)]  # behind the watermark once wave 0 is streamed
    waves = [wave_clicks(w) for w in range(5)]
    spark.conf.set("spark.databricks.delta.autoCompact.minNumFiles", "3")
    try:
        dropped = 0
        for w, events in enumerate(waves):
            land(cfg, f"w{w}.jsonl", events + (late if w == 1 else []), stream="clicks")
            run_bronze(spark, cfg, "clicks")
            dropped += run_job(spark, cfg, spec).late_rows_dropped
    finally:
        spark.conf.unset("spark.databricks.delta.autoCompact.minNumFiles")

    distinct = {e["event_id"]: e for events in waves for e in events}
    expected = {
        (e["action"], date.fromisoformat(e["event_time"][:10]), e["event_id"])
        for e in distinct.values()
    }
    target = cfg.paths.table("gold", spec.name)
    gold = read_table(spark, target)
    got = [(r.event_type, r.event_date, r.event_id) for r in gold.collect()]
    assert sorted(got) == sorted(expected)  # every distinct on-time click exactly once
    assert dropped == 1
    assert {t for t, _, _ in got} == set(ACTIONS) and len({d for _, d, _ in got}) == 2

    # Each streaming commit adds at most one file per partition (read from the Delta log).
    log = sorted((target / "_delta_log").glob("*.json"))
    per_commit = []
    for entry in log:
        actions = [json.loads(line) for line in entry.read_text().splitlines()]
        if any(
            a.get("commitInfo", {}).get("operation") in ("STREAMING UPDATE", "WRITE")
            for a in actions
        ):
            per_commit.append(
                Counter(
                    json.dumps(a["add"]["partitionValues"], sort_keys=True)
                    for a in actions
                    if "add" in a
                )
            )
    assert per_commit and all(max(c.values()) == 1 for c in per_commit if c)
    # ...and auto compaction keeps every partition under the threshold of 3 small files.
    files = (
        gold.select("event_type", "event_date", "_metadata.file_path")
        .distinct()
        .groupBy("event_type", "event_date")
        .count()
        .collect()
    )
    assert max(r["count"] for r in files) < 3
    operations = [r.operation for r in spark.sql(f"describe history delta.`{target}`").collect()]
    assert "OPTIMIZE" in operations


def test_any_event_type_is_written_and_the_stream_goes_on(spark, cfg):
    """A 300-character event type made gold's partition folder name too long: the batch failed
    on every retry, and the job was stopped for good. Partition values now live in the Delta
    log only (files go under short random folders), so any value is written."""
    from deltalake import DeltaTable

    spec = get_job("events_by_type")
    odd = ["x" * 300, "a/../b:c #%é", "é" * 200]
    first = [{**click(f"o{i}", "u1", 1380 + i), "action": a} for i, a in enumerate(odd)]
    second = [click("n1", "u2", 1400), {**click("n2", "u2", 1401), "action": odd[0]}]
    land(cfg, "w0.jsonl", first, stream="clicks")
    run_bronze(spark, cfg, "clicks")
    run_job(spark, cfg, spec)
    land(cfg, "w1.jsonl", second, stream="clicks")
    run_bronze(spark, cfg, "clicks")
    run_job(spark, cfg, spec)

    target = cfg.paths.table("gold", spec.name)
    expected = sorted((e["action"], e["event_id"]) for e in first + second)
    assert (
        sorted((r.event_type, r.event_id) for r in read_table(spark, target).collect()) == expected
    )
    # readable by delta-rs too, and no folder is named after a value
    table = DeltaTable(str(target))
    assert (
        sorted(
            zip(
                *[
                    table.to_pyarrow_table().column(c).to_pylist()
                    for c in ("event_type", "event_id")
                ]
            )
        )
        == expected
    )
    assert table.metadata().configuration.get("delta.randomizeFilePrefixes") == "true"
    assert not any("=" in p.name for p in target.iterdir())


@pytest.mark.parametrize("where", ["local", "store"])
def test_batches_a_killed_run_did_not_report_get_their_rows_back_from_the_checkpoint(
    spark, cfg, where, request
):
    """A process killed between a batch's commit and its progress flush leaves the batch out
    of ops/stream_progress (the state a SIGKILL of a continuous run leaves; its rows are taken
    out here). The next run, continuous or incremental, writes the row again from the
    checkpoint before it starts: the bronze versions and the watermark Spark recorded for it,
    its gold version, and no counts (null: its report is lost, not zero). On local disk and
    with the data root on the project's S3 server."""
    from streaming_jobs.operations.continuous import run_continuous
    from streaming_jobs.runtime.progress import RESTORED

    if where == "store":
        cfg = on_store(spark, cfg, request.getfixturevalue("s3_bucket"))
    spec = get_job("events_by_type")
    kept = ["batch_id", "watermark", "source_versions", "sink_version", "query_id", "job_version"]
    for wave in range(3):
        events = [click(f"w{wave}-{i}", "u1", 20 * wave + i) for i in range(4)]
        late = [click(f"late{wave}", "u2", 1.0)] if wave else []  # behind the watermark
        land(cfg, f"k{wave}.jsonl", events + late, stream="clicks")
        run_bronze(spark, cfg, "clicks")
        run_job(spark, cfg, spec)
    where = f"job = '{spec.name}'"
    reported = {r["batch_id"]: r for r in ops_tables.read(cfg, "stream_progress", where=where)}
    # each run: a batch of the wave, then one that moves the watermark on
    assert sorted(reported) == list(range(6))
    assert [reported[b]["rows_dropped_by_watermark"] for b in range(6)] == [0, 0, 0, 0, 1, 0]
    lost = [3, 4, 5]  # the third run's batches, the late row's among them
    ops_tables.delete(cfg, "stream_progress", f"{where} and batch_id >= 3")
    # a reconciliation before the job's next start reads gold as of the last reported batch:
    # the unreported batches' gold rows are left out with the bronze versions they read
    from orchestration.recon.dbt_vars import position_vars

    pinned = position_vars(cfg, {spec.name: spec})["gold_versions"][spec.name]
    assert pinned == reported[2]["sink_version"] < reported[5]["sink_version"]

    run_continuous(spark, cfg, jobs=[spec.name], trigger_seconds=1.0, max_seconds=3.0)
    back = {r["batch_id"]: r for r in ops_tables.read(cfg, "stream_progress", where=where)}
    assert sorted(back) == list(range(6))  # no new batch: nothing new landed
    for batch in lost:
        assert {k: back[batch][k] for k in kept} == {k: reported[batch][k] for k in kept}
        assert back[batch]["num_input_rows"] is None
        assert back[batch]["rows_dropped_by_watermark"] is None
        assert RESTORED in back[batch]["progress_json"]
    # restored once: a later run finds every batch reported
    run_job(spark, cfg, spec)
    assert len(ops_tables.read(cfg, "stream_progress", where=where)) == 6


def test_a_gold_table_without_random_prefixes_gets_them_at_the_next_start_once(spark, cfg):
    """A partitioned gold table an older tidemark made (Hive-style folders) is given
    ``delta.randomizeFilePrefixes`` when its job's query is next built: one commit that
    changes no row, and none when the table has it. The table's properties are read from its
    log by delta-rs (`lake.ensure_properties`; on the store, the progress flush reads every
    bronze table's metadata the same way)."""
    from streaming_jobs.core.delta_log import commit_actions, latest_version
    from streaming_jobs.core.locations import delta_table
    from streaming_jobs.runtime.gold import gold_writer
    from streaming_jobs.storage.lake import spark_path

    spec = get_job("events_by_type")
    land(cfg, "p.jsonl", [click(f"p{i}", "u1", i) for i in range(4)], stream="clicks")
    run_bronze(spark, cfg, "clicks")
    run_job(spark, cfg, spec)
    target = cfg.paths.table("gold", spec.name)
    prefixes = "delta.randomizeFilePrefixes"
    spark.sql(f"ALTER TABLE delta.`{spark_path(target)}` UNSET TBLPROPERTIES ('{prefixes}')")
    assert prefixes not in delta_table(target).metadata().configuration
    rows, before = read_table(spark, target).count(), latest_version(target)

    gold_writer(spark, cfg, spec)
    after = latest_version(target)
    operations = [
        a["commitInfo"]["operation"]
        for v in range(before + 1, after + 1)
        for a in commit_actions(target, v)
        if "commitInfo" in a
    ]
    assert operations == ["SET TBLPROPERTIES"]
    detail = spark.sql(f"DESCRIBE DETAIL delta.`{spark_path(target)}`").first()
    assert detail.properties[prefixes] == "true" and read_table(spark, target).count() == rows
    gold_writer(spark, cfg, spec)
    assert latest_version(target) == after
