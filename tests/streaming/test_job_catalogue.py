"""Every built-in job: exactly-once across a restart between batches, and state that drains.

On generated data (duplicates, out-of-order, late and malformed lines), each job streams two
waves. Then the last batch's commit is deleted, as a crash between writing the sink and
committing the checkpoint would leave it, and the job runs again: the batch is replayed and the
gold table must be exactly what it was. Then one wave days later in event time moves the
watermark past everything the sample left in state: every operator's state must fall back to
(almost) nothing, so state is bounded by the watermark or the TTL, not by the data seen.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from helpers import write_wave
from streaming_jobs.storage.generator import EPOCH, GeneratorConfig, generate
from streaming_jobs.storage.registry import get_job
from streaming_jobs.storage.lake import read_table
from streaming_jobs.runtime.runner import run_bronze, run_job

BUILT_IN = [
    "failed_txn_velocity",
    "zone_revenue_hourly",
    "order_payment_match",
    "user_sessions",
    "user_activity_profile",
    "events_by_type",
]
LATER = timedelta(days=4)


def _gold(spark, cfg, name) -> list[tuple]:
    return sorted(
        (tuple(r) for r in read_table(spark, cfg.paths.table("gold", name)).collect()), key=repr
    )


# CI runs two shapes (24-hour panes in keyed state, a join); the other four are long (make
# test-long): each job's own test covers its logic in CI
IN_CI = {"failed_txn_velocity", "order_payment_match"}


@pytest.mark.parametrize(
    "name", [n if n in IN_CI else pytest.param(n, marks=pytest.mark.long) for n in BUILT_IN]
)
def test_exactly_once_across_a_restart_and_state_drains(spark, cfg, name):
    spec = get_job(name)
    samples = [
        (gen, generate(gen))
        for gen in (
            GeneratorConfig(stream=source, events=800, files=2, seed=21, users=40)
            for source in spec.sources
        )
    ]
    for wave in range(2):
        for gen, files in samples:
            write_wave(cfg, gen, files, wave)
            run_bronze(spark, cfg, gen.stream)
        run_job(spark, cfg, spec)
    before = _gold(spark, cfg, name)
    assert before, f"{name} wrote nothing: the sample is too small to test it"

    commits = cfg.paths.checkpoint(name) / "commits"
    last = max(int(p.name) for p in commits.iterdir() if p.name.isdigit())
    (commits / str(last)).unlink()
    (commits / f".{last}.crc").unlink(missing_ok=True)
    replay = run_job(spark, cfg, spec)
    assert replay.batches >= 1  # the uncommitted batch ran again...
    assert _gold(spark, cfg, name) == before  # ...and wrote nothing twice

    for source in spec.sources:
        later = GeneratorConfig(
            stream=source,
            events=4,
            files=1,
            seed=22,
            users=2,
            start=EPOCH + LATER,
            late_share=0.0,
            duplicate_share=0.0,
            malformed_share=0.0,
            file_prefix="later",
        )
        write_wave(cfg, later, generate(later), 0)
        run_bronze(spark, cfg, source)
    run_job(spark, cfg, spec)

    progress = (
        read_table(spark, cfg.paths.table("ops", "stream_progress"))
        .where(f"job = '{name}'")
        .orderBy("ts", "batch_id")
        .collect()
    )
    peak = max(r.state_rows for r in progress)
    final = progress[-1]
    assert final.watermark >= (EPOCH + LATER).replace(tzinfo=None) - timedelta(hours=1)
    # what is left is the state of the few later events, not the sample's
    assert final.state_rows <= 8 * len(spec.sources) * 4 < peak, (
        f"{name}: {final.state_rows} state rows left after the watermark passed the sample "
        f"(peak {peak}): {[(op.operator, op.rows) for op in final.state_operators]}"
    )
