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


def test_the_wait_for_caught_up_queries_names_those_still_behind(tmp_path):
    """`tidemark live` waits, after the landing stops, for every query's report of having read
    everything. While it waits it says which queries have none yet, and when its time runs out
    it returns them by name (live's failure line names them): never a bare "timed out"."""
    import threading
    import time

    from dagster import AssetKey, AssetMaterialization, DagsterInstance

    from orchestration.cli.live import wait_caught_up
    from orchestration.lib.metadata import continuous_description

    instance = DagsterInstance.local_temp(str(tmp_path))
    quick, slow = AssetKey(["bronze", "clicks"]), AssetKey(["gold", "events_by_type"])

    def report(key, caught_up: bool) -> None:
        text = continuous_description("r1", 1, 0 if caught_up else 5, caught_up)
        instance.report_runless_asset_event(AssetMaterialization(key, description=text))

    def waiting(caught_up_slow: bool, *args, **kwargs):
        """wait_caught_up(*args, **kwargs) while a thread reports both queries every 50 ms,
        the slow one caught up or not."""
        stop = threading.Event()

        def reporting() -> None:
            while not stop.is_set():
                report(quick, True)
                report(slow, caught_up_slow)
                time.sleep(0.05)

        feeder = threading.Thread(target=reporting, daemon=True)
        feeder.start()
        try:
            # the first reports are in (the instance's storage made, warm) before the wait
            deadline = time.monotonic() + 60
            while instance.get_latest_materialization_event(slow) is None:
                assert time.monotonic() < deadline, "the reporter wrote nothing in 60 s"
                time.sleep(0.05)
            return wait_caught_up([quick, slow], time.time(), *args, instance=instance, **kwargs)
        finally:
            stop.set()
            feeder.join()

    said: list[str] = []
    # 4 s: reports every 50 ms, on a machine CI's other worker keeps busy
    behind = waiting(False, 4.0, 0.0, say=said.append, every=0.2, poll=0.05)
    assert behind == ["gold/events_by_type"]  # it reports, but never that it read everything
    # the last lines, once the quick one has reported: only the one behind is named
    assert said[-1].endswith("1 of 2 queries without a caught-up report: gold/events_by_type")
    assert waiting(True, 30.0, 0.0, poll=0.05) == []


def test_started_in_the_background_what_it_starts_still_stops_on_ctrl_c():
    """A shell starts a background command (`make dev &`) with SIGINT ignored, which its
    children would inherit: `dagster dev`'s webserver and daemon then ignore the SIGINT it
    stops them with. After `stop_like_ctrl_c`, a child started by the command handles SIGINT."""
    import signal
    import subprocess
    import sys

    child = "import signal; print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)"
    command = (
        "import subprocess, sys\n"
        "from orchestration.cli.live import stop_like_ctrl_c\n"
        "def child():\n"
        f"    return subprocess.run([sys.executable, '-c', {child!r}], capture_output=True, "
        "text=True).stdout.strip()\n"
        "before = child()\n"
        "stop_like_ctrl_c()\n"
        "print(before, child())\n"
    )
    said = subprocess.run(
        [sys.executable, "-c", command],
        capture_output=True,
        text=True,
        check=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),  # as a shell's `&`
    ).stdout.split()
    assert said == ["False", "True"]
