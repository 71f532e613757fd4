"""Retention (`streaming_jobs.operations.retention`) on real Delta tables.

Compaction must not change a row or its lineage (reconciliation explains late events by each
bronze row's ``row_commit_version``, so keeping it exactly keeps every explanation), VACUUM
must free the replaced files, ops history past its age goes, what is still needed stays, and
the jobs go on as before.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from datetime import datetime, timedelta, timezone

import pytest
from dagster import DagsterInstance

import scenarios
from helpers import land, txn
from streaming_jobs.storage import ops_tables
from streaming_jobs.storage.lake import read_table
from streaming_jobs.operations import retention, savepoints
from streaming_jobs.operations.landing import account
from streaming_jobs.storage.registry import get_job
from streaming_jobs.runtime.runner import run_bronze, run_job

from orchestration.definitions import build_definitions
from orchestration.cli.summary import collect


def _bronze_lineage(spark, cfg):
    rows = (
        spark.read.format("delta")
        .load(str(cfg.paths.table("bronze", "transactions")))
        .selectExpr("event_id", "_source_file", "_metadata.row_commit_version as v")
        .collect()
    )
    return sorted((r.event_id, r._source_file, r.v) for r in rows)


def _active_files(spark, table) -> int:
    return spark.sql(f"DESCRIBE DETAIL delta.`{table}`").collect()[0].numFiles


@pytest.mark.slow
def test_maintenance_compacts_and_prunes_without_changing_a_row_or_its_lineage(
    spark, cfg, monkeypatch
):
    monkeypatch.setenv("TIDEMARK_VACUUM_RETAIN_HOURS", "0")
    monkeypatch.setenv("TIDEMARK_OPS_RETENTION_DAYS", "7")
    cfg = cfg.from_env().with_data_root(cfg.data_root)
    scenarios.run_waves(spark, cfg)  # two waves: bronze and gold in several commits each
    # a landed file that grew after it was read: it does not balance, so it is never moved
    grown = land(cfg, "grown.jsonl", [txn("g1", "u9", 5)])
    run_bronze(spark, cfg, "transactions")
    run_job(spark, cfg, get_job("failed_txn_velocity"))  # caught up: no reader needs old files
    with grown.open("a") as handle:
        handle.write('{"event_id": "g2"}\n')

    bronze = cfg.paths.table("bronze", "transactions")
    gold = cfg.paths.table("gold", "failed_txn_velocity")
    lineage, gold_rows = _bronze_lineage(spark, cfg), read_table(spark, gold).collect()
    files_before = _active_files(spark, bronze)
    landed = sorted(p.name for p in cfg.paths.landing_dir("transactions").iterdir())
    assert files_before >= 3 and len(landed) == 3

    now = datetime.now(timezone.utc)
    old, recent = now - timedelta(days=8), now - timedelta(days=1)
    ops_tables.append(
        cfg,
        "stream_failures",
        [
            {"job": "failed_txn_velocity", "run_id": "old", "failed_at": old, "error": "x"},
            {"job": "failed_txn_velocity", "run_id": "recent", "failed_at": recent, "error": "y"},
        ],
    )
    alert = {
        "dedup_key": "k",
        "incident": 1,
        "job": "j",
        "kind": "k",
        "severity": "warning",
        "message": "m",
        "first_seen": old,
        "last_seen": old,
        "seen_count": 1,
    }
    ops_tables.append(
        cfg,
        "alerts",
        [
            {
                **alert,
                "alert_id": "done",
                "resolved_at": old,
                "firing_delivered_at": old,
                "resolved_delivered_at": old,
            },
            {**alert, "alert_id": "owed", "resolved_at": old, "firing_delivered_at": old},
            {**alert, "alert_id": "open", "firing_delivered_at": old},
        ],
    )
    ops_tables.append(
        cfg,
        "stream_progress",
        [
            {
                "job": "old_job",
                "batch_id": 0,
                "ts": old,
                "progress_json": '{"id": 1}',
                "source_version_from": -1,
                "source_version_to": 3,
            }
        ],
    )
    # a job's old runs go, but never its latest: `tidemark recon` reports it however old
    ops_tables.append(
        cfg,
        "recon_runs",
        [
            {"run_key": "old", "job": "a", "finished_at": old, "status": "failed"},
            {"run_key": "old", "job": "b", "finished_at": old, "status": "passed"},
            {"run_key": "recent", "job": "a", "finished_at": recent, "status": "passed"},
        ],
    )
    aside = cfg.paths.checkpoints / ".replaced"
    for name, age in (("failed_txn_velocity-old", 8), ("failed_txn_velocity-new", 1)):
        (aside / name / "commits").mkdir(parents=True)
        stamp = time.time() - age * 86400
        os.utime(aside / name, (stamp, stamp))

    # as the schedule runs it: Dagster's maintenance_job, in this test's session
    run = (
        build_definitions()
        .resolve_job_def("maintenance_job")
        .execute_in_process(instance=DagsterInstance.ephemeral())
    )
    assert run.success
    [output] = [e for e in run.all_events if e.event_type_value == "STEP_OUTPUT"]
    report = {k: v.value for k, v in output.event_specific_data.metadata.items()}
    assert report["failed_steps"] == 0
    # the old failure, the closed and delivered alert, job a's superseded run
    assert report["ops_rows_pruned"] == 3
    assert sorted((r["run_key"], r["job"]) for r in ops_tables.read(cfg, "recon_runs")) == [
        ("old", "b"),
        ("recent", "a"),
    ]
    for step in (
        "| bronze/transactions | optimize |",
        "| bronze/transactions | vacuum |",
        "| gold/failed_txn_velocity | vacuum |",
        "| landing/transactions | archive |",
        "| ops/alerts | prune+compact |",
        "| checkpoints/.replaced | remove |",
    ):
        assert step in report["steps"], step

    # compaction: one active file each, the same rows, every row's commit version kept
    assert _active_files(spark, bronze) == 1 < files_before
    assert _bronze_lineage(spark, cfg) == lineage
    assert sorted(read_table(spark, gold).collect()) == sorted(gold_rows)
    # VACUUM (0 h asked, no savepoint, no job behind): the replaced files are gone from disk
    assert retention._disk(bronze)[0] == 1, report["steps"]
    # landing: the balanced files are archived, the grown one stays where it is
    assert sorted(p.name for p in cfg.paths.landing_dir("transactions").iterdir()) == [
        "grown.jsonl"
    ]
    assert sorted(
        p.name for p in (cfg.data_root / "archive" / "landing" / "transactions").iterdir()
    ) == sorted(n for n in landed if n != "grown.jsonl")
    # ops history: past the age it goes, unless still needed
    assert [r["run_id"] for r in ops_tables.read(cfg, "stream_failures")] == ["recent"]
    assert sorted(r["alert_id"] for r in ops_tables.read(cfg, "alerts")) == ["open", "owed"]
    # progress rows all stay (their lineage is reconciliation's); old ones lose the raw json
    progress = ops_tables.read(cfg, "stream_progress")
    [kept] = [r for r in progress if r["job"] == "old_job"]
    assert kept["progress_json"] is None and kept["source_version_to"] == 3
    assert all(r["progress_json"] for r in progress if r["job"] != "old_job")
    assert sorted(p.name for p in aside.iterdir()) == ["failed_txn_velocity-new"]

    # everything goes on: a new file is ingested and the job runs past the compacted versions
    land(cfg, "wave-3.jsonl", [txn("n1", "u1", 40), txn("n2", "u4", 1700), txn("n3", "u2", 126)])
    run_bronze(spark, cfg, "transactions")
    assert run_job(spark, cfg, get_job("failed_txn_velocity")).input_rows == 3
    assert len(_bronze_lineage(spark, cfg)) == len(lineage) + 3
    assert (
        account(cfg, "transactions")
        .findings[0]
        .message.startswith("landing/transactions/grown.jsonl")
    )
    # the summary's accounting still counts the archived files' lines: it holds but for the
    # one line added to grown.jsonl after it was read
    summary = collect(spark, cfg)
    assert (
        summary.landing_lines["transactions"]
        == summary.bronze_rows["transactions"] + summary.quarantine_rows["transactions"] + 1
    )
    assert summary.removed_lines["transactions"] == 0
    # past TIDEMARK_OPS_RETENTION_DAYS retention deletes the archived files: the rows that came
    # from them are counted apart, so the accounting still balances (the soak's summary said
    # DOES NOT HOLD for every stream once its archive had expired)
    archive = cfg.data_root / "archive" / "landing" / "transactions"
    archived = sum(len(p.read_text().splitlines()) for p in archive.iterdir())
    retention._archive(
        retention.Maintenance(), "archive/landing/transactions", archive, time.time() + 60
    )
    assert archived and not any(archive.iterdir())
    later = collect(spark, cfg)
    assert later.removed_lines["transactions"] == archived
    assert later.landing_lines["transactions"] == summary.landing_lines["transactions"] - archived


def test_vacuum_keeps_what_a_savepoint_or_a_lagging_job_needs(spark, cfg, monkeypatch):
    monkeypatch.setenv("TIDEMARK_VACUUM_RETAIN_HOURS", "0")
    cfg = cfg.from_env().with_data_root(cfg.data_root)
    land(cfg, "a.jsonl", [txn("a1", "u1", 1)])
    run_bronze(spark, cfg, "transactions")
    run_job(spark, cfg, get_job("failed_txn_velocity"))
    bronze = cfg.paths.table("bronze", "transactions")
    assert retention.retain_hours(cfg, bronze) == (0.0, "TIDEMARK_VACUUM_RETAIN_HOURS")

    # a query whose first batch is planned and not committed reads its whole starting snapshot
    # (what the soak caught: a join's first batch in flight while its files were vacuumed)
    starting = cfg.paths.checkpoints / "just_started" / "offsets"
    starting.mkdir(parents=True)
    shutil.copy(cfg.paths.checkpoint("failed_txn_velocity") / "offsets" / "0", starting / "0")
    hours, why = retention.retain_hours(cfg, bronze, now=time.time() + 7200)
    assert why == "a checkpoint that has not read it all" and 2.08 <= hours < 2.2
    shutil.rmtree(starting.parent)

    # the job is behind bronze: VACUUM keeps files since the first version it has not read
    land(cfg, "b.jsonl", [txn("b1", "u1", 2)])
    run_bronze(spark, cfg, "transactions")
    hours, why = retention.retain_hours(cfg, bronze, now=time.time() + 7200)
    assert why == "a checkpoint that has not read it all" and 2.08 <= hours < 2.2

    # a savepoint taken now, looked at 10 hours later: a restore may need 10 hours of files
    run_job(spark, cfg, get_job("failed_txn_velocity"))
    savepoints.take(cfg, "failed_txn_velocity")
    hours, why = retention.retain_hours(cfg, bronze, now=time.time() + 36000)
    assert why == "the oldest savepoint" and 10.05 < hours < 10.2


def age_log(path, then: float) -> None:
    """Make every commit of the table at ``path`` so far look made at ``then`` (a Unix time):
    commit times are the commit files' times, and removed files carry their removal time."""
    log = path / "_delta_log"
    for commit in log.glob("*.json"):
        actions = [json.loads(line) for line in commit.read_text().splitlines()]
        for action in actions:
            if "remove" in action:
                action["remove"]["deletionTimestamp"] = int(then * 1000)
        commit.write_text("\n".join(json.dumps(a) for a in actions) + "\n")
        os.utime(commit, (then, then))
    for crc in set(log.glob("*.crc")) | set(log.glob(".*.crc")):
        crc.unlink()  # the log was edited: its checksums no longer hold


def test_vacuum_deletes_removed_files_older_than_its_retention_and_keeps_the_rest(spark, cfg):
    """Delta 4.4 ignores ``RETAIN n HOURS`` (n > 0) by default and keeps its 7-day default:
    the soak's VACUUMs deleted nothing for two hours. A table whose compaction is two hours
    old (its log aged: commit times are the commit files' times) must lose the compacted-away
    files at a one-hour retention; a compaction of a minute ago must keep them."""

    def table(name: str, hours_ago: float):
        path = cfg.data_root / name
        for k in range(3):
            spark.range(k * 10, k * 10 + 10).write.format("delta").mode("append").save(str(path))
        spark.sql(f"OPTIMIZE delta.`{path}`").collect()
        age_log(path, time.time() - hours_ago * 3600)
        spark.range(100, 110).write.format("delta").mode("append").save(str(path))  # now
        return path

    def parquet(path) -> set[str]:
        return {p.name for p in path.glob("*.parquet")}

    def current(path) -> set[str]:
        from deltalake import DeltaTable

        return {os.path.basename(u) for u in DeltaTable(str(path)).file_uris()}

    old, recent = table("old", hours_ago=2), table("recent", hours_ago=1 / 60)
    removed_old, removed_recent = parquet(old) - current(old), parquet(recent) - current(recent)
    # the three appends' files, compacted away
    assert removed_old and len(removed_old) == len(removed_recent)
    retention._vacuum(spark, old, 1)
    retention._vacuum(spark, recent, 1)
    assert parquet(old) == current(old)  # every removed file older than an hour: deleted
    assert parquet(recent) - current(recent) == removed_recent  # a minute old: all kept
    assert (
        spark.conf.get("spark.databricks.delta.vacuum.retentionWindowIgnore.enabled", None) is None
    )  # the session's settings are left as they were
    assert read_table(spark, old).count() == 40  # no row lost


@pytest.mark.long  # CI: the other VACUUM tests; make test-long
def test_vacuum_still_deletes_old_removed_files_when_the_log_starts_after_its_retention(spark, cfg):
    """The 90-minute soak's leak: the log had been expired to 40 minutes while VACUUM kept an
    hour, so ``VACUUM LITE`` found no commit older than its retention and deleted nothing, ever
    (lake files on disk kept growing). A table compacted two hours ago whose log now starts
    with a commit made now must still lose its compacted-away files."""
    path = cfg.data_root / "expired_early"
    for k in range(3):
        spark.range(k * 10, k * 10 + 10).write.format("delta").mode("append").save(str(path))
    spark.sql(f"OPTIMIZE delta.`{path}`").collect()
    then = time.time() - 2 * 3600
    for data in path.glob("*.parquet"):
        os.utime(data, (then, then))
    age_log(path, then)
    for k in range(3, 10):  # now: versions 4 to 10, a log checkpoint at 10
        spark.range(k * 10, k * 10 + 10).write.format("delta").mode("append").save(str(path))
    deleted, floor = retention.expire_log(path, time.time() + 60)  # the old, too short log
    assert floor == 10 and deleted > 0
    from deltalake import DeltaTable

    current = {os.path.basename(u) for u in DeltaTable(str(path)).file_uris()}
    compacted_away = {p.name for p in path.glob("*.parquet")} - current
    assert len(compacted_away) >= 3 and all(
        (path / name).stat().st_mtime <= then + 1 for name in compacted_away
    )
    retention._vacuum(spark, path, 1)
    assert {p.name for p in path.glob("*.parquet")} == current  # the old ones gone
    assert read_table(spark, path).count() == 100  # no row lost


def test_log_expiry_keeps_every_version_from_the_last_checkpoint_before_its_horizon(spark, cfg):
    """A table of 25 appends (Delta checkpoints at versions 10 and 20), its first 15 commits
    three hours old: expiring the log at a two-hour horizon removes every file of the versions
    before checkpoint 10 (the newest checkpoint committed before the horizon) and nothing else;
    the table and every version from 10 on still read, row for row."""
    path = cfg.data_root / "log_expiry"
    for k in range(25):
        spark.range(k * 10, k * 10 + 10).write.format("delta").mode("append").save(str(path))
    log = path / "_delta_log"
    then = time.time() - 3 * 3600
    for version in range(15):
        os.utime(log / f"{version:020d}.json", (then, then))
    by_version = {}  # a version's files, Hadoop's hidden checksums (.<name>.crc) included
    for name in (p.name for p in log.iterdir() if p.is_file()):
        if name.lstrip(".")[:20].isdigit():
            by_version.setdefault(int(name.lstrip(".")[:20]), set()).add(name)
    assert {v for v, names in by_version.items() if any("checkpoint" in n for n in names)} == {
        10,
        20,
    }

    # a run killed after deleting the oldest few files: the next one finishes the job
    for name in sorted(by_version[0]):
        (log / name).unlink()
    deleted, floor = retention.expire_log(path, time.time() - 2 * 3600)
    assert floor == 10
    assert deleted == sum(len(by_version[v]) for v in range(1, 10))
    left = {
        int(p.name.lstrip(".")[:20])
        for p in log.iterdir()
        if p.is_file() and p.name.lstrip(".")[:20].isdigit()
    }
    assert left == set(range(10, 25))
    assert (log / "_last_checkpoint").exists()

    assert read_table(spark, path).count() == 250
    for version in (10, 17, 24):  # time travel from the floor on: (version + 1) appends each
        rows = spark.read.format("delta").option("versionAsOf", version).load(str(path))
        assert sorted(r.id for r in rows.collect()) == list(range((version + 1) * 10))
    with pytest.raises(Exception, match="(?i)version|not (exist|available|reconstruct)"):
        spark.read.format("delta").option("versionAsOf", 5).load(str(path)).count()
    # nothing older than the horizon is left to expire; a later horizon moves the floor
    assert retention.expire_log(path, time.time() - 2 * 3600) == (0, 10)
    deleted, floor = retention.expire_log(path, time.time() + 60)
    assert floor == 20 and deleted >= 10
    spark.range(250, 260).write.format("delta").mode("append").save(str(path))
    assert read_table(spark, path).count() == 260


def test_log_retention_follows_savepoints_lagging_jobs_and_the_progress_fold(
    spark, cfg, monkeypatch
):
    monkeypatch.setenv("TIDEMARK_LOG_RETAIN_HOURS", "1")
    monkeypatch.setenv("TIDEMARK_VACUUM_RETAIN_HOURS", "0")
    monkeypatch.setenv("TIDEMARK_OPS_RETENTION_DAYS", "0.5")
    cfg = cfg.from_env().with_data_root(cfg.data_root)
    land(cfg, "a.jsonl", [txn("a1", "u1", 1)])
    run_bronze(spark, cfg, "transactions")
    run_job(spark, cfg, get_job("failed_txn_velocity"))
    gold = cfg.paths.table("gold", "failed_txn_velocity")
    bronze = cfg.paths.table("bronze", "transactions")
    assert retention.log_retain_hours(cfg, gold, "gold") == (1.0, "TIDEMARK_LOG_RETAIN_HOURS")
    # bronze's commits are read by the fold of progress younger than the ops age (12 h)
    hours, why = retention.log_retain_hours(cfg, bronze, "bronze")
    assert why.startswith("progress not folded yet") and 12 < hours < 12.2
    # the job falls behind bronze: its unread versions are kept, looked at 20 hours later
    land(cfg, "b.jsonl", [txn("b1", "u1", 2)])
    run_bronze(spark, cfg, "transactions")
    # (VACUUM keeps them too, in whole hours: 21, and its LITE mode finds the files to delete
    # in the commits that removed them, so those commits stay as long)
    hours, why = retention.log_retain_hours(cfg, bronze, "bronze", now=time.time() + 72000)
    assert why == "what VACUUM keeps, in whole hours (a checkpoint that has not read it all)"
    assert 21 < hours < 21.1
    # a savepoint taken now, looked at 5 hours later: a restore RESTOREs gold to its version
    run_job(spark, cfg, get_job("failed_txn_velocity"))
    savepoints.take(cfg, "failed_txn_velocity")
    hours, why = retention.log_retain_hours(cfg, gold, "gold", now=time.time() + 18000)
    assert why == "what VACUUM keeps, in whole hours (the oldest savepoint)" and 6 < hours < 6.1
    # VACUUM's own setting: its commits outlive the files they removed
    monkeypatch.setenv("TIDEMARK_VACUUM_RETAIN_HOURS", "2.5")
    longer = cfg.from_env().with_data_root(cfg.data_root)
    hours, why = retention.log_retain_hours(longer, gold, "gold")
    assert why == "what VACUUM keeps, in whole hours (TIDEMARK_VACUUM_RETAIN_HOURS)"
    assert hours == 3 + retention.MARGIN_HOURS
