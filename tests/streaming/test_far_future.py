"""One event dated 9999 must not poison a job: quarantined at ingestion; and when a loosened
bound lets it through, the health check says so loudly instead of passing it as "late"."""

from __future__ import annotations

from dataclasses import replace
import re
from datetime import datetime

import pytest

from helpers import dbt, land, txn
from streaming_jobs.storage import ops_tables
from streaming_jobs.storage.lake import read_table
from streaming_jobs.operations.health import check_checkpoint
from streaming_jobs.storage.registry import get_job
from streaming_jobs.runtime.runner import run_bronze, run_job
from streaming_jobs.schemas import STREAMS


def far_future(event_id: str, year: int = 9999) -> dict:
    return {**txn(event_id, "u9", 0), "event_time": f"{year}-12-31T00:00:00.000Z"}


def watermark(cfg, job: str):
    rows = ops_tables.read(
        cfg, "stream_progress", where=f"job = {ops_tables.literal(job)}", columns=["watermark"]
    )
    return max(r["watermark"] for r in rows if r["watermark"]).replace(tzinfo=None)


@pytest.mark.slow
@pytest.mark.long  # CI: the bad-input catalogue's far-future line; make test-long
def test_a_far_future_event_is_quarantined_and_moves_no_watermark(spark, cfg, monkeypatch):
    spec = get_job("failed_txn_velocity")
    land(cfg, "w1.jsonl", [txn(f"a{i}", "u1", i) for i in range(1, 31)] + [far_future("x1")])
    run_bronze(spark, cfg, "transactions")
    run_job(spark, cfg, spec)
    [quarantined] = read_table(spark, cfg.paths.table("quarantine", "transactions")).collect()
    assert '"x1"' in quarantined.raw_line
    assert quarantined.reason.startswith("event_time 9999-12-31 00:00:00 is more than 1 day")
    # at most the real events' latest (minute 30) less the 10-minute delay
    assert watermark(cfg, spec.name) <= datetime(2026, 1, 1, 0, 20)
    assert not [
        f
        for f in check_checkpoint(cfg, spec.name, spec.sources)
        if f.kind in ("watermark_ahead", "late_share")
    ]

    # A stream whose bound was loosened: an event dated 2100 gets through (one dated 9999
    # would crash this job outright: pandas timestamps end in 2262) and poisons the watermark...
    monkeypatch.setitem(STREAMS, "transactions", replace(STREAMS["transactions"], max_ahead=None))
    land(
        cfg,
        "w2.jsonl",
        [txn(f"b{i}", "u1", 30 + i) for i in range(1, 6)] + [far_future("x2", 2100)],
    )
    run_bronze(spark, cfg, "transactions")
    run_job(spark, cfg, spec)
    assert watermark(cfg, spec.name).year == 2100
    found = {f.kind: f for f in check_checkpoint(cfg, spec.name, spec.sources)}
    assert found["watermark_ahead"].severity == "critical"
    # ...and every real event after it is dropped as late, which the health check also says
    land(cfg, "w3.jsonl", [txn(f"c{i}", "u1", 40 + i / 10) for i in range(60)])
    run_bronze(spark, cfg, "transactions")
    late = run_job(spark, cfg, spec).late_rows_dropped
    assert late == 60
    found = {f.kind: f for f in check_checkpoint(cfg, spec.name, spec.sources)}
    assert set(found) >= {"watermark_ahead", "late_share"}

    # the reconciliation does not pass those rows as explained: the watermark check fails the
    # build (blocking), though each of those rows is classed late_dropped
    result = dbt("build", "--select", f"+recon_{spec.name}")
    assert result.returncode != 0
    verdicts = {
        test: verdict
        for verdict, test in re.findall(
            r"\b(PASS|WARN \d+|FAIL \d+|ERROR)\s+(\S+__failed_txn_velocity)\b", result.stdout
        )
    }
    assert verdicts["watermark_plausible__failed_txn_velocity"] == "FAIL 1", result.stdout[-3000:]
    classes = {
        r.recon_class
        for r in read_table(
            spark, cfg.paths.dbt_table("recon", "recon_failed_txn_velocity")
        ).collect()
    }
    assert "late_dropped" in classes
    assert verdicts["no_unexplained_rows__failed_txn_velocity"] == "PASS"
