"""Bronze ingestion: every line lands in bronze or quarantine, exactly once across restarts."""

from __future__ import annotations

import pytest

from helpers import is_valid_transaction as is_valid
from helpers import write_wave

from streaming_jobs.storage.lake import read_table
from streaming_jobs.runtime.runner import run_bronze


def test_every_line_lands_once_in_bronze_or_quarantine(spark, cfg, sample):
    gen, files = sample
    for wave in range(3):
        write_wave(cfg, gen, files, wave)
    metrics = run_bronze(spark, cfg, "transactions")

    lines = [line for f in files for line in f]
    expected_bad = sorted(line for line in lines if not is_valid(line))
    bronze = read_table(spark, cfg.paths.table("bronze", "transactions"))
    quarantine = read_table(spark, cfg.paths.table("quarantine", "transactions"))

    assert len(expected_bad) > 0
    assert sorted(r.raw_line for r in quarantine.select("raw_line").collect()) == expected_bad
    assert bronze.count() == len(lines) - len(expected_bad)
    assert metrics.input_rows == len(lines)
    assert metrics.output_rows == bronze.count() and metrics.quarantined_rows == len(expected_bad)
    assert quarantine.where("reason is null").count() == 0
    # lineage: every bronze row names the landing file it came from
    assert {
        r._source_file.rsplit("/", 1)[-1]
        for r in bronze.select("_source_file").distinct().collect()
    } == {f"part-{gen.seed}-{i:05d}.jsonl" for i in range(3)}


def test_restart_and_replayed_batch_write_nothing_twice(spark, cfg, sample):
    gen, files = sample
    write_wave(cfg, gen, files, 0)
    first = run_bronze(spark, cfg, "transactions")
    bronze_path = cfg.paths.table("bronze", "transactions")
    after_first = read_table(spark, bronze_path).count()
    assert after_first == first.output_rows > 0

    again = run_bronze(spark, cfg, "transactions")  # nothing new arrived
    assert again.input_rows == 0 and read_table(spark, bronze_path).count() == after_first

    # A crash after the Delta writes but before the checkpoint commit: the batch runs again.
    checkpoint = cfg.paths.checkpoint("bronze_transactions")
    last = max(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())
    (checkpoint / "commits" / str(last)).unlink()
    (checkpoint / "commits" / f".{last}.crc").unlink(missing_ok=True)
    replay = run_bronze(spark, cfg, "transactions")
    assert replay.input_rows == first.input_rows  # the batch really was processed again
    assert read_table(spark, bronze_path).count() == after_first
    assert (
        read_table(spark, cfg.paths.table("quarantine", "transactions")).count()
        == first.quarantined_rows
    )

    write_wave(cfg, gen, files, 1)
    second = run_bronze(spark, cfg, "transactions")
    assert read_table(spark, bronze_path).count() == after_first + second.output_rows
    assert second.input_rows == len(files[1])


def test_every_lake_table_exists_before_any_stream_ran(spark, cfg):
    from streaming_jobs.storage.registry import registry
    from streaming_jobs.schemas import STREAMS
    from streaming_jobs.runtime.tables import ensure_lake

    created = ensure_lake(spark, cfg)
    expected = (
        {f"bronze/{s}" for s in STREAMS}
        | {f"quarantine/{s}" for s in STREAMS}
        | {
            "ops/stream_progress",
            "ops/stream_late_rows",
            "ops/stream_failures",
            "ops/alerts",
            "ops/expectations",
            "ops/recon_runs",
            "ops/job_changes",
        }
        | {f"gold/{j}" for j in registry()}
    )
    assert set(created) == expected
    assert all(read_table(spark, cfg.paths.table(*t.split("/"))).count() == 0 for t in expected)
    gold = read_table(spark, cfg.paths.table("gold", "failed_txn_velocity"))
    assert gold.columns == ["user_id", "window_start", "window_end", "failed_count"]
    assert ensure_lake(spark, cfg) == []  # a second call creates nothing


def test_a_table_creation_killed_before_its_first_commit_does_not_block_the_next_run(
    spark, cfg, sample
):
    """Found by the fault harness (docs/reliability.md): a run killed while creating quarantine left
    ``_delta_log`` with only Delta's temporary file, and every later run failed with
    DELTA_TABLE_NOT_FOUND until someone removed the folder."""
    log = cfg.paths.table("quarantine", "transactions") / "_delta_log"
    log.mkdir(parents=True)
    (log / ".00000000000000000000.json.0a1b2c3d.tmp").write_bytes(b"")
    gen, files = sample
    write_wave(cfg, gen, files, 0)
    metrics = run_bronze(spark, cfg, "transactions")
    quarantine = read_table(spark, cfg.paths.table("quarantine", "transactions"))
    assert metrics.quarantined_rows == quarantine.count() > 0
    assert metrics.input_rows == len(files[0])
    assert not any(p.name.startswith(".unborn-log-") for p in log.parent.iterdir())


def test_a_log_file_half_written_by_a_killed_run_does_not_block_the_next_run(spark, cfg, sample):
    """Found by the fault harness (docs/reliability.md): a continuous run killed while writing
    ``offsets/0`` left its hidden temporary file, and Spark 4.2 refused every later start
    ("offsets should be empty on batch 0") until someone removed it."""
    run_bronze(spark, cfg, "transactions")  # nothing landed yet: the checkpoint, no batch
    offsets = cfg.paths.checkpoint("bronze_transactions") / "offsets"
    offsets.mkdir(parents=True, exist_ok=True)
    (offsets / ".0.bd010ad2-61a4-4f3b-849c-76dbf6a40e98.tmp").write_bytes(b"")
    gen, files = sample
    write_wave(cfg, gen, files, 0)
    metrics = run_bronze(spark, cfg, "transactions")
    assert metrics.input_rows == len(files[0])
    assert sorted(p.name for p in offsets.iterdir() if not p.name.endswith(".crc")) == ["0"]


def test_a_table_another_process_creates_is_seen_once_it_commits(spark, tmp_path):
    """Delta's own `DeltaTable.isDeltaTable` answers from the log it cached at its first call: a
    process that asked while another was creating the table (log folder there, no commit yet)
    kept hearing "no table" after the commit. `is_delta_table` reads the log's files."""
    import pandas as pd
    from delta.tables import DeltaTable
    from deltalake import write_deltalake

    from streaming_jobs.core.locations import is_delta_table

    path = tmp_path / "made_elsewhere"
    (path / "_delta_log").mkdir(parents=True)  # the other writer has begun: no commit yet
    assert not is_delta_table(path)
    assert not DeltaTable.isDeltaTable(spark, str(path))  # what Delta caches for this path
    write_deltalake(str(path), pd.DataFrame({"id": [1, 2, 3]}))  # the other writer commits
    assert is_delta_table(path)
    assert sorted(r.id for r in read_table(spark, path).collect()) == [1, 2, 3]
    assert not is_delta_table(tmp_path / "never_made")


def test_a_job_whose_query_does_not_run_names_itself_and_stops_no_other_table(
    spark, cfg, tmp_path, monkeypatch
):
    """The SQL endpoint makes the lake with ``skip_broken``: one broken job file must not keep
    dbt from every other table, and everything else still says which job to fix."""
    from streaming_jobs.runtime.tables import GoldSchemaError, ensure_lake, missing

    folder = tmp_path / "jobs"
    folder.mkdir()
    (folder / "broken_counts.sql").write_text(
        "-- broken_counts: a query that names a column clicks do not have.\n"
        "-- source: clicks\n"
        "-- keys: window_start, window_end\n"
        "-- measures: n\n"
        "-- watermark: 5 minutes\n"
        "select window.start as window_start, window.end as window_end, count(*) as n\n"
        "from events\n"
        "group by window(no_such_column, '5 minutes')\n"
    )
    monkeypatch.setenv("TIDEMARK_JOBS_PATH", str(folder))
    with pytest.raises(GoldSchemaError) as failed:
        ensure_lake(spark, cfg)
    assert f"job broken_counts ({folder / 'broken_counts.sql'}" in str(failed.value)
    assert "cannot be resolved" in str(failed.value)  # Spark's own reason, first line
    assert "tidemark check" in str(failed.value)
    ensure_lake(spark, cfg, skip_broken=True)
    assert missing(cfg) == ["gold/broken_counts"]
