"""A changed job rebuilt beside the live one while a continuous run keeps the old version
writing, swapped in between two batches with readers never seeing an empty or mixed table, its
gold equal to the new definition computed here and reconciled with 0 unexplained rows; then
rolled back, and rebuilt again with another state partition count (a rescale)."""

from __future__ import annotations

import re
import threading
import time
from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from helpers import dbt, land, txn
from streaming_jobs.core import locations
from streaming_jobs.core.checkpoints import last_committed_batch
from streaming_jobs.core.versions import job_version, read_record
from streaming_jobs.operations import shadow
from streaming_jobs.operations.continuous import run_continuous
from streaming_jobs.operations.rescale import state_partitions
from streaming_jobs.runtime.changes import UnsafeChange
from streaming_jobs.runtime.runner import run_bronze, run_job
from streaming_jobs.storage import ops_tables
from streaming_jobs.storage.lake import spark_path
from streaming_jobs.storage.registry import get_job, streams

JOB = "merchant_counts"
FILE = """-- merchant_counts: transactions per merchant per window.
-- source: transactions
-- keys: merchant, window_start, window_end
-- measures: n
-- watermark: 5 minutes
select merchant, window.start as window_start, window.end as window_end, count(*) as n
from events
group by merchant, window(event_time, '{minutes} minutes')
"""
START = datetime(2026, 1, 1)


def expected(events, minutes: int, watermark_minute: float) -> Counter:
    """Merchant and window -> transactions, for the windows a watermark at
    ``watermark_minute`` closed, from the events themselves."""
    out = Counter()
    for e in events:
        at = datetime.fromisoformat(e["event_time"][:-1])
        offset = int((at - START).total_seconds() // 60)
        start = START + timedelta(minutes=offset - offset % minutes)
        out[(e["merchant"], start, start + timedelta(minutes=minutes))] += 1
    closed = START + timedelta(minutes=watermark_minute)
    return Counter({k: n for k, n in out.items() if k[2] <= closed})


def gold_now(cfg) -> Counter:
    """What a reader of gold sees now (delta-rs: a snapshot of one version)."""
    table = locations.delta_table(cfg.paths.table("gold", JOB)).to_pyarrow_table().to_pylist()
    return Counter(
        {
            (
                r["merchant"],
                r["window_start"].replace(tzinfo=None),
                r["window_end"].replace(tzinfo=None),
            ): r["n"]
            for r in table
        }
    )


def lengths(rows: Counter) -> set[int]:
    return {int((end - start).total_seconds() // 60) for _, start, end in rows}


def wave(cfg, name: str, first_minute: int, count: int) -> list[dict]:
    events = [
        dict(txn(f"{name}{i}", "u1", first_minute + i * 2), merchant=f"m{i % 3}")
        for i in range(count)
    ]
    land(cfg, f"{name}.jsonl", events)
    return events


def wait_for(condition, what: str, seconds: float = 90.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.3)


@pytest.mark.slow
def test_a_changed_job_is_rebuilt_beside_the_live_one_swapped_and_rolled_back(
    spark, cfg, tmp_path, monkeypatch, capsys
):
    from orchestration.cli.main import main as tidemark

    folder = tmp_path / "jobs"
    folder.mkdir()
    path = folder / f"{JOB}.sql"
    monkeypatch.setenv("TIDEMARK_JOBS_PATH", str(folder))
    path.write_text(FILE.format(minutes=10))
    first = wave(cfg, "a", 0, 12)  # minutes 0 .. 22
    run_bronze(spark, cfg, "transactions")
    run_job(spark, cfg, get_job(JOB))
    v1 = read_record(cfg.paths.checkpoint(JOB))["version"]
    assert gold_now(cfg) == expected(first, 10, 22 - 5)

    # the old version keeps writing in a continuous run while the new one is built beside it
    stop = threading.Event()
    outcome = {}

    def host():
        outcome["run"] = run_continuous(
            spark,
            cfg,
            streams=["transactions"],
            jobs=[JOB],
            trigger_seconds=1,
            should_stop=stop.is_set,
        )

    runner = threading.Thread(target=host)
    runner.start()
    try:
        second = wave(cfg, "b", 30, 10)  # minutes 30 .. 48
        wait_for(lambda: gold_now(cfg) == expected(first + second, 10, 48 - 5), "wave b")

        path.write_text(FILE.format(minutes=15))  # a window length: the state cannot take it
        v2 = job_version(get_job(JOB), streams())
        assert v2 != v1

        # bronze gains a wave while the shadow is reconciled: the swap's catch-up streams it
        # into the new version unreconciled, and says so (the next reconciliation covers it)
        from orchestration.recon import gate

        reconcile, late = gate.reconcile_shadow, []

        def reconciled_then_a_wave_lands(*args):
            result = reconcile(*args)
            if late:  # this rebuild's only: later ones are reconciled as they are
                return result
            late.extend(wave(cfg, "l", 50, 5))  # minutes 50 .. 58
            settled = expected(first + second + late, 10, 58 - 5)
            wait_for(lambda: gold_now(cfg) == settled, "the late wave in the live version")
            return result

        monkeypatch.setattr(gate, "reconcile_shadow", reconciled_then_a_wave_lands)

        # readers during the rebuild and the swap: each snapshot the old rows or the new ones
        seen, reading = [], threading.Event()

        def read():
            while not reading.is_set():
                seen.append(gold_now(cfg))

        reader = threading.Thread(target=read)
        reader.start()
        try:
            assert tidemark(["rebuild", JOB]) == 0, capsys.readouterr().err
        finally:
            reading.set()
            reader.join()
        said = capsys.readouterr().out
        # reconciled against its own batch definition before the swap, in tables of its own
        assert re.search(
            rf"{JOB}'s new version reconciled: [1-9][\d,]* rows compared, 0 unexplained", said
        ), said
        assert f"{JOB}: rebuild done, version {v1} -> {v2}" in said, said
        assert f"`tidemark rollback {JOB}`" in said
        caught_up = re.search(r"; (\d+) batch(es)? the new version streamed after its reconc", said)
        assert caught_up and int(caught_up[1]) >= 1, said
        assert len(seen) > 3
        old = expected(first + second, 10, 48 - 5)
        old_with_late = expected(first + second + late, 10, 58 - 5)
        new = expected(first + second + late, 15, 58 - 5)
        assert all(snapshot in (old, old_with_late, new) for snapshot in seen), [
            s for s in seen if s not in (old, old_with_late, new)
        ][:1]
        assert seen[0] == old and seen[-1] == new

        # the continuous run goes on with the new version: the next wave is in 15 minutes
        third = wave(cfg, "c", 60, 6)  # minutes 60 .. 70
        everything = first + second + late + third
        wait_for(lambda: gold_now(cfg) == expected(everything, 15, 70 - 5), "wave c")
    finally:
        stop.set()
        runner.join()
    run = outcome["run"]
    assert run.swapped == [f"{JOB} rebuild {v1} -> {v2}"] and not run.refused
    checkpoint = cfg.paths.checkpoint(JOB)
    assert read_record(checkpoint)["version"] == v2
    assert gold_now(cfg) == expected(everything, 15, 70 - 5)

    # the shadow's reconciliation left the live one's status alone; the new version's own,
    # after the swap: its progress rows are the shadow's, then the run's
    assert not ops_tables.read(cfg, "recon_runs", where=f"job = '{JOB}'")
    result = dbt("build", "--select", f"+recon_{JOB}")
    assert result.returncode == 0, result.stdout[-3000:]
    recon = ops_tables.read(cfg, "recon_runs", where=f"job = '{JOB}'")
    assert recon and recon[-1]["unexplained_rows"] == 0 and recon[-1]["rows_compared"] > 0

    # rollback, as Dagster's rebuild_job runs it: version 1's checkpoint and gold as it left
    # them, the materialization saying so; its code must come back too
    from dagster import DagsterInstance

    from orchestration.definitions import build_definitions

    run = (
        build_definitions()
        .resolve_job_def("rebuild_job")
        .execute_in_process(
            run_config={"ops": {"change_version": {"config": {"job": JOB, "rollback": True}}}},
            instance=DagsterInstance.ephemeral(),
        )
    )
    assert run.success
    [materialized] = run.asset_materializations_for_node("change_version")
    shown = {k: v.value for k, v in materialized.metadata.items()}
    assert (shown["change"], shown["from_version"], shown["to_version"]) == ("rollback", v2, v1)
    assert shown["code"].endswith(
        f"the job's code is still version {v2}: until it is put back, a run refuses a change its "
        f"state cannot take. `tidemark code {JOB}` shows the difference and `tidemark code {JOB} "
        f"--put-back` writes {path} back as that version had it"
    )
    assert materialized.asset_key.path == ["gold", JOB]
    assert gold_now(cfg) == old_with_late
    assert read_record(checkpoint)["version"] == v1
    with pytest.raises(UnsafeChange):
        run_job(spark, cfg, get_job(JOB))  # the code is still version 2
    # a reconciliation meanwhile compares version 1's gold with version 2's definition: it
    # says so, in the terminal and in its record
    result = dbt("build", "--select", f"+recon_{JOB}")
    said = f"{JOB}: warning: gold holds version {v1} of the job (its checkpoint's) and the code is version {v2}"
    assert said in result.stderr, result.stderr[-2000:]
    latest = max(
        ops_tables.read(cfg, "recon_runs", where=f"job = '{JOB}'"), key=lambda r: r["finished_at"]
    )
    assert latest["message"].startswith(f"gold holds version {v1}") and latest["unexplained_rows"]
    # version 1's file, kept in its checkpoint's record since its first run, put back
    capsys.readouterr()
    assert tidemark(["code", JOB]) == 1
    assert "+group by merchant, window(event_time, '10 minutes')" in capsys.readouterr().out
    assert tidemark(["code", JOB, "--put-back"]) == 0
    assert "the job is its checkpoint's version again" in capsys.readouterr().out
    assert path.read_text() == FILE.format(minutes=10)
    run_job(spark, cfg, get_job(JOB))  # version 1 goes on from its checkpoint: wave c
    assert gold_now(cfg) == expected(everything, 10, 70 - 5)

    # the same version rebuilt into 3 state partitions: a rescale, gold unchanged. Its shadow
    # first gets a row its batch definition has not: the reconciliation refuses the swap
    before_partitions = state_partitions(spark, cfg, JOB)
    assert before_partitions and before_partitions != {3}
    batches_before = last_committed_batch(checkpoint)
    shadow.build(spark, cfg, get_job(JOB), partitions=3)
    shadow_gold = spark_path(shadow.shadow_place(cfg, JOB).target)
    spark.sql(
        f"insert into delta.`{shadow_gold}` values "
        "('m9', timestamp'2026-01-01 00:00:00', timestamp'2026-01-01 00:10:00', 1)"
    )
    live_before = gold_now(cfg)
    assert tidemark(["rebuild", JOB, "--partitions", "3"]) == 2
    said = capsys.readouterr()
    assert re.search(
        r"reconciled: [\d,]+ rows compared, 1 unexplained \(.*missing_in_batch 1", said.out
    ), said
    assert f"{JOB}: not swapped: its new version does not reconcile" in said.err, said.err
    assert gold_now(cfg) == live_before and last_committed_batch(checkpoint) == batches_before
    # reconciled again with the shadow's gold unreadable (its log set aside): dbt fails before
    # it writes the recon table, and the first attempt's table is not read as this one's
    log = Path(shadow.shadow_place(cfg, JOB).target) / "_delta_log"
    log.rename(log.with_name("_delta_log.aside"))
    try:
        again = reconcile(cfg, JOB)
    finally:
        log.with_name("_delta_log.aside").rename(log)
    assert (again.compared, again.unexplained, again.passed) == (None, None, False)
    assert again.message.startswith(
        f"the reconciliation of job {JOB}'s new version built no recon table (the one there is "
        "an earlier attempt's) (tidemark-dbt exit "
    ), again.message[:300]
    # the row taken out of the shadow again; swapped without a second reconciliation, as
    # Dagster's rebuild_job does it: the materialization shows what is known, nothing as 0
    spark.sql(f"delete from delta.`{shadow_gold}` where merchant = 'm9'")
    run = (
        build_definitions()
        .resolve_job_def("rebuild_job")
        .execute_in_process(
            run_config={
                "ops": {
                    "change_version": {"config": {"job": JOB, "partitions": 3, "skip_recon": True}}
                }
            },
            instance=DagsterInstance.ephemeral(),
        )
    )
    assert run.success
    [materialized] = run.asset_materializations_for_node("change_version")
    shown = {k: v.value for k, v in materialized.metadata.items()}
    assert (shown["change"], shown["from_version"], shown["to_version"]) == ("rebuild", v1, v1)
    assert shown["recon"] == "reconciliation skipped" and shown["state_partitions"] == 3
    assert "recon_unexplained" not in shown and "unreconciled_batches" not in shown
    assert state_partitions(spark, cfg, JOB) == {3}
    assert gold_now(cfg) == expected(everything, 10, 70 - 5)
    assert last_committed_batch(checkpoint) != batches_before  # the shadow's batches now

    changes = sorted(
        ops_tables.read(cfg, "job_changes", where=f"job = '{JOB}'"), key=lambda r: r["swapped_at"]
    )
    assert [(c["kind"], c["from_version"], c["to_version"]) for c in changes] == [
        ("rebuild", v1, v2),
        ("rollback", v2, v1),
        ("rebuild", v1, v1),
    ]
    assert changes[-1]["state_partitions"] == 3
    # each rebuild's reconciliation before its swap (a rollback has none)
    assert [c["recon_unexplained"] for c in changes] == [0, None, None]
    assert changes[0]["recon_compared"] > 0
    # the late wave: batches swapped in after the reconciliation, as printed; none otherwise
    assert [c["unreconciled_batches"] for c in changes] == [int(caught_up[1]), None, None]
    # nothing of the shadows or plans is left behind
    assert not locations.exists(locations.Location.of(cfg.paths.rebuilds) / JOB / "shadow")
    assert not locations.exists(locations.Location.of(cfg.paths.rebuilds) / JOB / "swap.json")
