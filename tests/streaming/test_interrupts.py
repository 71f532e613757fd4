"""A foreachBatch call cut short by its query's stop reads as a stop to Spark's own check."""

from __future__ import annotations

import traceback

import pytest
from py4j.protocol import Py4JJavaError

from streaming_jobs.core.interrupts import BatchInterrupted, stoppable

# How py4j's callback server hands a Python exception to the JVM (clientserver: the error
# return message is the formatted traceback); Spark's check reads this text.
PROXY_PREFIX = "An exception was raised by the Python Proxy. Return Message: "


def _as_the_jvm_sees_it(spark, exc_text: str) -> bool:
    """Spark's stream execution's own test of whether a foreachBatch failure was the stop."""
    jvm = spark.sparkContext._jvm
    stream_execution = jvm.org.apache.spark.sql.execution.streaming.runtime.StreamExecution
    return stream_execution.isInterruptionException(
        jvm.py4j.Py4JException(PROXY_PREFIX + exc_text), spark.sparkContext._jsc.sc()
    )


def _interrupted_call(spark) -> None:
    """A real Spark-side call interrupted as `query.stop()` interrupts one (pinned thread mode:
    this Python thread has its own JVM thread, whose interrupt flag the sleep consumes)."""
    thread = spark.sparkContext._jvm.java.lang.Thread
    thread.currentThread().interrupt()
    thread.sleep(5_000)


def test_an_interrupted_batch_is_re_raised_short_and_reads_as_a_stop(spark):
    with pytest.raises(Py4JJavaError) as original:
        _interrupted_call(spark)
    long_text = str(original.value)
    assert "java.lang.InterruptedException" in long_text

    with pytest.raises(BatchInterrupted) as caught:
        with stoppable("job events_by_type"):
            _interrupted_call(spark)
    text = "".join(traceback.format_exception(caught.value))
    assert "job events_by_type" in str(caught.value)
    assert caught.value.__cause__ is None and caught.value.__suppress_context__
    assert "\tat " not in text  # no Java frames reach Spark's character-by-character match
    assert _as_the_jvm_sees_it(spark, text) is True


def test_other_errors_pass_through_unchanged_and_do_not_read_as_a_stop(spark):
    jvm = spark.sparkContext._jvm
    with pytest.raises(Py4JJavaError) as caught:
        with stoppable("stream clicks"):
            jvm.java.io.File("/nonexistent-dir/x").createNewFile()
    assert "java.io.IOException" in str(caught.value)
    text = "".join(traceback.format_exception(caught.value))
    assert _as_the_jvm_sees_it(spark, text[:2000]) is False

    with pytest.raises(ValueError, match="mine"):
        with stoppable("stream clicks"):
            raise ValueError("mine")
