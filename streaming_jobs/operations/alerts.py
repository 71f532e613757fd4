"""The one alert sink: every alert is written to Delta ``ops/alerts`` first, then delivered.

An alert is an *incident* of a dedup key (``<kind>:<job>[:detail]``). `raise_alert` opens one
the first time the key fires and only refreshes ``last_seen`` while it stays open; `resolve`
closes it. Each incident owes two notifications, ``firing`` and ``resolved``, and remembers
which were delivered. `deliver` sends the ones owed: it logs them and POSTs them as JSON to
``TIDEMARK_ALERT_WEBHOOK_URL`` (with ``Authorization: Bearer $TIDEMARK_ALERT_WEBHOOK_TOKEN``
when set). A failed POST is retried with exponential backoff; the notification stays owed in
the table, so it survives restarts and is sent later. It is marked delivered only after a 2xx
answer, in the same locked update, so it is not sent twice by tidemark; each POST also carries
an ``Idempotency-Key`` header (incident and event), so a receiver can drop the one duplicate a
crash between its answer and tidemark's commit could cause.

The webhook URL and token are read from the environment at delivery time, never stored,
logged or put in metadata; errors are recorded without them.

Writers take a file lock (``ops/alerts.lock``) around read-modify-write, so sensors in
several processes never lose each other's updates. The table is small (one row per incident).
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import urllib.error
import urllib.request
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from pyspark.sql import SparkSession
from pyspark.sql import types as T

from streaming_jobs.config import TidemarkConfig
from streaming_jobs.lake import read_table, table_exists

LOG = logging.getLogger("tidemark.alerts")

SEVERITIES = ("info", "warning", "critical")

ALERT_SCHEMA = T.StructType([
    T.StructField("alert_id", T.StringType()),  # <dedup_key>#<incident>
    T.StructField("dedup_key", T.StringType()),
    T.StructField("incident", T.IntegerType()),
    T.StructField("job", T.StringType()),
    T.StructField("kind", T.StringType()),
    T.StructField("severity", T.StringType()),
    T.StructField("message", T.StringType()),
    T.StructField("first_seen", T.TimestampType()),
    T.StructField("last_seen", T.TimestampType()),
    T.StructField("seen_count", T.LongType()),
    T.StructField("resolved_at", T.TimestampType()),
    T.StructField("resolution", T.StringType()),
    T.StructField("firing_delivered_at", T.TimestampType()),
    T.StructField("resolved_delivered_at", T.TimestampType()),
    T.StructField("attempts", T.IntegerType()),
    T.StructField("next_attempt_at", T.TimestampType()),
    T.StructField("last_error", T.StringType()),
])
FIELDS = [f.name for f in ALERT_SCHEMA.fields]


@dataclass(frozen=True)
class DeliverySettings:
    """How alerts leave tidemark (from the environment; secrets are never kept elsewhere)."""

    url_env: str = "TIDEMARK_ALERT_WEBHOOK_URL"
    token_env: str = "TIDEMARK_ALERT_WEBHOOK_TOKEN"
    retry_seconds: float = 30.0  # first backoff; doubles per failed attempt
    max_backoff_seconds: float = 3600.0
    timeout_seconds: float = 10.0

    @classmethod
    def from_env(cls) -> "DeliverySettings":
        return cls(retry_seconds=float(os.environ.get("TIDEMARK_ALERT_RETRY_SECONDS", "30")))

    @property
    def url(self) -> str | None:
        return os.environ.get(self.url_env) or None


def _now() -> datetime:
    # Naive local time, as PySpark hands timestamps back: comparisons stay in one convention.
    return datetime.now()


def _iso(value: datetime | None) -> str | None:
    return value.astimezone(timezone.utc).isoformat(timespec="seconds") if value else None


def _table(cfg: TidemarkConfig):
    return cfg.paths.table("ops", "alerts")


@contextmanager
def _locked(cfg: TidemarkConfig):
    path = _table(cfg).with_name("alerts.lock")
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)  # blocks: updates are short
        yield


def load(spark: SparkSession, cfg: TidemarkConfig) -> list[dict]:
    """Every incident, oldest first."""
    if not table_exists(spark, _table(cfg)):
        return []
    rows = [r.asDict() for r in read_table(spark, _table(cfg)).collect()]
    return sorted(rows, key=lambda r: (r["first_seen"], r["alert_id"]))


def _save(spark: SparkSession, cfg: TidemarkConfig, rows: list[dict]) -> None:
    # One overwrite commit: readers see the old or the new table, never half of an update.
    (spark.createDataFrame([tuple(r[f] for f in FIELDS) for r in rows], ALERT_SCHEMA)
     .coalesce(1).write.format("delta").mode("overwrite").save(str(_table(cfg))))


def _open(rows: list[dict], dedup_key: str) -> dict | None:
    return next((r for r in rows if r["dedup_key"] == dedup_key and r["resolved_at"] is None), None)


@dataclass
class Change:
    """What one alert call changed: a new incident, a re-sent escalation, or nothing new."""

    alert_id: str
    opened: bool = False
    resolved: bool = False


def raise_alert(spark: SparkSession, cfg: TidemarkConfig, *, job: str, kind: str, severity: str,
                message: str, dedup_key: str | None = None) -> Change:
    """Open an incident for the key, or refresh the open one (one notification per incident).

    An open incident whose severity rises (warning to critical) is notified again.
    """
    if severity not in SEVERITIES:
        raise ValueError(f"alert {kind} for job {job}: severity must be one of {SEVERITIES}, "
                         f"not {severity!r}")
    key = dedup_key or f"{kind}:{job}"
    now = _now()
    with _locked(cfg):
        rows = load(spark, cfg)
        current = _open(rows, key)
        if current is not None:
            escalated = SEVERITIES.index(severity) > SEVERITIES.index(current["severity"])
            current.update(last_seen=now, seen_count=current["seen_count"] + 1, message=message)
            if escalated:
                current.update(severity=severity, firing_delivered_at=None, next_attempt_at=now)
            _save(spark, cfg, rows)
            return Change(current["alert_id"], opened=escalated)
        incident = 1 + max((r["incident"] for r in rows if r["dedup_key"] == key), default=0)
        row = dict.fromkeys(FIELDS)
        row.update(alert_id=f"{key}#{incident}", dedup_key=key, incident=incident, job=job,
                   kind=kind, severity=severity, message=message, first_seen=now, last_seen=now,
                   seen_count=1, attempts=0, next_attempt_at=now)
        rows.append(row)
        _save(spark, cfg, rows)
        LOG.warning("alert %s [%s] %s: %s", row["alert_id"], severity, job, message)
        return Change(row["alert_id"], opened=True)


def resolve(spark: SparkSession, cfg: TidemarkConfig, dedup_key: str, resolution: str) -> Change | None:
    """Close the key's open incident (its ``resolved`` notification is then owed); None if none."""
    now = _now()
    with _locked(cfg):
        rows = load(spark, cfg)
        current = _open(rows, dedup_key)
        if current is None:
            return None
        current.update(resolved_at=now, resolution=resolution, next_attempt_at=now, attempts=0)
        _save(spark, cfg, rows)
        LOG.warning("alert %s resolved: %s", current["alert_id"], resolution)
        return Change(current["alert_id"], resolved=True)


def open_alerts(spark: SparkSession, cfg: TidemarkConfig, job: str | None = None) -> list[dict]:
    return [r for r in load(spark, cfg)
            if r["resolved_at"] is None and (job is None or r["job"] == job)]


def owed(row: dict) -> str | None:
    """The notification this incident still owes: 'firing', 'resolved' or None."""
    if row["firing_delivered_at"] is None:
        return "firing"
    if row["resolved_at"] is not None and row["resolved_delivered_at"] is None:
        return "resolved"
    return None


def payload(row: dict, event: str) -> dict:
    return {
        "event": event,
        "alert_id": row["alert_id"],
        "dedup_key": row["dedup_key"],
        "job": row["job"],
        "kind": row["kind"],
        "severity": row["severity"],
        "message": row["message"],
        "first_seen": _iso(row["first_seen"]),
        "last_seen": _iso(row["last_seen"]),
        "resolved_at": _iso(row["resolved_at"]),
        "resolution": row["resolution"],
    }


def _post(settings: DeliverySettings, body: dict, idempotency_key: str) -> None:
    request = urllib.request.Request(
        settings.url, data=json.dumps(body).encode(), method="POST",
        headers={"Content-Type": "application/json", "Idempotency-Key": idempotency_key})
    token = os.environ.get(settings.token_env)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    with urllib.request.urlopen(request, timeout=settings.timeout_seconds) as answer:
        if not 200 <= answer.status < 300:
            raise urllib.error.HTTPError(settings.url, answer.status, "not 2xx", answer.headers, None)


def _reason(exc: Exception) -> str:
    """Why a POST failed, without the URL (it may hold a secret)."""
    if isinstance(exc, urllib.error.HTTPError):
        return f"HTTP {exc.code}"
    if isinstance(exc, urllib.error.URLError):
        return f"{type(exc.reason).__name__}: {getattr(exc.reason, 'strerror', None) or 'unreachable'}"
    return type(exc).__name__


def _send(settings: DeliverySettings, row: dict, event: str, now: datetime,
          out: "Delivery") -> bool:
    LOG.warning("alert %s %s [%s] %s: %s", row["alert_id"], event, row["severity"], row["job"],
                row["message"])
    try:
        if settings.url:
            _post(settings, payload(row, event), f"{row['alert_id']}:{event}")
    except Exception as exc:  # noqa: BLE001 - recorded, retried later
        row["attempts"] = (row["attempts"] or 0) + 1
        backoff = min(settings.retry_seconds * 2 ** (row["attempts"] - 1),
                      settings.max_backoff_seconds)
        row.update(next_attempt_at=now + timedelta(seconds=backoff),
                   last_error=f"webhook delivery failed: {_reason(exc)}")
        out.failed.append(f"{row['alert_id']}:{event}")
        return False
    row.update({f"{event}_delivered_at": now, "attempts": 0, "last_error": None})
    out.sent.append(f"{row['alert_id']}:{event}")
    return True


@dataclass
class Delivery:
    sent: list[str]  # "<alert_id>:<event>" delivered now
    failed: list[str]
    waiting: int  # owed but not due yet (backing off)


def deliver(spark: SparkSession, cfg: TidemarkConfig,
            settings: DeliverySettings | None = None) -> Delivery:
    """Send every owed, due notification once; back off the ones that fail."""
    settings = settings or DeliverySettings.from_env()
    out = Delivery([], [], 0)
    with _locked(cfg):
        rows = load(spark, cfg)
        now = _now()
        changed = False
        for row in rows:
            if owed(row) and row["next_attempt_at"] is not None and row["next_attempt_at"] > now:
                out.waiting += 1
                continue
            while (event := owed(row)) is not None:  # firing first, then resolved
                changed = True
                if not _send(settings, row, event, now, out):
                    break
        if changed:
            _save(spark, cfg, rows)
    return out
