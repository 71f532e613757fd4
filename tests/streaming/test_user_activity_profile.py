"""user_activity_profile (keyed state, event-time TTL) against a plain-Python profile builder."""

from __future__ import annotations

import random
from datetime import datetime, timedelta

import pytest

from helpers import by_text, click, clicks_per_user, dbt, land
from streaming_jobs.storage.registry import get_job
from streaming_jobs.storage.lake import read_table
from streaming_jobs.runtime.runner import run_bronze, run_job

T0 = datetime(2026, 1, 1)
TTL = timedelta(minutes=30)


def profiles(events) -> dict:
    """Per user: the last run of sorted distinct clicks with no pause longer than the TTL."""
    out = {}
    for user, clicks in clicks_per_user(events).items():
        current = [clicks[0]]
        for t, amount in clicks[1:]:
            if t - current[-1][0] > TTL:
                current = []
            current.append((t, amount))
        first, last = current[0][0], current[-1][0]
        out[user] = (
            len(current),
            round(sum(a for _, a in current), 6),
            (last - first).total_seconds(),
            first,
            last,
            last + TTL,
        )
    return out


def _got(rows) -> dict:
    return {
        r.user_id: (
            r.visits,
            round(r.total_spend, 6),
            r.active_seconds,
            r.first_activity,
            r.last_activity,
            r.expires_at,
        )
        for r in rows
    }


@pytest.mark.parametrize("seed", [1, 2])
def test_build_on_static_clicks_equals_plain_python(spark, seed):
    rng = random.Random(seed)
    events = []
    for i in range(150):
        e = click(
            f"c{i}",
            f"u{rng.randint(1, 5)}",
            rng.uniform(0, 400),
            amount=rng.choice([0.0, 0.0, round(rng.uniform(1, 50), 2)]),
        )
        events.append(e)
        if i % 13 == 0:
            events.append(dict(e))  # exact duplicate
    frame = spark.createDataFrame(
        [
            (e["event_id"], e["user_id"], datetime.fromisoformat(e["event_time"][:-1]), e["amount"])
            for e in events
        ],
        "event_id string, user_id string, event_time timestamp, amount double",
    )
    assert _got(get_job("user_activity_profile").apply(frame).collect()) == profiles(events)


# wave 1 (u1's click at 100 first in the file): u1 has epochs [40..65] and [100], 35 min apart;
#   watermark 100 - 10 = 90.
# wave 2: u1 at 92 is on time and bridges them (27 and 8 min); u1 at 30 is late (behind 90) and
#   dropped; u2 returns at 200 after 150 idle minutes: a new profile. Watermark 190: u1 (last
#   click 100) and u3 (20) are idle past the TTL and leave state; u2 stays.
WAVE_1 = [
    click("a5", "u1", 100),
    click("a1", "u1", 40),
    click("a2", "u1", 50, 5.0),
    click("a3", "u1", 65),
    click("a3", "u1", 65),
    click("b1", "u2", 5),
    click("b2", "u2", 50, 3.5),
    click("c1", "u3", 20),
]
WAVE_2 = [click("a4", "u1", 92, 2.0), click("a0", "u1", 30, 9.0), click("b3", "u2", 200, 1.0)]
LATE = {"a0"}


def stream_both_waves(spark, cfg):
    spec, late = get_job("user_activity_profile"), 0
    for name, events in (("w1.jsonl", WAVE_1), ("w2.jsonl", WAVE_2)):
        land(cfg, name, events, stream="clicks")
        run_bronze(spark, cfg, "clicks")
        late += run_job(spark, cfg, spec).late_rows_dropped
    return spec, late


def test_stream_upserts_profiles_merges_out_of_order_clicks_and_forgets_idle_users(spark, cfg):
    spec, late = stream_both_waves(spark, cfg)
    on_time = [e for e in WAVE_1 + WAVE_2 if e["event_id"] not in LATE]
    got = _got(read_table(spark, cfg.paths.table("gold", spec.name)).collect())
    assert got == profiles(on_time)
    assert got["u1"][0] == 5  # 40, 50, 65, 92, 100: one profile, bridged by the click at 92
    assert got["u2"][0] == 1  # came back after the TTL: started from zero
    assert late == len(LATE)

    checkpoint = str(cfg.paths.checkpoint(spec.name))
    operator = {
        r.operatorName: r.operatorId
        for r in spark.read.format("state-metadata").load(checkpoint).collect()
    }
    state = (
        spark.read.format("statestore")
        .option("operatorId", operator["transformWithStateInPandasExec"])
        .option("stateVarName", "epochs")
        .load(checkpoint)
        .collect()
    )
    watermark = T0 + timedelta(minutes=190)
    still_active = {u for u, p in profiles(on_time).items() if p[5] > watermark}
    assert {r.key.user_id for r in state} == still_active == {"u2"}


def test_a_checkpoint_recorded_by_text_runs_on_and_its_savepoint_restores(spark, cfg):
    """A checkpoint of tidemark 478b91e, whose record holds the text digests of modules that
    imported pandas at the top then: the next run goes on, no refusal, and records the current
    version; a savepoint taken then restores without --any-version, and gold comes back."""
    from orchestration.cli.main import main as tidemark
    from streaming_jobs.core.versions import job_version, read_record, write_record
    from streaming_jobs.operations import savepoints
    from streaming_jobs.storage.registry import streams

    spec = get_job("user_activity_profile")
    checkpoint = cfg.paths.checkpoint(spec.name)
    land(cfg, "w1.jsonl", WAVE_1, stream="clicks")
    run_bronze(spark, cfg, "clicks")
    run_job(spark, cfg, spec)
    old = by_text(spec.name, read_record(checkpoint)["shape"])
    write_record(checkpoint, old)
    point = savepoints.take(cfg, spec.name)
    assert point.job_version == old["version"] != job_version(spec, streams())

    land(cfg, "w2.jsonl", WAVE_2, stream="clicks")
    run_bronze(spark, cfg, "clicks")
    late = run_job(spark, cfg, spec).late_rows_dropped
    on_time = [e for e in WAVE_1 + WAVE_2 if e["event_id"] not in LATE]
    gold = cfg.paths.table("gold", spec.name)
    assert _got(read_table(spark, gold).collect()) == profiles(on_time)
    assert late == len(LATE)
    assert read_record(checkpoint)["version"] == job_version(spec, streams())

    # the savepoint (recorded by text) back, then wave 2 again from its state
    assert tidemark(["restore", spec.name]) == 0
    assert read_record(checkpoint)["version"] == old["version"]
    assert _got(read_table(spark, gold).collect()) == profiles(WAVE_1)
    run_job(spark, cfg, spec)
    assert _got(read_table(spark, gold).collect()) == profiles(on_time)
    assert read_record(checkpoint)["version"] == job_version(spec, streams())


@pytest.mark.slow
@pytest.mark.long  # CI's budget (about 4 min): docs/testing.md names what CI keeps
@pytest.mark.own_sql
def test_recon_explains_the_late_click_and_matches_the_rest(spark, endpoint_cfg):
    cfg = endpoint_cfg  # two builds: one warm JVM for them (conftest)
    stream_both_waves(spark, cfg)
    result = dbt("build", "--select", "+recon_user_activity_profile")
    assert result.returncode == 0, result.stdout[-3000:]
    recon = read_table(spark, cfg.paths.dbt_table("recon", "recon_user_activity_profile"))
    got = {r.user_id: r.recon_class for r in recon.collect()}
    truth, on_time = (
        profiles(WAVE_1 + WAVE_2),
        profiles([e for e in WAVE_1 + WAVE_2 if e["event_id"] not in LATE]),
    )
    expected = {u: "match" if truth[u] == on_time[u] else "late_dropped" for u in truth}
    assert got == expected == {"u1": "late_dropped", "u2": "match", "u3": "match"}

    # One more batch, then a build of the job's models alone (what the automation requests
    # after an incremental run): the progress view it does not rebuild is first pinned to this
    # build's position (macros/progress.sql), so the new user's click counts as streamed.
    land(cfg, "w3.jsonl", [click("d1", "u4", 210, 4.0)], stream="clicks")
    run_bronze(spark, cfg, "clicks")
    run_job(spark, cfg, get_job("user_activity_profile"))
    result = dbt(
        "build",
        "--exclude-resource-type",
        "unit_test",
        "--select",
        "int_user_activity_profile__batch",
        "recon_user_activity_profile",
    )
    assert result.returncode == 0, result.stdout[-3000:]
    assert "stg_stream_progress" not in result.stdout  # not built by this invocation
    recon = read_table(spark, cfg.paths.dbt_table("recon", "recon_user_activity_profile"))
    assert {r.user_id: r.recon_class for r in recon.collect()} == {**expected, "u4": "match"}
