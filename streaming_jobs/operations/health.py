"""Checkpoint health, read from the checkpoint's files and ``ops/*`` (no query is started).

`check_checkpoint` returns the findings for one query's checkpoint:

- ``checkpoint_corrupt`` (critical): ``metadata``, an ``offsets/N`` or ``commits/N`` file, or
  the state files of the last committed batch, missing or unreadable. The query cannot restart
  (or would restart as a new query and lose its exactly-once bookkeeping): restore a savepoint.
- ``query_failed`` (critical): the query's latest run ended with an error (``ops/stream_failures``),
  after its last commit.
- ``job_held`` (critical, in place of ``query_failed``): the query failed the same batch
  `streaming_jobs.storage.failures.HOLD_AFTER` times in a row, and no run starts it until ``tidemark
  release`` (the finding names the batch, the error and the fix).
- ``job_change_refused`` (critical): the job's last run was refused before any batch: its new
  version does not fit its checkpoint's state (`streaming_jobs.runtime.changes`); the finding
  says what changed and the fix. It ends when a run passes the check (the job put back, or
  rebuilt).
- ``job_left_out`` (critical): a continuous run that hosts the job left it out: a new version
  passed that check and failed at its start (its code's error, or a swap that failed midway and
  cannot be finished yet). The run goes on with the others, and starts the job once its code
  changes or a try, every minute, succeeds; the finding ends when a run passes the check.
- ``job_change_waiting`` (warning): the job's file was edited under a continuous run that
  hosts it, into a version its checkpoint's state cannot take; the run goes on with the version
  it runs, and the finding says what changed and the fix. It ends when the run takes a version
  (rebuilt, accepted) or the file is put back.
- ``batch_stalled`` (warning): a run owns the checkpoint and its batch in flight was planned
  (``offsets/N``) more than ``stall_seconds`` ago without a commit.
- ``falling_behind`` (warning): its source has bronze versions it has not read, and its last
  commit is older than ``idle_seconds``.
- ``watermark_ahead`` (critical): the job's watermark is later than the wall clock of the batch
  that set it by more than ``watermark_ahead_seconds``: an event dated in the future moved it,
  and every real event from now on is dropped as late. Restore a savepoint taken before it
  (or rebuild the job) after quarantining the event; tighten the stream's ``max_ahead``.
- ``late_share`` (warning): over the job's last batches, more than ``late_share`` of the rows
  read were dropped as late (a watermark pushed too far, or a source that lags).

For the ingestion of a Kafka-sourced stream, `check` also asks the brokers (`kafka_findings`):

- ``consumer_lag`` (warning): the topic's end offsets are more than ``TIDEMARK_KAFKA_LAG_ROWS``
  records past what the checkpoint committed, or the oldest record not read yet was written more
  than ``TIDEMARK_KAFKA_LAG_SECONDS`` ago (a stopped or slow consumer);
- ``source_unreachable`` (warning): the brokers did not answer (or the topic is gone).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

from streaming_jobs.storage import ops_tables
from streaming_jobs.storage.failures import RELEASED, failure_rows, held
from streaming_jobs.core.config import TidemarkConfig
from streaming_jobs.core.delta_log import latest_version
from streaming_jobs.core.checkpoints import batch_ids, is_running, log_file_error
from streaming_jobs.core import locations
from streaming_jobs.core.locations import Location
from streaming_jobs.core.versions import REFUSED

CRITICAL, WARNING = "critical", "warning"


@dataclass(frozen=True)
class Finding:
    kind: str
    severity: str
    message: str
    # what checkpoint_health_sensor starts for it (`savepoints.mend_corrupt`): RESTORE (a job's
    # savepoint) or REPAIR (an ingestion's torn newest file set aside); None: nothing
    remedy: str | None = None


RESTORE, REPAIR = "restore", "repair"


def _modified(place: Location, now: float) -> float:
    """A checkpoint file's change time (now, when it went meanwhile: a retention removed it)."""
    found = locations.stat(place)
    return found.modified if found is not None else now


def _state_stores(state: Location) -> list[tuple[str, set[str]]]:
    """Each state store of a checkpoint (``<operator>/<partition>``, or a folder in it when the
    operator keeps several stores per partition, as a join does) and the names in it."""
    found = []
    for op in (n for n in locations.names(state) if n.isdigit()):
        for part in (n for n in locations.names(state / op) if n.isdigit()):
            partition = state / op / part
            names = locations.names(partition)
            stores = [
                n
                for n in names
                if not n.startswith(("_", "."))
                and n != "SSTs"
                and "." not in n
                and locations.is_dir(partition / n)
            ]
            if stores:
                found += [(f"{op}/{part}/{n}", set(locations.names(partition / n))) for n in stores]
            else:
                found.append((f"{op}/{part}", set(names)))
    return sorted(found)


def structural_findings(checkpoint: Path | Location) -> list[Finding]:
    """Missing or unreadable checkpoint files (the part that needs no Spark)."""
    checkpoint = Location.of(checkpoint)
    if not locations.exists(checkpoint):
        return []  # never ran: nothing to check
    problems = []
    try:
        json.loads(locations.read_text(checkpoint / "metadata"))["id"]
    except (OSError, ValueError, KeyError):
        problems.append("metadata: missing or unreadable (the query's id is lost)")
    offsets, commits = batch_ids(checkpoint / "offsets"), batch_ids(checkpoint / "commits")
    for folder, ids in (("offsets", offsets), ("commits", commits)):
        for batch in ids:
            error = log_file_error(checkpoint / folder / str(batch))
            if error:
                problems.append(error)
    if commits and commits[-1] not in offsets:
        problems.append(f"offsets/{commits[-1]}: missing for committed batch {commits[-1]}")
    if commits:
        version = commits[-1] + 1  # batch N commits state version N + 1
        wanted = {f"{version}.{kind}" for kind in ("changelog", "zip", "delta", "snapshot")}
        for where, names in _state_stores(checkpoint / "state"):
            if not wanted & names:
                problems.append(
                    f"state/{where}: no files for version {version} "
                    f"(last committed batch {commits[-1]})"
                )
    return [
        Finding("checkpoint_corrupt", CRITICAL, f"checkpoint {checkpoint}: {p}") for p in problems
    ]


def check_checkpoint(
    cfg: TidemarkConfig,
    query: str,
    sources: tuple[str, ...] = (),
    *,
    stall_seconds: float = 900.0,
    idle_seconds: float = 3600.0,
    late_share: float = 0.5,
    watermark_ahead_seconds: float = 86400.0,
    now: float | None = None,
) -> list[Finding]:
    """Every finding for ``query``'s checkpoint (``sources``: the bronze tables it reads).

    Reads files and the ops tables only (no JVM): a sensor tick stays a few seconds.
    """
    now = time.time() if now is None else now
    checkpoint = Location.of(cfg.paths.checkpoint(query))
    findings = structural_findings(checkpoint)
    if not locations.exists(checkpoint) or findings:
        return findings
    offsets, commits = batch_ids(checkpoint / "offsets"), batch_ids(checkpoint / "commits")
    # No commit yet: the query is as old as its checkpoint (not behind since 1970).
    last = (checkpoint / "commits" / str(commits[-1])) if commits else (checkpoint / "metadata")
    last_commit_at = _modified(last, now)
    running = is_running(checkpoint)
    if running and offsets and (not commits or offsets[-1] > commits[-1]):
        planned_at = _modified(checkpoint / "offsets" / str(offsets[-1]), now)
        if now - planned_at > stall_seconds:
            findings.append(
                Finding(
                    "batch_stalled",
                    WARNING,
                    f"{query}: batch {offsets[-1]} planned {now - planned_at:.0f}s "
                    f"ago and not committed (limit {stall_seconds:.0f}s)",
                )
            )
    refused = _refused_change(checkpoint)
    if refused:
        findings.append(refused)
    rows = failure_rows(cfg, query)
    failures = [r for r in rows if r["run_id"] != RELEASED]
    hold = held(cfg, query, rows) if failures and not running else None
    if hold is not None:
        findings.append(Finding("job_held", CRITICAL, hold.message()))
    elif failures and not running:
        last = failures[-1]
        if last["failed_at"].timestamp() > last_commit_at:
            findings.append(
                Finding(
                    "query_failed",
                    CRITICAL,
                    f"{query}: its last run failed at "
                    f"{last['failed_at']:%Y-%m-%d %H:%M:%S} UTC: "
                    f"{(last['error'] or '')[:500]}",
                )
            )
    recent = _recent_batches(cfg, query)
    findings += lateness_findings(
        recent, query, late_share=late_share, watermark_ahead_seconds=watermark_ahead_seconds
    )
    findings += repair_findings(recent, query)
    behind = _unread_sources(cfg, query, sources)
    if behind and now - last_commit_at > idle_seconds:
        findings.append(
            Finding(
                "falling_behind",
                WARNING,
                f"{query}: no commit for {now - last_commit_at:.0f}s while "
                f"{', '.join(behind)} has new data (limit {idle_seconds:.0f}s)",
            )
        )
    return findings


def _refused_change(checkpoint: Location) -> Finding | None:
    """What the job's checkpoint says of its version (`streaming_jobs.runtime.changes`): its
    last run refused (the new version does not fit the state), a continuous run leaving it out
    (the version failed at its start), or a change waiting under a continuous run that runs
    the version before it; None once a run passed the check."""
    try:
        said = json.loads(locations.read_text(checkpoint / REFUSED))
    except (FileNotFoundError, ValueError):
        return None
    if said.get("kind") == "waiting":
        return Finding(
            "job_change_waiting", WARNING, f"since {said.get('at')}: {said.get('message')}"
        )
    if said.get("kind") == "left_out":
        return Finding(
            "job_left_out",
            CRITICAL,
            f"the continuous run that hosts it left it out (since {said.get('at')}): "
            f"{said.get('message')}",
        )
    return Finding(
        "job_change_refused",
        CRITICAL,
        f"its runs are refused (since {said.get('at')}): {said.get('message')}",
    )


def check(cfg: TidemarkConfig, query: str, sources: tuple[str, ...] = ()) -> list[Finding]:
    """`check_checkpoint` with the limits of ``cfg.ops`` (what every caller wants), and
    `kafka_findings` for the ingestion of a Kafka-sourced stream."""
    ops = cfg.ops
    return check_checkpoint(
        cfg,
        query,
        sources,
        stall_seconds=ops.stall_seconds,
        idle_seconds=ops.idle_seconds,
        late_share=ops.late_share,
        watermark_ahead_seconds=ops.watermark_ahead_seconds,
    ) + kafka_findings(cfg, query)


def kafka_findings(cfg: TidemarkConfig, query: str) -> list[Finding]:
    """``consumer_lag`` / ``source_unreachable`` for the ingestion query of a Kafka stream."""
    from streaming_jobs.core.checkpoints import stream_of
    from streaming_jobs.storage.kafka import TopicMissing, consumer_lag, source_of, topic_of
    from streaming_jobs.storage.registry import streams

    stream = stream_of(query)
    schema = streams().get(stream) if stream else None
    if schema is None or source_of(cfg, schema) != "kafka":
        return []
    topic = topic_of(cfg, schema)
    checkpoint = cfg.paths.checkpoint(query)
    try:
        lag = consumer_lag(cfg, checkpoint, topic, timeout=5.0)
    except TopicMissing:
        if not locations.exists(checkpoint):  # nothing produced or read yet: nothing to watch
            return []
        return [
            Finding(
                "source_unreachable",
                WARNING,
                f"{query}: Kafka topic {topic} is gone from {cfg.kafka.bootstrap} "
                "although the stream has read from it; was it deleted or renamed? "
                "(TIDEMARK_KAFKA_TOPIC_PREFIX, the stream's topic)",
            )
        ]
    except Exception as exc:  # noqa: BLE001 - any client error is the finding
        return [
            Finding(
                "source_unreachable",
                WARNING,
                f"{query}: Kafka topic {topic} at {cfg.kafka.bootstrap} did not answer "
                f"({str(exc)[:300]}); check the brokers and TIDEMARK_KAFKA_BOOTSTRAP",
            )
        ]
    limits = cfg.kafka
    age = lag.oldest_unread_seconds
    if lag.rows > limits.lag_rows or (age is not None and age > limits.lag_seconds):
        worst = sorted(((e - r, p) for p, (r, e) in lag.partitions.items()), reverse=True)[:3]
        return [
            Finding(
                "consumer_lag",
                WARNING,
                f"{query}: {lag.rows:,} records of {topic} not read yet (limit "
                f"{limits.lag_rows:,}), the oldest written {age or 0:.0f}s ago (limit "
                f"{limits.lag_seconds:.0f}s); most behind: "
                + ", ".join(f"partition {p} {n:,}" for n, p in worst)
                + ". Is the ingestion running? (Dagster: the bronze asset; "
                "tidemark continuous)",
            )
        ]
    return []


def _unread_sources(cfg: TidemarkConfig, query: str, sources) -> list[str]:
    """Sources whose bronze table has versions the query's last recorded batch had not read."""
    if not sources:
        return []
    rows = ops_tables.read(
        cfg,
        "stream_progress",
        where=f"job = {ops_tables.literal(query)}",
        columns=["batch_id", "source_versions"],
    )
    last = max(rows, key=lambda r: r["batch_id"]) if rows else {}
    read = {s["source_table"]: s["version_to"] for s in (last.get("source_versions") or [])}
    behind = []
    for source in sources:
        version = latest_version(cfg.paths.table("bronze", source))
        if version is not None and version > (
            read.get(source) if read.get(source) is not None else -1
        ):
            behind.append(f"bronze/{source}")
    return behind


RECENT_BATCHES = 10


def _recent_batches(cfg: TidemarkConfig, query: str) -> list[dict]:
    rows = ops_tables.read(
        cfg,
        "stream_progress",
        where=f"job = {ops_tables.literal(query)}",
        columns=[
            "query_id",
            "batch_id",
            "ts",
            "watermark",
            "num_input_rows",
            "rows_dropped_by_watermark",
            "state_operators",
            "rolled_up_batches",
        ],
    )
    # a rollup row (retention's fold) sums many old batches: not one recent batch
    rows = [r for r in rows if r["rolled_up_batches"] is None]
    if not rows:
        return []
    newest = max(rows, key=lambda r: (r["ts"], r["batch_id"]))
    lineage = [r for r in rows if r["query_id"] == newest["query_id"]]
    return sorted(lineage, key=lambda r: r["batch_id"])[-RECENT_BATCHES:]


def lateness_findings(
    batches: list[dict], query: str, *, late_share: float, watermark_ahead_seconds: float
) -> list[Finding]:
    """``watermark_ahead`` and ``late_share`` from a job's recent batches (a pure function)."""
    out = []
    ahead = [
        (r, (r["watermark"] - r["ts"]).total_seconds())
        for r in batches
        if r.get("watermark") and r.get("ts")
    ]
    if ahead:
        row, seconds = max(ahead, key=lambda item: item[1])
        if seconds > watermark_ahead_seconds:
            mark = row["watermark"].strftime("%Y-%m-%d %H:%M:%S")
            out.append(
                Finding(
                    "watermark_ahead",
                    CRITICAL,
                    f"{query}: batch {row['batch_id']} set the watermark to {mark}, "
                    f"{seconds / 3600:.1f} h ahead of the clock: an event dated in the "
                    "future moved it and every real event is now dropped as late. Quarantine that "
                    "event, then restore a savepoint taken before it (tidemark restore) or rebuild "
                    "the job (tidemark rebuild); tighten the stream's max_ahead",
                )
            )
    read = sum(r.get("num_input_rows") or 0 for r in batches)
    late = sum(r.get("rows_dropped_by_watermark") or 0 for r in batches)
    if read and late / read > late_share:
        out.append(
            Finding(
                "late_share",
                WARNING,
                f"{query}: {late:,} of the {read:,} rows its last {len(batches)} batches read were "
                f"dropped as late ({late / read:.0%}, limit {late_share:.0%}); check the watermark "
                "(a far-future event?) and whether a source lags",
            )
        )
    return out


def repair_findings(batches: list[dict], query: str) -> list[Finding]:
    """``state_repaired`` from a job's recent batches (a pure function), see the module doc."""
    repaired = replayed = 0
    hit = []
    for row in batches:
        for op in row.get("state_operators") or []:
            custom = dict(op.get("custom") or {})
            count = custom.get("rocksdbNumSnapshotsAutoRepaired") or 0
            if count:
                repaired += count
                replayed += custom.get("rocksdbNumReplayChangelogFiles") or 0
                hit.append(f"{op.get('operator')} in batch {row['batch_id']}")
    if not repaired:
        return []
    return [
        Finding(
            "state_repaired",
            WARNING,
            f"{query}: Spark repaired {repaired} state store(s) ({', '.join(hit[:5])}) by skipping "
            f"a bad snapshot and replaying {replayed} changelog file(s); nothing was lost, but a "
            "checkpoint file was damaged: check the disk under the checkpoints folder and take a "
            "savepoint now (tidemark savepoint)",
        )
    ]
