"""`tidemark live`'s status line and its stop count each job's runs of the session by outcome: a
failure is always shown, and a run in flight is said to be running, not lumped with the rest."""

from orchestration.cli.live import _run_counts, session_runs


def runs(job: str, *statuses: str) -> list[dict]:
    return [
        {"jobName": job, "status": s, "runId": f"{i:08d}-{job}"} for i, s in enumerate(statuses)
    ]


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


def test_the_sessions_runs_are_tallied_and_a_failed_scheduled_run_fails_live():
    """At its stop `tidemark live` says every job's runs of the session; a failed savepoint,
    maintenance or reconciliation run makes it exit 1 by name, where the status lines only
    showed it in passing. A killed continuous run (restarted by the sensor) does not, nor does
    the final reconciliation, whose failure is said on its own."""
    seen = (
        runs("savepoint_job", "SUCCESS", "FAILURE")
        + runs("continuous_streaming_job", "FAILURE", "CANCELED")
        + runs("reconciliation_job", "SUCCESS", "FAILURE", "FAILURE")
        + runs("maintenance_job", "SUCCESS")
    )
    tally, failed = session_runs(seen, said=("00000002-reconciliation_job",))
    assert tally == (
        "continuous_streaming_job 0 ok, 1 failed, 1 canceled; maintenance_job 1 ok, 0 failed; "
        "reconciliation_job 1 ok, 2 failed; savepoint_job 1 ok, 1 failed"
    )
    assert failed == ["savepoint_job 00000001", "reconciliation_job 00000001"]
