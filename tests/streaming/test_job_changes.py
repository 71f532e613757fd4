"""A changed job, checked before any batch: a safe change runs on under its new version; each
unsafe class (window length, key, state schema, watermark, TTL) is refused before any batch with
its message, and the job keeps its checkpoint, its gold and its recorded version."""

from __future__ import annotations

import threading
import time
from collections import Counter
from contextlib import contextmanager
from datetime import datetime, timedelta

import pytest

from helpers import click, land, txn
from streaming_jobs.core import locations
from streaming_jobs.core.checkpoints import last_committed_batch, takes_savepoint_requests
from streaming_jobs.core.versions import job_version, read_record
from streaming_jobs.runtime.changes import UnsafeChange
from streaming_jobs.operations import continuous, health, savepoints
from streaming_jobs.operations.continuous import run_continuous
from streaming_jobs.runtime.runner import run_bronze, run_job
from streaming_jobs.storage import swaps
from streaming_jobs.storage.lake import read_table
from streaming_jobs.storage.registry import get_job, streams

HEADER = """-- merchant_counts: transactions per merchant per 10 minutes{note}.
-- source: transactions
-- keys: merchant, window_start, window_end
-- measures: n
-- watermark: {watermark}
"""
QUERY = """select {key} as merchant, window.start as window_start, window.end as window_end,
       {count} as n
from events
group by {key}, window(event_time, '{length}')
"""
SAFE = "select * from ({inner}) where n >= 1"  # a filter after the aggregation: stateless


def job_file(
    note="", watermark="5 minutes", key="merchant", count="count(*)", length="10 minutes", outer=""
) -> str:
    inner = QUERY.format(key=key, count=count, length=length)
    return HEADER.format(note=note, watermark=watermark) + (
        outer.format(inner=inner) if outer else inner
    )


def counts(events) -> Counter:
    """Merchant and 10-minute window -> transactions, from the events themselves."""
    out = Counter()
    for e in events:
        at = datetime.fromisoformat(e["event_time"][:-1])
        start = at.replace(minute=at.minute - at.minute % 10, second=0, microsecond=0)
        out[(e["merchant"], start, start + timedelta(minutes=10))] += 1
    return out


def until(condition, hosted: dict, what: str, seconds: float = 240) -> None:
    """Wait for ``condition()`` while the hosted run goes on."""
    deadline = time.monotonic() + seconds
    while not condition():
        assert hosted["thread"].is_alive(), f"the run ended before {what}"
        assert time.monotonic() < deadline, f"{what}: not within {seconds:.0f}s"
        time.sleep(1)


@contextmanager
def hosting(spark, cfg, stream: str, job: str):
    """A continuous run of ``stream``'s ingestion and ``job`` in a thread, as `make live` hosts
    them, from when it holds the job's checkpoint until the block ends (then stopped, and its
    `ContinuousRun` put in the dict yielded, under "run"; "thread" is the run's thread)."""
    stop, hosted = threading.Event(), {}

    def host():
        hosted["run"] = run_continuous(
            spark, cfg, streams=[stream], jobs=[job], trigger_seconds=1, should_stop=stop.is_set
        )

    hosted["thread"] = thread = threading.Thread(target=host)
    thread.start()
    try:
        deadline = time.monotonic() + 120
        while not takes_savepoint_requests(cfg.paths.checkpoint(job)):
            assert time.monotonic() < deadline and thread.is_alive()
            time.sleep(0.5)
        yield hosted
    finally:
        stop.set()
        thread.join(timeout=300)


@pytest.mark.slow
def test_a_safe_change_runs_on_and_each_unsafe_one_is_refused_before_any_batch(
    spark, cfg, tmp_path, monkeypatch, capsys
):
    from orchestration.cli.main import main as tidemark

    folder = tmp_path / "jobs"
    folder.mkdir()
    path = folder / "merchant_counts.sql"
    monkeypatch.setenv("TIDEMARK_JOBS_PATH", str(folder))
    path.write_text(job_file())
    first = [dict(txn(f"a{i}", "u1", i * 3), merchant=f"m{i % 2}") for i in range(8)]
    land(cfg, "w1.jsonl", first)
    run_bronze(spark, cfg, "transactions")
    run_job(spark, cfg, get_job("merchant_counts"))
    checkpoint = cfg.paths.checkpoint("merchant_counts")
    v1 = read_record(checkpoint)["version"]
    assert v1 == job_version(get_job("merchant_counts"), streams())
    assert savepoints.take(cfg, "merchant_counts").job_version == v1

    # safe: a new description and a filter after the aggregation. The next wave runs on
    path.write_text(job_file(note=" (edited)", outer=SAFE))
    v2 = job_version(get_job("merchant_counts"), streams())
    assert v2 != v1
    second = [dict(txn(f"b{i}", "u1", 40 + i * 3), merchant=f"m{i % 3}") for i in range(6)]
    land(cfg, "w2.jsonl", second)
    run_bronze(spark, cfg, "transactions")
    run_job(spark, cfg, get_job("merchant_counts"))
    assert read_record(checkpoint)["version"] == v2
    gold = cfg.paths.table("gold", "merchant_counts")
    rows = {
        (r.merchant, r.window_start, r.window_end): r.n for r in read_table(spark, gold).collect()
    }
    # the windows the watermark (55 - 5 minutes) closed: all but [50, 60)
    expected = {
        k: n for k, n in counts(first + second).items() if k[2] <= datetime(2026, 1, 1, 0, 53)
    }
    assert rows == expected

    # the savepoint of v1 is refused under v2, unless the user says so
    assert tidemark(["restore", "merchant_counts"]) == 2
    said = capsys.readouterr().err
    assert f"was taken under version {v1} of the job, and the job is now version {v2}" in said

    # each unsafe change: refused before any batch, gold and checkpoint as they were
    third = [dict(txn("c1", "u1", 75), merchant="m9")]
    land(cfg, "w3.jsonl", third)
    run_bronze(spark, cfg, "transactions")
    committed = last_committed_batch(checkpoint)
    before = sorted(map(tuple, read_table(spark, gold).collect()))
    unsafe = {
        "window": job_file(outer=SAFE, length="15 minutes"),
        "key": job_file(outer=SAFE, key="currency"),
        "state": job_file(outer=SAFE, count="sum(1)"),
        "watermark": job_file(outer=SAFE, watermark="20 minutes"),
    }
    shown = {
        "window": "durations was 10 minutes; now 15 minutes",
        "key": "was merchant, window; now currency, window",
        "state": "was count(1) AS n; now sum(1) AS n",
        "watermark": "was event_time: 5 minutes; now event_time: 20 minutes",
    }
    for what, text in unsafe.items():
        path.write_text(text)
        with pytest.raises(UnsafeChange) as refused:
            run_job(spark, cfg, get_job("merchant_counts"))
        said = str(refused.value)
        assert f"What changed: {what}: " in said, (what, said)
        assert shown[what] in said, (what, said)
        assert f"its version changed from {v2} to " in said and "no batch ran" in said, said
        assert "`tidemark rebuild merchant_counts`" in said, said
        assert last_committed_batch(checkpoint) == committed
        assert read_record(checkpoint)["version"] == v2
        assert sorted(map(tuple, read_table(spark, gold).collect())) == before
        # the health sensor's finding says it too, until a run passes the check
        found = {f.kind: f.message for f in health.check(cfg, "merchant_counts")}
        assert f"What changed: {what}: " in found["job_change_refused"], found
        if what == "window":  # tidemark check says the same, running and recording nothing
            assert tidemark(["check"]) == 1
            printed = capsys.readouterr().out
            assert f"error: job merchant_counts: its version changed from {v2}" in printed
            assert "What changed: window: " in printed, printed
            assert read_record(checkpoint)["version"] == v2

    # a continuous run leaves the refused job out and runs the rest (the watermark change)
    run = run_continuous(
        spark,
        cfg,
        streams=["transactions"],
        jobs=["merchant_counts"],
        trigger_seconds=1,
        max_seconds=5,
    )
    assert len(run.refused) == 1 and "What changed: watermark: " in run.refused[0]
    assert set(run.metrics) == {"bronze_transactions"}
    assert last_committed_batch(checkpoint) == committed

    # put back as it was: the job runs on, and takes the third wave
    path.write_text(job_file(note=" (edited)", outer=SAFE))
    run_job(spark, cfg, get_job("merchant_counts"))
    assert last_committed_batch(checkpoint) > committed
    assert "job_change_refused" not in {f.kind for f in health.check(cfg, "merchant_counts")}

    rows = {
        (r.merchant, r.window_start, r.window_end): r.n for r in read_table(spark, gold).collect()
    }
    # the watermark is now 75 - 5 minutes: [50, 60) closed too
    closed = datetime(2026, 1, 1, 1, 10)
    assert rows == {k: n for k, n in counts(first + second + third).items() if k[2] <= closed}

    # a change the user accepts (a longer watermark: Spark takes it, and the user knows no
    # event came that late): refused, then accepted, and the job runs on over its checkpoint;
    # the fourth wave (105 - 20 minutes) closes [70, 80)
    path.write_text(job_file(outer=SAFE, watermark="20 minutes"))
    with pytest.raises(UnsafeChange):
        run_job(spark, cfg, get_job("merchant_counts"))
    assert tidemark(["accept", "merchant_counts"]) == 0
    v3 = job_version(get_job("merchant_counts"), streams())
    assert read_record(checkpoint)["version"] == v3 != v2
    assert "job_change_refused" not in {f.kind for f in health.check(cfg, "merchant_counts")}
    fourth = [dict(txn("d1", "u1", 105), merchant="m1")]
    land(cfg, "w4.jsonl", fourth)
    run_bronze(spark, cfg, "transactions")
    run_job(spark, cfg, get_job("merchant_counts"))
    rows = {
        (r.merchant, r.window_start, r.window_end): r.n for r in read_table(spark, gold).collect()
    }
    closed = datetime(2026, 1, 1, 1, 20)
    everything = counts(first + second + third + fourth)
    assert rows == {k: n for k, n in everything.items() if k[2] <= closed}

    # under a continuous run that hosts it, as `make live` does: the change its start refused
    # is accepted through the run, which records it between two batches and starts the job;
    # the fifth wave (140 - 30 minutes) closes [80, 110)
    path.write_text(job_file(outer=SAFE, watermark="30 minutes"))
    v4 = job_version(get_job("merchant_counts"), streams())
    fifth = [dict(txn("e1", "u1", 140), merchant="m2")]
    closed = datetime(2026, 1, 1, 1, 50)
    everything = counts(first + second + third + fourth + fifth)
    expected = {k: n for k, n in everything.items() if k[2] <= closed}
    with hosting(spark, cfg, "transactions", "merchant_counts") as hosted:
        import orchestration.cli.operate as operate

        def no_spark(_cfg):
            raise AssertionError("the command started Spark for a change the run makes")

        monkeypatch.setattr(operate, "_spark", no_spark)
        assert tidemark(["accept", "merchant_counts"]) == 0
        said = capsys.readouterr().out
        assert f"version {v4} accepted for its checkpoint (it was {v3}); the continuous " in said
        assert "run that hosts it runs it from its next batch" in said, said
        assert read_record(checkpoint)["version"] == v4
        assert tidemark(["accept", "merchant_counts"]) == 0  # again: nothing asked of the run
        assert f"version {v4}, its checkpoint's: nothing to accept" in capsys.readouterr().out
        land(cfg, "w5.jsonl", fifth)
        until(lambda: len(read_table(spark, gold).collect()) >= len(expected), hosted, "[100, 110)")

        # the file edited under the run: a change the state takes runs from the next batch
        edited = dict(outer="select * from ({inner}) where n >= 0", watermark="30 minutes")
        path.write_text(job_file(**edited))
        v5 = job_version(get_job("merchant_counts"), streams())
        until(lambda: read_record(checkpoint)["version"] == v5, hosted, f"version {v5}")
        # ... and one it cannot take waits, said, while the job runs on at its version: the
        # sixth wave (170 - 30 minutes) closes [110, 140) in 10-minute windows
        path.write_text(job_file(**edited, length="15 minutes"))

        def waiting() -> str | None:
            found = {f.kind: f.message for f in health.check(cfg, "merchant_counts")}
            return found.get("job_change_waiting")

        until(waiting, hosted, "job_change_waiting")
        assert "What changed: window: " in waiting() and f"runs on at version {v5}" in waiting()
        sixth = [dict(txn("f1", "u1", 115), merchant="m3"), dict(txn("f2", "u1", 170))]
        closed = datetime(2026, 1, 1, 2, 20)
        everything = counts(first + second + third + fourth + fifth + sixth)
        expected = {k: n for k, n in everything.items() if k[2] <= closed}
        land(cfg, "w6.jsonl", sixth)
        until(lambda: len(read_table(spark, gold).collect()) >= len(expected), hosted, "[110, 120)")
        assert read_record(checkpoint)["version"] == v5
        path.write_text(job_file(**edited))  # put back: nothing waits
        until(lambda: waiting() is None, hosted, "the waiting change said no more")
    run = hosted["run"]
    assert len(run.refused) == 1 and "What changed: watermark: " in run.refused[0], run.refused
    assert run.accepted == [f"merchant_counts {v3} -> {v4}"] and run.swapped == []
    assert run.applied == [f"merchant_counts {v4} -> {v5}"]
    assert set(run.metrics) == {"bronze_transactions", "merchant_counts"}
    rows = {
        (r.merchant, r.window_start, r.window_end): r.n for r in read_table(spark, gold).collect()
    }
    assert rows == expected
    assert "job_change_refused" not in {f.kind for f in health.check(cfg, "merchant_counts")}


@pytest.mark.slow
def test_a_keyed_jobs_ttl_change_is_refused_before_any_batch_and_a_continuous_run_leaves_it_out(
    spark, cfg, tmp_path, monkeypatch, capsys
):
    """The TTL class, on a keyed job (transformWithState): its state's shape does not change
    with the TTL (a number in the processor), so only its spec tells; keys in state would
    expire under the old TTL while new ones used the new one. The user edits the job's file."""
    from pathlib import Path

    import streaming_jobs.jobs.user_activity_profile as builtin

    folder = tmp_path / "jobs"
    folder.mkdir()
    source = Path(builtin.__file__).read_text()
    assert source.count('name="user_activity_profile"') == 1
    assert source.count('ttl="30 minutes"') == 1
    path = folder / "idle_profile.py"
    path.write_text(source.replace('name="user_activity_profile"', 'name="idle_profile"'))
    monkeypatch.setenv("TIDEMARK_JOBS_PATH", str(folder))

    land(
        cfg, "c1.jsonl", [click(f"k{i}", f"u{i % 3}", i * 4, amount=i) for i in range(9)], "clicks"
    )
    run_bronze(spark, cfg, "clicks")
    run_job(spark, cfg, get_job("idle_profile"))
    checkpoint = cfg.paths.checkpoint("idle_profile")
    gold = cfg.paths.table("gold", "idle_profile")
    v1 = read_record(checkpoint)["version"]
    committed = last_committed_batch(checkpoint)
    before = sorted(map(tuple, read_table(spark, gold).collect()))
    assert len(before) == 3  # one profile per user

    path.write_text(path.read_text().replace('ttl="30 minutes"', 'ttl="60 minutes"'))
    land(cfg, "c2.jsonl", [click("k99", "u9", 50, amount=1.0)], "clicks")
    run_bronze(spark, cfg, "clicks")
    with pytest.raises(UnsafeChange) as refused:
        run_job(spark, cfg, get_job("idle_profile"))
    said = str(refused.value)
    assert "What changed: ttl: was 30 minutes; now 60 minutes" in said, said
    assert "keys in state expire under the old TTL while new ones use the new" in said, said
    assert f"its version changed from {v1} to " in said and "no batch ran" in said, said
    assert "`tidemark rebuild idle_profile`" in said, said
    assert last_committed_batch(checkpoint) == committed
    assert read_record(checkpoint)["version"] == v1
    assert sorted(map(tuple, read_table(spark, gold).collect())) == before

    # a continuous run hosting it leaves it out, and serves the rest
    run = run_continuous(
        spark, cfg, streams=["clicks"], jobs=["idle_profile"], trigger_seconds=1, max_seconds=5
    )
    assert len(run.refused) == 1 and "What changed: ttl: " in run.refused[0], run.refused
    assert set(run.metrics) == {"bronze_clicks"}
    assert last_committed_batch(checkpoint) == committed
    assert sorted(map(tuple, read_table(spark, gold).collect())) == before

    # ... and keeps hosting it, as `make live` does: the rebuild its refusal names is swapped
    # in by the run, which starts the new version; a rollback by the run leaves it out again
    # (the code is still the new version), and the code put back starts it within seconds
    from orchestration.cli.main import main as tidemark

    def users() -> set[str]:
        return {r.user_id for r in read_table(spark, gold).select("user_id").collect()}

    def wait_for(user: str) -> None:
        until(lambda: user in users(), hosted, f"{user} in gold")

    with hosting(spark, cfg, "clicks", "idle_profile") as hosted:
        thread = hosted["thread"]
        v2 = job_version(get_job("idle_profile"), streams())
        # the swap fails once midway (the live checkpoint replaced, its metadata not yet): the
        # run finishes it before the job's query reads the checkpoint, and answers it as made
        failures = []

        def relocate_once(where):
            if not failures:
                failures.append(where)
                raise OSError(f"the store refused a write under {where}")
            return relocate(where)

        relocate = swaps.relocate_state_schemas
        monkeypatch.setattr(swaps, "relocate_state_schemas", relocate_once)
        assert tidemark(["rebuild", "idle_profile", "--skip-recon"]) == 0
        assert len(failures) == 1 and swaps.pending(cfg, "idle_profile") is None
        assert read_record(checkpoint)["version"] == v2
        land(cfg, "c3.jsonl", [click("k100", "u10", 60, amount=2.0)], "clicks")
        wait_for("u10")  # the run started the new version after the swap
        assert users() == {"u0", "u1", "u2", "u9", "u10"}

        assert tidemark(["rollback", "idle_profile"]) == 0
        assert read_record(checkpoint)["version"] == v1
        assert users() == {"u0", "u1", "u2"}  # gold as version 1 left it
        land(cfg, "c4.jsonl", [click("k101", "u11", 70, amount=3.0)], "clicks")
        # bronze takes c4; the job, refused, does not (three of the run's 1 s triggers later)
        bronze = cfg.paths.table("bronze", "clicks")
        until(lambda: read_table(spark, bronze).where("event_id = 'k101'").count(), hosted, "c4")
        time.sleep(3)
        assert users() == {"u0", "u1", "u2"}
        # a file broken meanwhile (its TTL fails at the query's start) keeps it out, and the
        # run goes on
        path.write_text(path.read_text().replace('ttl="60 minutes"', 'ttl="soon"'))

        def left_out() -> str:
            return {f.kind: f.message for f in health.check(cfg, "idle_profile")}.get(
                "job_left_out", ""
            )

        until(lambda: "soon" in left_out(), hosted, "the broken file said left out")
        assert thread.is_alive() and users() == {"u0", "u1", "u2"}
        found = {"job_left_out": left_out()}
        assert "left it out" in found["job_left_out"], found  # alerted while the run is up
        assert "could not start" in found["job_left_out"] and "soon" in found["job_left_out"]
        assert tidemark(["code", "idle_profile", "--put-back"]) == 0
        wait_for("u11")  # version 1 again: it streams what bronze gained since its checkpoint
        assert users() == {"u0", "u1", "u2", "u9", "u10", "u11"}
        found = {f.kind for f in health.check(cfg, "idle_profile")}
        assert not found & {"job_left_out", "job_change_refused"}, found
        # its processor class edited (the state it keeps handled another way), in a module of a
        # user's folder: the run runs on at version 1 and says the new version waits, naming
        # the class; the file put back ends it
        original, edit = path.read_text(), "epochs.forget(watermark_ms, self.ttl_ms)"
        assert original.count(edit) == 1

        def alerts() -> dict[str, str]:
            return {f.kind: f.message for f in health.check(cfg, "idle_profile")}

        path.write_text(original.replace(edit, "epochs.forget(watermark_ms, 2 * self.ttl_ms)"))
        until(lambda: "job_change_waiting" in alerts(), hosted, "the edit said waiting")
        assert "What changed: code: ProfileProcessor changed" in alerts()["job_change_waiting"]
        land(cfg, "c4a.jsonl", [click("k103", "u14", 72, amount=5.0)], "clicks")
        wait_for("u14")
        assert read_record(checkpoint)["version"] == v1
        path.write_text(original)
        until(lambda: "job_change_waiting" not in alerts(), hosted, "the file put back ended it")
        # an accept through the run of code that does not build: refused, why said, and the
        # job runs on at its version
        working = path.read_text()
        path.write_text(working.replace('ttl="30 minutes"', 'ttl="soon"'))
        assert tidemark(["accept", "idle_profile"]) == 2
        assert "ttl='soon' is not an interval" in capsys.readouterr().err
        assert read_record(checkpoint)["version"] == v1
        # one accepted, whose start fails once (the store refuses a write): the command exits
        # 1 saying why, and the run's next try starts the job by itself, ending the alert
        path.write_text(working.replace('ttl="30 minutes"', 'ttl="45 minutes"'))
        v3 = job_version(get_job("idle_profile"), streams())
        start, refusals = continuous._Host.start, []

        def start_refused_once(host, name):
            if name == "idle_profile" and not refusals and host.running.get(name) != v3:
                refusals.append(name)
                raise OSError("the store refused a write under checkpoints/idle_profile")
            return start(host, name)

        monkeypatch.setattr(continuous, "START_RETRY_SECONDS", 3.0)
        monkeypatch.setattr(continuous._Host, "start", start_refused_once)
        assert tidemark(["accept", "idle_profile"]) == 1
        said = capsys.readouterr().err
        assert (
            "idle_profile: the continuous run that hosts it could not start it at its new " in said
        )
        assert "the store refused a write" in said and "tries again every 3s" in said, said
        assert read_record(checkpoint)["version"] == v3 and refusals == ["idle_profile"]
        land(cfg, "c4b.jsonl", [click("k105", "u13", 75, amount=4.0)], "clicks")
        wait_for("u13")  # started again by the run, nothing touched
        assert "job_left_out" not in {f.kind for f in health.check(cfg, "idle_profile")}
    run = hosted["run"]
    assert len(run.refused) == 4 and "What changed: ttl: " in run.refused[1], run.refused
    assert "could not start: " in run.refused[2] and "ttl='soon'" in run.refused[2]
    assert f"version {v3} could not start: the store refused a write" in run.refused[3]
    assert run.swapped == [
        f"idle_profile rebuild {v1} -> {v2}",
        f"idle_profile rollback {v2} -> {v1}",
    ]
    assert run.accepted == [f"idle_profile {v1} -> {v3}"]
    assert run.admitted == [f"idle_profile at version {v1}", f"idle_profile at version {v3}"]
    assert set(run.metrics) == {"bronze_clicks", "idle_profile"}
    assert read_record(checkpoint)["version"] == v3

    # a checkpoint whose keyed state names its schema files in the shadow, as a swap left it
    # before they were relocated: the next run names its own again and runs on
    folder = checkpoint / "state" / "0" / "_metadata" / "v2"
    for name in [n for n in locations.names(folder) if not n.startswith(".")]:
        text = locations.read_text(folder / name).replace(
            "/checkpoints/idle_profile/state/", "/rebuilds/idle_profile/shadow/checkpoint/state/"
        )
        assert "/rebuilds/idle_profile/shadow/" in text
        locations.delete(folder / f".{name}.crc")
        locations.write_bytes(folder / name, text.encode())
    land(cfg, "c5.jsonl", [click("k102", "u12", 80, amount=4.0)], "clicks")
    run_bronze(spark, cfg, "clicks")
    run_job(spark, cfg, get_job("idle_profile"))
    assert users() == {"u0", "u1", "u2", "u9", "u10", "u11", "u14", "u13", "u12"}
