"""`tidemark live`'s status line counts each job's runs by outcome: a failure is always shown,
and a run in flight is said to be running, not lumped with the rest."""

from orchestration.cli.live import _run_counts


def runs(job: str, *statuses: str) -> list[dict]:
    return [{"jobName": job, "status": s} for s in statuses]


def test_a_failed_savepoint_run_is_shown():
    seen = runs("savepoint_job", "SUCCESS", "FAILURE", "SUCCESS") + runs("x", "FAILURE")
    assert _run_counts(seen, "savepoint_job") == "2 ok, 1 failed"


def test_runs_in_flight_are_running_or_queued():
    seen = runs("reconciliation_job", "STARTED", "QUEUED", "SUCCESS", "CANCELED", "STARTING")
    assert (
        _run_counts(seen, "reconciliation_job") == "1 ok, 0 failed, 2 running, 1 queued, 1 canceled"
    )


def test_no_runs_yet():
    assert _run_counts([], "reconciliation_job") == "0 ok, 0 failed"
