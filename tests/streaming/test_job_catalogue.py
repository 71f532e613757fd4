"""Every built-in job: exactly-once across a restart between batches, and state that drains.

On generated data (duplicates, out-of-order, late and malformed lines), each job streams two
waves. Then the newest batch that wrote gold rows loses its checkpoint commit, as a crash
between writing the sink and committing the checkpoint would leave it, and the job runs again:
the batch is replayed and the gold table must be exactly what it was. Then one wave days later in event time moves the
watermark past everything the sample left in state: every operator's state must fall back to
(almost) nothing, so state is bounded by the watermark or the TTL, not by the data seen.
"""

from __future__ import annotations

from datetime import timedelta

import chaos
import pytest

from helpers import write_wave
from streaming_jobs.storage.generator import EPOCH, GeneratorConfig, generate
from streaming_jobs.storage.registry import get_job
from streaming_jobs.storage.lake import read_table
from streaming_jobs.runtime.runner import run_bronze, run_job
from streaming_jobs.core.delta_log import sink_app_id
from streaming_jobs.core.checkpoints import query_id
from streaming_jobs.core.delta_log import commit_versions, latest_version, rows_written, txn_of

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


def _rewind_to_last_write(cfg, spec) -> int:
    """Delete the checkpoint's record of the newest batch that committed rows to gold, and of
    every batch after it; returns that batch's id."""
    checkpoint = cfg.paths.checkpoint(spec.name)
    target = cfg.paths.table("gold", spec.name)
    app = sink_app_id(spec, query_id(checkpoint))
    written = [
        txn_of(target, v, app)
        for v in commit_versions(target)
        if txn_of(target, v, app) is not None
        and rows_written(target, v - 1)[0] > rows_written(target, v)[0]  # commit v's own rows
    ]
    assert written, f"{spec.name}: no batch wrote rows"
    batch = max(written)
    for folder, first in (("commits", batch), ("offsets", batch + 1)):
        for path in (checkpoint / folder).iterdir():
            if path.name.isdigit() and int(path.name) >= first:
                path.unlink()
                (checkpoint / folder / f".{path.name}.crc").unlink(missing_ok=True)
    return batch


# CI runs three shapes (24-hour panes in keyed state, a join, and the update-mode job's MERGE);
# the other three are long (make test-long): each job's own test covers its logic in CI
IN_CI = {"failed_txn_velocity", "order_payment_match", "user_activity_profile"}


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

    # the crash: the newest batch that wrote rows to gold committed there, and then the run
    # died before its checkpoint recorded it (so no later batch was planned either)
    target = cfg.paths.table("gold", name)
    versions = latest_version(target)
    replayed = _rewind_to_last_write(cfg, spec)
    assert chaos.gold_ahead(cfg.data_root, name)  # the chaos harness's measure sees the crash
    replay = run_job(spark, cfg, spec)
    assert replay.batches >= 1  # the uncommitted batch ran again...
    assert _gold(spark, cfg, name) == before  # ...and wrote nothing twice
    app = sink_app_id(spec, query_id(cfg.paths.checkpoint(name)))
    new = range(versions + 1, latest_version(target) + 1)
    assert all(txn_of(target, v, app) != replayed for v in new)  # no second commit of it

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
