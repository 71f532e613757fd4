"""A foreachBatch call cut short by its query's stop, told apart from a failure.

`query.stop()` interrupts the batch in flight: the Spark call the Python function is making
raises a ``Py4JJavaError`` whose text holds the interrupted thread's Java stack trace (about
8 kB). Spark decides whether the failure of a Python foreachBatch was the stop by matching that
text, with the Python traceback around it, against a regular expression
(``py4j.protocol.Py4JJavaError: An error occurred while calling`` ... an interruption's class
name) that recurses once per character: on 8 kB the stream execution thread dies of a
``StackOverflowError`` instead of ending as stopped (every savepoint or graceful stop of a query
with a batch in flight printed one). `stoppable` re-raises such an error with a short message
of the form Spark looks for, so the stop ends the query quietly; every other error passes
through unchanged.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from py4j.protocol import Py4JError, Py4JJavaError

# What Spark's stream execution counts as an interruption by stop (IO_EXCEPTION_NAMES there).
INTERRUPTIONS = frozenset(
    {
        "java.lang.InterruptedException",
        "java.io.InterruptedIOException",
        "java.nio.channels.ClosedByInterruptException",
    }
)


class BatchInterrupted(RuntimeError):
    """The batch was cut short by its query's stop; the checkpoint has not committed it, so the
    next start of the query runs it again."""


def interruption(err: Py4JJavaError, depth: int = 8) -> str | None:
    """The interruption class behind ``err`` (itself or one of its causes), or None."""
    try:
        cause = err.java_exception
        for _ in range(depth):
            if cause is None:
                return None
            name = cause.getClass().getName()
            if name in INTERRUPTIONS:
                return name
            cause = cause.getCause()
    except Py4JError:  # the JVM is going away: not ours to judge
        return None
    return None


@contextmanager
def stoppable(who: str) -> Iterator[None]:
    """Wrap the body of a foreachBatch function of ``who`` (a job or stream name)."""
    try:
        yield
    except Py4JJavaError as err:
        name = interruption(err)
        if name is None:
            raise
        # `from None`: the original's text (the long trace) must not reach Spark's check
        raise BatchInterrupted(
            f"{who}: batch cut short by the query's stop; it runs again at the next start "
            f"(py4j.protocol.Py4JJavaError: An error occurred while calling {who}: {name})"
        ) from None
