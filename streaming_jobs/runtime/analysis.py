"""Load-time analysis of every job: what the streaming engine would refuse, and whether its
state is bounded, found before anything runs.

For each job, `analyze_job` builds the job's query over empty streaming sources with the
bronze schema of each stream (nothing is read or started) and checks, in order:

1. the query parses and resolves (SQL jobs: the error names the file and the line);
2. its output has the declared keys and measures;
3. Spark's own streaming checker accepts it in the job's output mode (``append``, or
   ``update`` for jobs that MERGE per batch): what ``start()`` would refuse, found now;
4. every stateful operator can evict its state:

   - an aggregation groups by a watermarked column (a ``window()`` or ``session_window()`` of
     the event time, or the event time itself);
   - a deduplication keys on the watermark or is ``dropDuplicatesWithinWatermark``;
   - a stream-stream join bounds the state of both sides: a time range between the two event
     times in its condition, or a watermarked column in its equality keys (Spark's own rule,
     `StreamingJoinHelper`, asked for each side);
   - a keyed state (``applyInPandasWithState``) has a timeout.
5. the query runs one micro-batch over one synthetic row per source, into a scratch checkpoint
   and no sink (`_first_batch`): what Spark refuses only while it plans a batch (two event-time
   columns in one stateful operator's input, say) is refused here, with the file and line.
   Passes are cached per content of the job, so this runs once per change.

   An operator that cannot is refused (an error) or, with ``unbounded_state: warn`` (per job)
   or ``TIDEMARK_UNBOUNDED_STATE=warn`` (for all), reported as a warning. Either way the message
   names the operator and how to bound it.

`tidemark check` prints every finding. The Dagster code location analyses the jobs when it
loads (`checked`, cached per content of the job files, so a JVM starts only when a job or
stream changed); a job with an error is left out of `registry()` and reported as a load
problem (an alert, `tidemark check`), and the other jobs load and run.
"""

from __future__ import annotations

import os
import json
import logging
import re
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession

from streaming_jobs.core.config import TidemarkConfig
from streaming_jobs.runtime.ingestion import bronze_schema
from streaming_jobs.runtime.plans import seq, streaming_nodes
from streaming_jobs.storage.registry import analysis_cache, catalogue
from streaming_jobs.schemas import StreamSchema
from streaming_jobs.spec import JobSpec

WATERMARK_KEY = "spark.watermarkDelayMs"


@dataclass(frozen=True)
class Finding:
    job: str
    where: str  # file:line, or the job
    level: str  # "error", "warning" or "info"
    message: str
    # info: how far behind the stream's watermark the job's windows are emitted (a
    # stream-stream join upstream of its aggregation holds them back by its time bound)
    delay_seconds: int | None = None

    def __str__(self) -> str:
        return f"{self.where}: {self.level}: job {self.job}: {self.message}"


# -- the plan, through py4j ---------------------------------------------------------------------


def _children(node) -> list:
    return seq(node.children())


def _watermarked(attribute) -> bool:
    return attribute.metadata().contains(WATERMARK_KEY)


def _references(expression) -> list:
    return seq(expression.references().toSeq())


def _names(expressions) -> str:
    return ", ".join(sorted({a.name() for e in expressions for a in _references(e)})) or "nothing"


def _attribute_set(jvm, attributes: list):
    buffer = jvm.java.util.ArrayList()
    for a in attributes:
        buffer.add(a)
    return jvm.org.apache.spark.sql.catalyst.expressions.AttributeSet.apply(
        jvm.scala.jdk.javaapi.CollectionConverters.asScala(buffer)
    )


def _join_side_bounded(jvm, join, side: str) -> bool:
    """Whether Spark can compute a state watermark for one side of a stream-stream join."""
    helper = jvm.org.apache.spark.sql.catalyst.analysis.StreamingJoinHelper
    if helper.isWatermarkInJoinKeys(join):
        return True
    this, other = (join.left(), join.right()) if side == "left" else (join.right(), join.left())
    condition = join.condition()
    if condition.isEmpty():
        return False
    other_marked = [a for a in seq(other.output()) if _watermarked(a)]
    # any event watermark will do: the question is only whether a bound exists at all
    # (a number above 2**31 travels through py4j as a Long, as Option[Long] needs)
    bound = helper.getStateValueWatermark(
        _attribute_set(jvm, seq(this.output())),
        _attribute_set(jvm, other_marked),
        condition,
        jvm.scala.Some(10**12),
    )
    return not bound.isEmpty()


PROBE_WATERMARK_MS = 10**12  # any event watermark: only its difference to the output counts


def _join_delay_ms(jvm, join) -> int:
    """How far a stream-stream join's output watermark trails its input watermark: Spark
    propagates the smaller of its two sides' state watermarks, which its time bound sets."""
    helper = jvm.org.apache.spark.sql.catalyst.analysis.StreamingJoinHelper
    condition = join.condition()
    if helper.isWatermarkInJoinKeys(join) or condition.isEmpty():
        return 0
    marks = []
    for this, other in ((join.left(), join.right()), (join.right(), join.left())):
        bound = helper.getStateValueWatermark(
            _attribute_set(jvm, seq(this.output())),
            _attribute_set(jvm, [a for a in seq(other.output()) if _watermarked(a)]),
            condition,
            jvm.scala.Some(PROBE_WATERMARK_MS),
        )
        if bound.isEmpty():
            return 0
        marks.append(int(bound.get()))
    return max(0, PROBE_WATERMARK_MS - min(marks))


def _joins_delay_ms(jvm, node) -> int:
    """The delay the time-bounded joins under ``node`` add to its watermark, chained."""
    below = max((_joins_delay_ms(jvm, c) for c in _children(node)), default=0)
    streaming_join = node.nodeName() == "Join" and all(c.isStreaming() for c in _children(node))
    return below + (_join_delay_ms(jvm, node) if streaming_join else 0)


def emit_delay_seconds(jvm, plan) -> int:
    """How far behind the stream's watermark the job's aggregation emits its windows: the
    delay of the time-bounded joins below it (0 when no join feeds an aggregation)."""
    delays = [_joins_delay_ms(jvm, a) for a in _aggregates(plan)]
    return -(-max(delays, default=0) // 1000)


def _aggregates(plan) -> list:
    nodes: list = []
    streaming_nodes(plan, nodes)
    return [n for n in nodes if n.nodeName() == "Aggregate"]


def unbounded_operators(jvm, plan) -> list[str]:
    """What in ``plan`` keeps state it can never evict, each with how to bound it."""
    nodes: list = []
    streaming_nodes(plan, nodes)
    problems = []
    for node in nodes:
        kind = node.nodeName()
        if kind == "Aggregate":
            grouping = seq(node.groupingExpressions())
            if not any(_watermarked(a) for e in grouping for a in _references(e)):
                problems.append(
                    f"the aggregation by ({_names(grouping)}) keeps a state row per group "
                    "forever: group by a window of the event time (window(...), "
                    "session_window(...)) or the event time itself, which the watermark closes; "
                    "for a latest value per key, keep it in keyed state with a TTL in a Python "
                    "job (tidemark new job NAME --python --keyed, docs/python-jobs.md); or "
                    "accept the growth with unbounded_state: warn"
                )
        elif kind == "Deduplicate":
            keys = seq(node.keys())
            if not any(_watermarked(a) for e in keys for a in _references(e)):
                problems.append(
                    f"the deduplication on ({_names(keys)}) keeps every key forever: use "
                    "dropDuplicatesWithinWatermark, or include the event time in its columns"
                )
        elif kind == "Join" and all(c.isStreaming() for c in _children(node)):
            for side in ("left", "right"):
                if not _join_side_bounded(jvm, node, side):
                    problems.append(
                        f"the stream-stream join ({node.joinType().toString()}) never evicts "
                        f"its {side} side's state: add a time bound between the two event "
                        "times to the join condition (e.g. p.payment_time between o.order_time "
                        "and o.order_time + interval 1 hour), or join on a window of both"
                    )
        elif kind.startswith("FlatMapGroups") and "WithState" in kind:
            if "NoTimeout" in node.timeout().toString():
                problems.append(
                    f"the keyed state ({kind}) has no timeout: pass timeoutConf "
                    "(GroupStateTimeout.EventTimeTimeout) and remove each key's state when it "
                    "times out, as a TTL"
                )
    return problems


# -- one job ------------------------------------------------------------------------------------


def _empty_sources(
    spark: SparkSession, spec: JobSpec, known: dict[str, StreamSchema], scratch: Path
) -> list[DataFrame]:
    frames = []
    for name in spec.sources:
        folder = scratch / name
        folder.mkdir(parents=True, exist_ok=True)
        frames.append(spark.readStream.schema(bronze_schema(known[name])).json(str(folder)))
    return frames


def _query_line(spec: JobSpec, message: str) -> str:
    """file:line of a SQL error: the query's first line plus the line Spark names."""
    found = re.search(r"line (\d+),? pos (\d+)", message)
    start = spec.origin_lines.get("query")
    if found and start and spec.origin:
        return f"{spec.origin}:{start + int(found.group(1)) - 1}"
    return spec.at("query")


def _first_line(exc: Exception) -> str:
    """The engine's message without its stack trace."""
    if hasattr(exc, "java_exception"):
        text = str(exc.java_exception.getMessage())
    else:
        text = str(exc)
    return text.split("\nJVM stacktrace")[0].split(";\n")[0].split("\n== ")[0].strip()


def analyze_job(
    spark: SparkSession,
    spec: JobSpec,
    known: dict[str, StreamSchema],
    policy: str = "refuse",
    scratch: Path | None = None,
) -> list[Finding]:
    from pyspark.errors import PySparkException
    from py4j.protocol import Py4JJavaError

    if scratch is None:
        with tempfile.TemporaryDirectory(prefix="tidemark-check-") as folder:
            return analyze_job(spark, spec, known, policy, Path(folder))
    logging.getLogger("SQLQueryContextLogger").setLevel(logging.CRITICAL)  # we report it
    out: list[Finding] = []
    try:
        frame = spec.apply(*_empty_sources(spark, spec, known, scratch))
    except (PySparkException, Py4JJavaError) as exc:
        message = _first_line(exc)
        return [
            Finding(
                spec.name,
                _query_line(spec, message),
                "error",
                f"the query does not resolve against its sources' schemas: {message}",
            )
        ]
    except Exception as exc:  # a Python job's build that fails on its inputs
        return [
            Finding(spec.name, spec.at(), "error", f"build failed: {type(exc).__name__}: {exc}")
        ]
    for role in ("keys", "measures"):
        missing = [c for c in getattr(spec, role) if c not in frame.columns]
        if missing:
            out.append(
                Finding(
                    spec.name,
                    spec.at(role),
                    "error",
                    f"{role} {', '.join(missing)} not in the query's output columns "
                    f"({', '.join(frame.columns)})",
                )
            )
    if not frame.isStreaming:
        return out + [
            Finding(
                spec.name,
                spec.at("query"),
                "error",
                "the query does not read its sources as a stream",
            )
        ]
    jvm = spark.sparkContext._jvm
    plan = frame._jdf.queryExecution().analyzed()
    mode = jvm.org.apache.spark.sql.streaming.OutputMode
    try:
        jvm.org.apache.spark.sql.catalyst.analysis.UnsupportedOperationChecker.checkForStreaming(
            plan, mode.Append() if spec.output_mode == "append" else mode.Update()
        )
    except (PySparkException, Py4JJavaError) as exc:
        message = _first_line(exc).split(";;")[0].strip()
        unwindowed = [
            f"({_names(seq(n.groupingExpressions()))})"
            for n in _aggregates(plan)
            if not any(
                _watermarked(a) for e in seq(n.groupingExpressions()) for a in _references(e)
            )
        ]
        if "without watermark" in message and unwindowed:
            message += (
                f". The aggregation by {', '.join(unwindowed)} has no window of the "
                "event time, so no row of it is ever final: group by window(...) or "
                "session_window(...) of the event time; for a running value per key, "
                "use keyed state with a TTL (docs/python-jobs.md)"
            )
        out.append(
            Finding(
                spec.name,
                spec.at("query"),
                "error",
                f"Spark's streaming engine refuses the query in {spec.output_mode} mode: {message}",
            )
        )
        return out
    level = "error" if (spec.unbounded_state or policy) == "refuse" else "warning"
    for problem in unbounded_operators(jvm, plan):
        out.append(Finding(spec.name, spec.at("query"), level, f"unbounded state: {problem}"))
    if not any(f.level == "error" for f in out):
        refused = _first_batch(spark, spec, frame, known, scratch)
        if refused is not None:
            out.append(refused)
    delay = emit_delay_seconds(jvm, plan)
    if delay:
        out.append(
            Finding(
                spec.name,
                spec.at("query"),
                "info",
                (
                    f"its windows are emitted {delay:,} s behind the watermark: the stream-stream "
                    "join's time bound holds back the aggregation after it; reconciliation's default "
                    "open_when allows for it"
                    + (" (yours is declared: check it does)" if spec.open_when else "")
                ),
                delay,
            )
        )
    return out


# -- what the engine refuses only when it plans a micro-batch ------------------------------------

# Spark's words for a refusal made while planning a batch, and what to do about it
FIRST_BATCH_HINTS = {
    "More than one event time columns": (
        "a stateful operator (an aggregation, a deduplication, a join) reads two event-time "
        "columns, e.g. both sides' times, or both sides' window structs, after a stream-stream "
        "join: keep one of them as the event time and drop the other, or select it as a plain "
        "value (cast(b.event_time as string) as b_time), before that operator"
    ),
}


def _synthetic_row(schema: StreamSchema) -> dict:
    """One plausible row of a stream: a value of each field's type, the event time in 2000."""
    from pyspark.sql import types as T

    row = {}
    for f in schema.fields:
        if isinstance(f.dtype, T.TimestampType):
            row[f.name] = "2000-01-01T00:00:00Z"
        elif isinstance(f.dtype, T.StringType):
            row[f.name] = "x"
        elif isinstance(f.dtype, T.BooleanType):
            row[f.name] = False
        elif isinstance(f.dtype, (T.DateType,)):
            row[f.name] = "2000-01-01"
        elif isinstance(f.dtype, T.AtomicType):
            row[f.name] = 0
    return row


def _first_batch_key(spec: JobSpec, known: dict[str, StreamSchema]) -> str:
    """What a first batch's outcome depends on: the job's file, the helpers, the sources'
    schemas, the mode and Spark's version."""
    import hashlib

    from pyspark import __version__ as spark_version

    digest = hashlib.sha256(f"{spec.name}|{spec.output_mode}|{spark_version}".encode())
    package = Path(__file__).resolve().parents[1]
    files = [Path(__file__), *sorted((package / "stateful").glob("*.py"))]
    if spec.origin and Path(spec.origin).is_file():
        files.append(Path(spec.origin))
    for f in files:
        digest.update(f.read_bytes())
    for name in spec.sources:
        digest.update(bronze_schema(known[name]).json().encode())
    return digest.hexdigest()[:24]


def _first_batch(
    spark: SparkSession,
    spec: JobSpec,
    frame: DataFrame,
    known: dict[str, StreamSchema],
    scratch: Path,
) -> Finding | None:
    """Run the query for one micro-batch over one synthetic row per source, into a scratch
    checkpoint and no sink: what Spark refuses only while planning a batch (not at analysis,
    not in its streaming checker) is then found here, with the job's file and line. Passes are
    cached per content (`_first_batch_key`), so a job is run once, not at every load."""
    from pyspark.errors import PySparkException
    from py4j.protocol import Py4JJavaError

    passed = (
        TidemarkConfig.from_env().spark.jars_cache.parent
        / "checks"
        / "first-batch"
        / f"{_first_batch_key(spec, known)}.ok"
    )
    if passed.exists():
        return None
    for name in spec.sources:
        probe = scratch / name / "first-batch.json"
        if not probe.exists():
            probe.write_text(json.dumps(_synthetic_row(known[name])) + "\n")
    query = None
    try:
        query = (
            frame.writeStream.format("noop")
            .outputMode(spec.output_mode)
            .option("checkpointLocation", str(scratch / "checkpoints" / spec.name))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
    except (PySparkException, Py4JJavaError) as exc:
        _forget(spark, query)
        text = f"{exc}\n{getattr(exc, '_stackTrace', '') or ''}"
        if "AnalysisException" not in text and "UnsupportedOperation" not in text:
            # the job's own code failing on a made-up row is not the engine's refusal
            logging.getLogger(__name__).info(
                "job %s: its first batch over a synthetic row failed (not reported): %s",
                spec.name,
                exc,
            )
            return None
        message = re.split(r"terminated with exception: ", _first_line(exc))[-1].strip()
        hint = next((h for marker, h in FIRST_BATCH_HINTS.items() if marker in message), None)
        return Finding(
            spec.name,
            spec.at("query"),
            "error",
            "Spark's streaming engine refuses the query when it plans its first "
            f"micro-batch: {message}" + (f". Fix: {hint}" if hint else ""),
        )
    _forget(spark, query)
    passed.parent.mkdir(parents=True, exist_ok=True)
    passed.touch()
    return None


def _forget(spark: SparkSession, query) -> None:
    """Drop the progress the session's listener kept of a scratch query (nobody takes it)."""
    if query is not None:
        from streaming_jobs.runtime.progress import progress_log

        progress_log(spark).take(str(query.runId))


def analyze(
    spark: SparkSession, jobs: dict[str, JobSpec] | None = None, policy: str | None = None
) -> list[Finding]:
    policy = policy or TidemarkConfig.from_env().unbounded_state
    found = catalogue(analysed=False)
    known, jobs = found.streams, found.jobs if jobs is None else jobs
    # the empty sources' folders (no file is written there), removed once analysed
    with tempfile.TemporaryDirectory(prefix="tidemark-check-") as folder:
        return [
            f
            for spec in jobs.values()
            for f in analyze_job(spark, spec, known, policy, Path(folder))
        ]


# -- cached, for the code location's load -------------------------------------------------------


def checked(cfg: TidemarkConfig) -> list[Finding]:
    """The findings for the current jobs, from the cache or a fresh analysis (then cached).

    With an active SparkSession the analysis runs in it; without one, in a short-lived process
    (a code server keeps no JVM). A job with an error is left out of `registry()` (and so of
    the code location), reported as a load problem; the others load.
    """
    cache = analysis_cache(cfg)
    if cache.exists():
        return [Finding(**f) for f in json.loads(cache.read_text())]
    spark = SparkSession.getActiveSession()
    if spark is not None:
        findings = analyze(spark, policy=cfg.unbounded_state)
    else:
        result = subprocess.run(
            [sys.executable, "-m", "streaming_jobs.runtime.analysis", "--json"],
            capture_output=True,
            text=True,
        )
        if result.returncode != 0:
            raise RuntimeError(
                "tidemark check could not analyse the jobs (run `tidemark "
                f"check` to see why):\n{result.stderr[-3000:]}"
            )
        findings = [Finding(**f) for f in json.loads(result.stdout.splitlines()[-1])]
    cache.parent.mkdir(parents=True, exist_ok=True)
    partial = cache.with_suffix(f".{os.getpid()}.partial")
    partial.write_text(json.dumps([asdict(f) for f in findings]))
    partial.replace(cache)
    return findings


def main() -> int:
    from streaming_jobs.storage.spark import get_spark

    cfg = TidemarkConfig.from_env()
    spark = get_spark(cfg)
    findings = analyze(spark, policy=cfg.unbounded_state)
    if "--json" in sys.argv:
        print(json.dumps([asdict(f) for f in findings]))
    else:
        for f in findings:
            print(f)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
