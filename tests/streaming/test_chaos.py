"""A few trials of the fault-injection harness (`tools/chaos.py`; the long runs are a command,
their results in docs/reliability.md): SIGKILL at a random instant of an incremental run, a
restore killed right after its swap, alert delivery killed at a random instant, and on the store
a rebuild's swap of versions cut short (and, in `make test-long`, a killed run and a restore cut
short). Each
recovery must need nobody and end with exactly the bronze and gold rows of an uninterrupted
run and a progress row for every committed batch, and every owed notification must reach the
webhook."""

from __future__ import annotations

import os

import pytest

import chaos


def _losses(t, *more: str) -> tuple[int, ...]:
    """A trial's rows lost and doubled, its manual interventions, and ``more`` of its counts."""
    counts = (
        t.events_lost,
        t.events_duplicated,
        t.gold_rows_lost,
        t.gold_rows_duplicated,
        t.manual_interventions,
    )
    return counts + tuple(getattr(t, name) for name in more)


@pytest.mark.slow
def test_killed_runs_and_restores_recover_with_nothing_lost_or_doubled(spark, tmp_path):
    # the killed runs get processes of their own; the others run in the tests' session
    points = ["incremental", "restore.swap", "alerts"]
    trials = chaos.run_trials(points, trials=1, seed=11, work=tmp_path, events=3000, spark=spark)
    assert [t.point for t in trials] == points
    for t in trials:
        assert _losses(t, "alerts_lost", "unreported_batches") == (0,) * 7, t
        assert t.point == "alerts" or t.batches_committed_twice == 0, t
    # a kill between a 2xx answer and its commit re-sends that one notification, no more
    assert trials[2].alerts_reposted <= 1
    summary = chaos.summarize(trials)
    assert [row["trials"] for row in summary] == [1, 1, 1]


def _on_the_store(points, seed, s3_server, tmp_path, monkeypatch, spark):
    """``points``' trials with every trial's data root on the project's S3-compatible server
    (`--store`, a bucket of this test's own)."""
    from streaming_jobs.core.stores import ensure_bucket

    _, s3_cfg = s3_server
    for name, value in (("TIDEMARK_S3_HOME", s3_cfg.s3.home), ("TIDEMARK_S3_PORT", s3_cfg.s3.port)):
        monkeypatch.setenv(name, str(value))  # the killed workers reach the same server
    ensure_bucket(s3_cfg, "chaos-ci")
    monkeypatch.setattr(chaos, "STORE_ROOT", f"s3://chaos-ci/{tmp_path.name}")
    trials = chaos.run_trials(points, trials=1, seed=seed, work=tmp_path, events=3000, spark=spark)
    assert [t.point for t in trials] == points
    for t in trials:
        assert _losses(t, "versions_mixed", "unreported_batches") == (0,) * 7, t
    return trials


@pytest.mark.slow
def test_on_the_store_a_swap_cut_short_is_finished_by_the_next_run(
    spark, s3_server, tmp_path, monkeypatch
):
    """A rebuild's swap cut short while the shadow's checkpoint is copied in place of the live
    one (gold already swapped: readers see the new version whole). No rename on a store: the
    next run must finish it."""
    _on_the_store(["swap.copy"], 13, s3_server, tmp_path, monkeypatch, spark)


@pytest.mark.slow
@pytest.mark.long  # CI's budget (about 2 min); results/chaos-store.json has 21 trials of each
def test_on_the_store_a_killed_run_and_a_restore_cut_short_lose_nothing(
    spark, s3_server, tmp_path, monkeypatch
):
    """The killed run of the first test with its data root on the store (the checkpoint's lease
    instead of a lock), and a restore cut short after copying the savepoint in: the next run
    finishes each. (CI keeps a real kill on the store in the swap trial, the state a kill
    leaves in test_events_by_type's `store` case, and the lease that fences a killed run's
    last commit in test_locations.)"""
    _on_the_store(["incremental", "restore.copy"], 13, s3_server, tmp_path, monkeypatch, spark)
    assert chaos.snapshot(chaos.trial_root(chaos.Bench(tmp_path, 3000, 13), "restore"))["gold"]


@pytest.mark.slow
@pytest.mark.long  # CI's budget: make test-long, or make chaos for many trials
@pytest.mark.skipif(os.geteuid() != 0, reason="the disk_full points mount a small tmpfs (root)")
def test_killed_maintenance_and_full_disks_lose_nothing(spark, tmp_path):
    """Maintenance (OPTIMIZE, VACUUM keeping nothing it may delete, pruning, the archive)
    killed at a random instant, and a disk that fills at a random point of the job (the
    harness's runs cover ingestion too): the next plain run succeeds by itself with every row,
    once, and a run that hit the full disk said so, naming the query, in its error."""
    points = ["maintenance", "disk_full.jobs"]
    trials = chaos.run_trials(points, trials=1, seed=12, work=tmp_path, events=3000, spark=spark)
    assert [t.point for t in trials] == points
    for t in trials:
        assert _losses(t, "lineage_differences") == (0,) * 6, t
    # the progress the lateness replay reads after a killed maintenance and the next one is
    # what an uninterrupted one leaves: per query (ingestion and the job) its batches, input
    # and late drops, and the late rows recorded for folded batches (the job reads FAILED
    # transactions only, so at this size its folded batches may have dropped none)
    assert trials[0].lineage_compared >= 2 * 3
    for t in trials[1:]:
        if t.note != "finished within the space left":
            assert "is full (No space left on device" in t.note, t.note
            assert f"streaming query {chaos.JOB} failed" in t.note, t.note
