"""Declared expectations: warn counts, quarantine moves the row with the rule as its reason,
fail stops the batch before it commits, with the rule and a failing row in the error."""

from __future__ import annotations

from dataclasses import replace

import pytest

from helpers import land, txn
from streaming_jobs.storage import ops_tables
from streaming_jobs.storage.lake import read_table
from streaming_jobs.storage.registry import get_job
from streaming_jobs.runtime.runner import StreamRunError, run_bronze, run_job
from streaming_jobs.schemas import STREAMS, Expectation

CURRENCY = Expectation("known_currency", "currency in ('USD', 'EUR')", "quarantine")
POSITIVE = Expectation("positive_amount", "amount > 0", "warn")
NO_TEST = Expectation("no_test_merchant", "merchant <> 'TEST'", "fail")

JOB = """-- failures_per_merchant: FAILED transactions per merchant per 10 minutes.
-- source: transactions
-- keys: merchant, window_start, window_end
-- measures: failures
-- watermark: 5 minutes
-- expect few_failures: failures < 5
-- expect real_merchant: merchant <> 'BAD' on violation fail
select merchant, window.start as window_start, window.end as window_end, count(*) as failures
from events where status = 'FAILED'
group by merchant, window(event_time, '10 minutes')
"""


def results(cfg, query: str) -> dict[tuple[str, int], tuple[int, int]]:
    """(rule, batch) -> (rows checked, rows failed), from ops/expectations."""
    rows = ops_tables.read(cfg, "expectations", where=f"job = {ops_tables.literal(query)}")
    return {(r["rule"], r["batch_id"]): (r["rows_checked"], r["rows_failed"]) for r in rows}


@pytest.fixture
def guarded(monkeypatch):
    stream = replace(STREAMS["transactions"], expectations=(CURRENCY, POSITIVE, NO_TEST))
    monkeypatch.setitem(STREAMS, "transactions", stream)
    return stream


@pytest.mark.slow
def test_stream_expectations_warn_quarantine_and_fail(spark, cfg, guarded, monkeypatch):
    events = [txn(f"e{i}", "u1", i) for i in range(10)]
    for i in (2, 5):
        events[i]["currency"] = "XXX"
    for i in (5, 6, 7):
        events[i]["amount"] = -1.0
    path = land(cfg, "w1.jsonl", events)
    run_bronze(spark, cfg, "transactions")

    bronze = {
        r.event_id for r in read_table(spark, cfg.paths.table("bronze", "transactions")).collect()
    }
    assert bronze == {f"e{i}" for i in range(10)} - {"e2", "e5"}
    quarantined = read_table(spark, cfg.paths.table("quarantine", "transactions")).collect()
    lines = path.read_bytes().splitlines()
    assert sorted((r.raw_bytes, r.reason) for r in quarantined) == [
        (bytes(lines[i]), "expectation known_currency failed: currency in ('USD', 'EUR')")
        for i in (2, 5)
    ]
    # counted on every valid row of the batch, quarantined ones included
    assert results(cfg, "bronze_transactions") == {
        ("known_currency", 0): (10, 2),
        ("positive_amount", 0): (10, 3),
        ("no_test_merchant", 0): (10, 0),
    }

    # a 'fail' rule: the batch stops before anything is written, the row is in the error
    bad = [txn("t1", "u2", 20), dict(txn("t2", "u2", 21), merchant="TEST")]
    land(cfg, "w2.jsonl", bad)
    with pytest.raises(StreamRunError) as raised:
        run_bronze(spark, cfg, "transactions")
    message = str(raised.value)
    assert (
        "stream transactions (batch 1): expectation no_test_merchant (merchant <> 'TEST')"
        in message
        and '"event_id":"t2"' in message
        and "nothing of the batch was committed" in message
    )
    assert read_table(spark, cfg.paths.table("bronze", "transactions")).count() == 8
    assert read_table(spark, cfg.paths.table("quarantine", "transactions")).count() == 2

    # made a warning: the same batch runs again and commits, each line once
    monkeypatch.setitem(
        STREAMS,
        "transactions",
        replace(guarded, expectations=(CURRENCY, POSITIVE, replace(NO_TEST, action="warn"))),
    )
    run_bronze(spark, cfg, "transactions")
    assert read_table(spark, cfg.paths.table("bronze", "transactions")).count() == 10
    assert results(cfg, "bronze_transactions")[("no_test_merchant", 1)] == (2, 1)


@pytest.mark.slow
def test_job_expectations_count_per_batch_and_fail_before_commit(
    spark, cfg, tmp_path, monkeypatch, guarded
):
    folder = tmp_path / "jobs"
    folder.mkdir()
    (folder / "failures_per_merchant.sql").write_text(JOB)
    monkeypatch.setenv("TIDEMARK_JOBS_PATH", str(folder))
    spec = get_job("failures_per_merchant")
    assert [(e.name, e.action) for e in spec.expectations] == [
        ("few_failures", "warn"),
        ("real_merchant", "fail"),
    ]
    # m1: 7 failures in [0,10), m2: 2; the watermark (31 - 5) closes both windows
    events = [dict(txn(f"a{i}", "u1", i), merchant="m1") for i in range(7)]
    events += [dict(txn(f"b{i}", "u1", i), merchant="m2") for i in range(2)]
    events += [dict(txn("late", "u1", 31), merchant="m3")]
    land(cfg, "w1.jsonl", events)
    run_bronze(spark, cfg, "transactions")
    run_job(spark, cfg, spec)
    gold = {
        r.merchant: r.failures
        for r in read_table(spark, cfg.paths.table("gold", spec.name)).collect()
    }
    assert gold == {"m1": 7, "m2": 2}
    counted = results(cfg, spec.name)
    # the rows the job emitted, over its batches: 2 checked, 1 (m1's 7) failing few_failures
    checked = sum(v[0] for (rule, _), v in counted.items() if rule == "few_failures")
    failed = sum(v[1] for (rule, _), v in counted.items() if rule == "few_failures")
    assert (checked, failed) == (2, 1)
    assert sum(v[1] for (rule, _), v in counted.items() if rule == "real_merchant") == 0

    # in Dagster: a check per expectation, reported by the expectations sensor
    from dagster import AssetCheckKey, AssetKey, DagsterInstance, build_sensor_context

    from orchestration.definitions import build_definitions
    from orchestration.defs.ops.sensors import expectations_sensor
    from orchestration.lib.resources import TidemarkResource

    defs = build_definitions()
    repository = defs.get_repository_def()
    gold, bronze = AssetKey(["gold", spec.name]), AssetKey(["bronze", "transactions"])
    assert {
        AssetCheckKey(gold, "expect_few_failures"),
        AssetCheckKey(gold, "expect_real_merchant"),
        AssetCheckKey(bronze, "expect_known_currency"),
        AssetCheckKey(bronze, "expect_no_test_merchant"),
    } <= set(repository.asset_graph.asset_check_keys)

    def context(cursor=None):
        return build_sensor_context(
            instance=DagsterInstance.ephemeral(),
            repository_def=repository,
            cursor=cursor,
            resources={"tidemark": TidemarkResource(data_root=str(cfg.data_root))},
        )

    tick = expectations_sensor(context())
    verdicts = {
        (e.asset_key.path[-1], e.check_name): e
        for e in tick.asset_events
        if hasattr(e, "check_name")
    }
    last_batch = max(b for (rule, b) in counted if rule == "few_failures")
    expected_failed = counted[("few_failures", last_batch)][1]
    few = verdicts[(spec.name, "expect_few_failures")]
    assert few.passed == (expected_failed == 0)
    assert few.metadata["rows_failed"].value == expected_failed
    assert verdicts[("transactions", "expect_known_currency")].passed
    observed = [e for e in tick.asset_events if not hasattr(e, "check_name")]
    assert {e.asset_key for e in observed} == {gold, bronze}
    # nothing new since: nothing reported
    assert expectations_sensor(context(tick.cursor)).asset_events == []

    land(
        cfg,
        "w2.jsonl",
        [dict(txn("x1", "u1", 40), merchant="BAD"), dict(txn("x2", "u1", 60), merchant="m1")],
    )
    run_bronze(spark, cfg, "transactions")
    before = read_table(spark, cfg.paths.table("gold", spec.name)).count()
    with pytest.raises(StreamRunError) as raised:
        run_job(spark, cfg, spec)
    assert "job failures_per_merchant: expectation real_merchant (merchant <> 'BAD')" in str(
        raised.value
    ) and '"merchant":"BAD"' in str(raised.value)
    assert read_table(spark, cfg.paths.table("gold", spec.name)).count() == before
    # failed twice more, the job is held, and the hold names what its batch reads, by the
    # table's name. The BAD window [40, 50) closes when x2 (60) moves the watermark: Spark emits
    # it in the batch after the one that read w2, which reads no new bronze version
    from streaming_jobs.storage.failures import held

    for _ in range(2):
        with pytest.raises(StreamRunError):
            run_job(spark, cfg, spec)
    hold = held(cfg, spec.name)
    assert hold is not None
    assert "reads bronze/transactions: no new version (a batch that moves time on: it emits " in (
        hold.message()
    ), hold.message()


@pytest.mark.slow
def test_a_batch_that_fails_three_times_holds_its_query_until_released(
    spark, cfg, guarded, monkeypatch
):
    from orchestration.cli.main import main as tidemark
    from streaming_jobs.storage.failures import HOLD_AFTER, held
    from streaming_jobs.operations.health import check

    land(cfg, "w1.jsonl", [txn(f"e{i}", "u1", i) for i in range(4)])
    run_bronze(spark, cfg, "transactions")
    bronze = cfg.paths.table("bronze", "transactions")
    land(cfg, "w2.jsonl", [txn("t1", "u2", 20), dict(txn("t2", "u2", 21), merchant="TEST")])
    # the 'fail' rule stops batch 1 each time, before anything is written
    for attempt in range(HOLD_AFTER):
        with pytest.raises(StreamRunError, match="expectation no_test_merchant"):
            run_bronze(spark, cfg, "transactions")
        assert (held(cfg, "bronze_transactions") is None) == (attempt < HOLD_AFTER - 1)
    failures = ops_tables.read(cfg, "stream_failures", where="job = 'bronze_transactions'")
    assert [r["batch_id"] for r in failures] == [1] * HOLD_AFTER

    # held: the next run refuses before starting the query, naming the batch, the error, the fix
    with pytest.raises(StreamRunError) as refused:
        run_bronze(spark, cfg, "transactions")
    message = str(refused.value)
    for part in (
        "bronze_transactions: held on batch 1, which failed 3 times in a row",
        "expectation no_test_merchant",
        "keeps its last good commit (batch 0)",
        "tidemark release bronze_transactions",
        # where the row is: the one file batch 1 reads, from the checkpoint's own log
        f"Batch 1 reads 1 landed file(s): {cfg.paths.landing_dir('transactions') / 'w2.jsonl'}.",
    ):
        assert part in message, message
    assert len(ops_tables.read(cfg, "stream_failures")) == HOLD_AFTER  # no fourth attempt
    assert read_table(spark, bronze).count() == 4  # the last good commit stays
    kinds = {f.kind: f.message for f in check(cfg, "bronze_transactions")}
    assert "query_failed" not in kinds and "held on batch 1" in kinds["job_held"]
    # a continuous run leaves the held query out and runs the others
    from streaming_jobs.operations.continuous import run_continuous

    with pytest.raises(StreamRunError, match="every query is held"):
        run_continuous(spark, cfg, streams=["transactions"], max_seconds=5)
    run = run_continuous(
        spark,
        cfg,
        streams=["transactions"],
        jobs=["failed_txn_velocity"],
        trigger_seconds=1,
        max_seconds=6,
    )
    assert run.held == ["bronze_transactions"] and set(run.metrics) == {"failed_txn_velocity"}
    assert run.metrics["failed_txn_velocity"].input_rows == 4  # bronze's rows, batch 0's

    # released: the next run tries the batch again (and fails on the same row, not on the hold)
    assert tidemark(["release", "bronze_transactions"]) == 0
    assert held(cfg, "bronze_transactions") is None
    assert {f.kind for f in check(cfg, "bronze_transactions")} >= {"query_failed"}
    with pytest.raises(StreamRunError, match="expectation no_test_merchant"):
        run_bronze(spark, cfg, "transactions")
    # the cause fixed (the rule made a warning): the batch commits and nothing is held
    monkeypatch.setitem(
        STREAMS,
        "transactions",
        replace(guarded, expectations=(CURRENCY, POSITIVE, replace(NO_TEST, action="warn"))),
    )
    run_bronze(spark, cfg, "transactions")
    assert read_table(spark, bronze).count() == 6
    assert held(cfg, "bronze_transactions") is None
    assert not {"job_held", "query_failed"} & {f.kind for f in check(cfg, "bronze_transactions")}


CENTS = """-- cents_per_merchant: transaction cents per merchant per 10 minutes.
-- source: transactions
-- keys: merchant, window_start, window_end
-- measures: cents
-- watermark: 5 minutes
select merchant, window.start as window_start, window.end as window_end,
       sum(cast(amount * 100 as int)) as cents
from events
group by merchant, window(event_time, '10 minutes')
"""


@pytest.mark.slow
def test_a_held_job_names_the_row_its_batch_fails_on(spark, cfg, tmp_path, monkeypatch):
    """A valid but large amount overflows the job's int cast in every try of its batch: the failure
    that holds the job searches the batch's bronze rows and names that one row, its version and
    the error it gives alone; the failures before it search nothing."""
    from streaming_jobs.core.delta_log import latest_version
    from streaming_jobs.storage.failures import HOLD_AFTER, held

    folder = tmp_path / "jobs"
    folder.mkdir()
    (folder / "cents_per_merchant.sql").write_text(CENTS)
    monkeypatch.setenv("TIDEMARK_JOBS_PATH", str(folder))
    spec = get_job("cents_per_merchant")
    land(cfg, "w1.jsonl", [txn(f"a{i}", "u1", i, amount=1.5) for i in range(4)])
    run_bronze(spark, cfg, "transactions")
    run_job(spark, cfg, spec)
    # the huge amount sits among 40 ordinary rows of the next file
    wave = [txn(f"b{i}", "u2", 12 + i / 10, amount=2.0) for i in range(40)]
    wave.insert(27, txn("huge", "u3", 14, amount=1e8))  # 1e10 cents: past an int
    land(cfg, "w2.jsonl", wave)
    run_bronze(spark, cfg, "transactions")
    version = latest_version(cfg.paths.table("bronze", "transactions"))
    for _ in range(HOLD_AFTER):
        with pytest.raises(StreamRunError, match="CAST_OVERFLOW"):
            run_job(spark, cfg, spec)
    failures = ops_tables.read(cfg, "stream_failures", where="job = 'cents_per_merchant'")
    located = [r["located"] for r in sorted(failures, key=lambda r: r["failed_at"])]
    assert located[:-1] == [None] * (HOLD_AFTER - 1) and located[-1], located
    hold = held(cfg, spec.name)
    assert hold is not None and hold.located == located[-1]
    said = hold.message()
    assert "the job fails on this row alone: bronze/transactions: " in said, said
    assert f'version {version} {{"event_id": "huge"' in said, said
    assert "CAST_OVERFLOW" in said.split("fails on this row alone")[1], said
    assert "on the 41 bronze rows batch" in said, said
