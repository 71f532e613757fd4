"""The continuous run's in-place restart policy (`streaming_jobs.operations.continuous`)."""

from streaming_jobs.operations.continuous import is_transient, may_restart


def test_only_the_python_worker_connect_timeout_is_transient():
    assert is_transient(
        RuntimeError("org.apache.spark.SparkException: Python worker failed to connect back.")
    )
    caused = RuntimeError("query failed")
    caused._stackTrace = (
        "Caused by: java.net.SocketTimeoutException: Timed out while waiting "
        "for the Python worker to connect back"
    )
    assert is_transient(caused)
    assert not is_transient(RuntimeError("[DELTA_MISSING_DELTA_TABLE] not a Delta table"))
    assert not is_transient(RuntimeError("No space left on device"))


def test_three_restarts_per_ten_minutes_then_the_run_ends():
    assert may_restart([], now=1000.0)
    assert may_restart([100.0, 200.0], now=300.0)
    assert not may_restart([100.0, 200.0, 300.0], now=400.0)
    # restarts older than the window no longer count
    assert may_restart([100.0, 200.0, 300.0], now=100.0 + 600.0 + 1)
