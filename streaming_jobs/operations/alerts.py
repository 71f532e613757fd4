"""The one alert sink: every alert is written to Delta ``ops/alerts`` first, then delivered.

An alert is an *incident* of a dedup key (``<prefix>:<job>:<kind>``). `raise_alert` opens one
the first time the key fires and only refreshes ``last_seen`` while it stays open; `resolve`
closes it. Each incident owes two notifications, ``firing`` and ``resolved``, and remembers
which were delivered. `deliver` sends the ones owed: it logs them and POSTs them as JSON to
``TIDEMARK_ALERT_WEBHOOK_URL`` (with ``Authorization: Bearer $TIDEMARK_ALERT_WEBHOOK_TOKEN``
when set). A failed POST is retried with exponential backoff; the notification stays owed in
the table, so it survives restarts and is sent later. Each notification is marked delivered
in its own commit right after its 2xx answer, so a crash re-sends at most the one in flight;
each POST also carries an ``Idempotency-Key`` header (incident and event), so a receiver can
drop that one duplicate.

The webhook URL and token are read from the environment at delivery time, never stored,
logged or put in metadata; errors are recorded without them.

When the outbox cannot be written (a full disk), an alert still leaves: `raise_alert` logs it
and POSTs it from memory, once per key (with the same ``Idempotency-Key`` the recorded incident
would carry), and the incident recorded once the disk has room is marked delivered instead of
being sent again.

Storage is `ops_tables` (delta-rs, no JVM): one row per incident, upserted by ``alert_id``.
Read-modify-write sequences hold the table's writer lock; delivery holds a lock of its own
(``ops/alerts.deliver.lock``), so two processes never send the same notification, while
raising alerts does not wait for a slow webhook.
"""

from __future__ import annotations

import json
import logging
import os
import urllib.error
import urllib.parse
import urllib.request
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from streaming_jobs.storage import ops_tables
from streaming_jobs.core.config import TidemarkConfig
from streaming_jobs.core.leases import exclusive
from streaming_jobs.core.locations import Location

LOG = logging.getLogger("tidemark.alerts")

SEVERITIES = ("info", "warning", "critical")
TABLE = "alerts"
FIELDS = [f.name for f in ops_tables.ALERT_SCHEMA.fields]


@dataclass(frozen=True)
class DeliverySettings:
    """How alerts leave tidemark: `TidemarkConfig.alerts`, read from the environment when the
    alerts are sent (the secrets are never kept anywhere else)."""

    retry_seconds: float = 30.0  # first backoff; doubles per failed attempt
    max_backoff_seconds: float = 3600.0
    timeout_seconds: float = 10.0

    @classmethod
    def from_env(cls) -> "DeliverySettings":
        return cls(retry_seconds=TidemarkConfig.from_env().alerts.retry_seconds)

    @property
    def url(self) -> str | None:
        return TidemarkConfig.from_env().alerts.url

    @property
    def token(self) -> str | None:
        return TidemarkConfig.from_env().alerts.token


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _iso(value: datetime | None) -> str | None:
    return value.astimezone(timezone.utc).isoformat(timespec="seconds") if value else None


@contextmanager
def _delivering(cfg: TidemarkConfig):
    """One deliverer at a time, across processes (and machines, on a store)."""
    place = Location.of(ops_tables.path(cfg, TABLE)).with_name("alerts.deliver.lock")
    with exclusive(place, f"alert delivery (pid {os.getpid()})"):
        yield


def load(cfg: TidemarkConfig, where=None) -> list[dict]:
    """Incidents (all, or those matching ``where``), oldest first."""
    rows = ops_tables.read(cfg, TABLE, where=where)
    return sorted(rows, key=lambda r: (r["first_seen"], r["alert_id"]))


@dataclass
class Change:
    """What one alert call changed: a new incident, a re-sent escalation, or nothing new."""

    alert_id: str
    opened: bool = False
    resolved: bool = False


def raise_alert(
    cfg: TidemarkConfig,
    *,
    job: str,
    kind: str,
    severity: str,
    message: str,
    dedup_key: str | None = None,
) -> Change:
    """Open an incident for the key, or refresh the open one (one notification per incident).

    An open incident whose severity rises (warning to critical) is notified again.
    """
    if severity not in SEVERITIES:
        raise ValueError(
            f"alert {kind} for job {job}: severity must be one of {SEVERITIES}, not {severity!r}"
        )
    key = dedup_key or f"{kind}:{job}"
    now = _now()
    try:
        return _raise_recorded(cfg, key, job, kind, severity, message, now)
    except Exception as exc:  # noqa: BLE001 - the outbox cannot be written (a full disk...)
        return _raise_unrecorded(cfg, key, job, kind, severity, message, now, exc)


# Alerts sent straight from memory because the outbox could not record them, by dedup key:
# (alert id, when sent). A later recorded incident of the key is then marked delivered
# instead of being sent a second time.
_UNRECORDED: dict[str, tuple[str, datetime]] = {}


def _new_incident(
    history: list[dict],
    key: str,
    job: str,
    kind: str,
    severity: str,
    message: str,
    now: datetime,
) -> dict:
    """The row of a new incident of ``key``, numbered after the ones in ``history``."""
    incident = 1 + max((r["incident"] for r in history), default=0)
    row = dict.fromkeys(FIELDS)
    row.update(
        alert_id=f"{key}#{incident}",
        dedup_key=key,
        incident=incident,
        job=job,
        kind=kind,
        severity=severity,
        message=message,
        first_seen=now,
        last_seen=now,
        seen_count=1,
    )
    return row


def _raise_recorded(
    cfg: TidemarkConfig, key: str, job: str, kind: str, severity: str, message: str, now: datetime
) -> Change:
    with ops_tables.locked(cfg, TABLE) as table:
        history = table.read(where=f"dedup_key = {ops_tables.literal(key)}")
        current = next((r for r in history if r["resolved_at"] is None), None)
        if current is not None:
            escalated = SEVERITIES.index(severity) > SEVERITIES.index(current["severity"])
            current.update(last_seen=now, seen_count=current["seen_count"] + 1, message=message)
            if escalated:
                current.update(severity=severity, firing_delivered_at=None, next_attempt_at=now)
            table.upsert([current], key="alert_id")
            return Change(current["alert_id"], opened=escalated)
        row = _new_incident(history, key, job, kind, severity, message, now)
        row.update(attempts=0, next_attempt_at=now)
        sent = _UNRECORDED.get(key)
        if sent is not None and sent[0] == row["alert_id"]:
            row["firing_delivered_at"] = sent[1]  # it left from memory while the disk was full
        table.upsert([row], key="alert_id")
        _UNRECORDED.pop(key, None)
    LOG.warning("alert %s [%s] %s: %s", row["alert_id"], severity, job, message)
    return Change(row["alert_id"], opened=True)


def _raise_unrecorded(
    cfg: TidemarkConfig,
    key: str,
    job: str,
    kind: str,
    severity: str,
    message: str,
    now: datetime,
    error: Exception,
) -> Change:
    """The outbox cannot be written: log the alert and send it now, from memory, once per key
    while the outbox stays unwritable; the original problem is never hidden by this one."""
    try:
        history = ops_tables.read(cfg, TABLE, where=f"dedup_key = {ops_tables.literal(key)}")
    except Exception:  # noqa: BLE001 - unreadable too: the alert still leaves
        history = []
    row = _new_incident(history, key, job, kind, severity, message, now)
    LOG.error(
        "alert %s [%s] %s: %s (ops/alerts cannot be written: %s; sending it without recording it)",
        row["alert_id"],
        severity,
        job,
        message,
        _reason(error),
    )
    if key in _UNRECORDED:
        return Change(_UNRECORDED[key][0])
    settings = DeliverySettings.from_env()
    try:
        if settings.url:
            _post(settings, payload(row, "firing"), f"{row['alert_id']}:firing")
    except Exception as exc:  # noqa: BLE001 - logged above; retried at the next raise
        LOG.error("alert %s could not be sent either: %s", row["alert_id"], _reason(exc))
        return Change(row["alert_id"])
    _UNRECORDED[key] = (row["alert_id"], now)
    return Change(row["alert_id"], opened=True)


def resolve(cfg: TidemarkConfig, dedup_key: str, resolution: str) -> Change | None:
    """Close the key's open incident (its ``resolved`` notification is then owed); None if none."""
    now = _now()
    with ops_tables.locked(cfg, TABLE) as table:
        current = next(
            (
                r
                for r in table.read(where=f"dedup_key = {ops_tables.literal(dedup_key)}")
                if r["resolved_at"] is None
            ),
            None,
        )
        if current is None:
            return None
        current.update(resolved_at=now, resolution=resolution, next_attempt_at=now, attempts=0)
        table.upsert([current], key="alert_id")
    LOG.warning("alert %s resolved: %s", current["alert_id"], resolution)
    return Change(current["alert_id"], resolved=True)


def open_alerts(cfg: TidemarkConfig, job: str | None = None) -> list[dict]:
    where = "resolved_at is null"
    if job is not None:
        where += f" and job = {ops_tables.literal(job)}"
    return load(cfg, where=where)


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


class WebhookRefused(RuntimeError):
    """The webhook URL or its answer is not one tidemark sends a token to."""


LOOPBACK = ("127.0.0.1", "localhost", "::1")


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """A redirect is an answer, not an instruction: the token and the body never follow it."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):  # noqa: D102
        raise WebhookRefused(
            f"the webhook answered HTTP {code} (a redirect); tidemark does "
            "not follow redirects: set TIDEMARK_ALERT_WEBHOOK_URL to the final "
            "address"
        )


_OPENER = urllib.request.build_opener(_NoRedirects)


def check_url(url: str) -> None:
    """HTTPS, or plain HTTP to this machine only: the bearer token never crosses a network in
    clear text."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme == "https" and parts.hostname:
        return
    if parts.scheme == "http" and parts.hostname in LOOPBACK:
        return
    raise WebhookRefused(
        "TIDEMARK_ALERT_WEBHOOK_URL must be an https:// URL (plain http only to "
        "127.0.0.1 or localhost); the alert stays pending until it is fixed"
    )


def _post(settings: DeliverySettings, body: dict, idempotency_key: str) -> None:
    check_url(settings.url)
    request = urllib.request.Request(
        settings.url,
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Content-Type": "application/json", "Idempotency-Key": idempotency_key},
    )
    token = settings.token
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    with _OPENER.open(request, timeout=settings.timeout_seconds) as answer:
        if not 200 <= answer.status < 300:
            raise urllib.error.HTTPError(
                settings.url, answer.status, "not 2xx", answer.headers, None
            )


def _reason(exc: Exception) -> str:
    """Why a POST failed, without the URL (it may hold a secret)."""
    if isinstance(exc, WebhookRefused):
        return str(exc)
    if isinstance(exc, urllib.error.HTTPError):
        return f"HTTP {exc.code}"
    if isinstance(exc, urllib.error.URLError):
        return (
            f"{type(exc.reason).__name__}: {getattr(exc.reason, 'strerror', None) or 'unreachable'}"
        )
    return type(exc).__name__


@dataclass
class Delivery:
    sent: list[str]  # "<alert_id>:<event>" delivered now
    failed: list[str]
    waiting: int  # owed but not due yet (backing off)


def _record(cfg: TidemarkConfig, sent: dict, event: str, changes: dict) -> bool:
    """Apply ``changes`` to the incident in one commit, unless it changed since ``sent`` was
    read (an escalation or a resolution meanwhile: that notification is still owed)."""
    with ops_tables.locked(cfg, TABLE) as table:
        [row] = table.read(where=f"alert_id = {ops_tables.literal(sent['alert_id'])}")
        if owed(row) != event or row["severity"] != sent["severity"]:
            return False
        row.update(changes)
        table.upsert([row], key="alert_id")
        return True


def deliver(cfg: TidemarkConfig, settings: DeliverySettings | None = None) -> Delivery:
    """Send every owed, due notification once; back off the ones that fail."""
    settings = settings or DeliverySettings.from_env()
    out = Delivery([], [], 0)
    with _delivering(cfg):
        for row in load(cfg):
            now = _now()
            if owed(row) and row["next_attempt_at"] is not None and row["next_attempt_at"] > now:
                out.waiting += 1
                continue
            while (event := owed(row)) is not None:  # firing first, then resolved
                LOG.warning(
                    "alert %s %s [%s] %s: %s",
                    row["alert_id"],
                    event,
                    row["severity"],
                    row["job"],
                    row["message"],
                )
                try:
                    if settings.url:
                        _post(settings, payload(row, event), f"{row['alert_id']}:{event}")
                except Exception as exc:  # noqa: BLE001 - recorded, retried later
                    attempts = (row["attempts"] or 0) + 1
                    backoff = min(
                        settings.retry_seconds * 2 ** (attempts - 1), settings.max_backoff_seconds
                    )
                    changes = {
                        "attempts": attempts,
                        "next_attempt_at": now + timedelta(seconds=backoff),
                        "last_error": f"webhook delivery failed: {_reason(exc)}",
                    }
                    _record(cfg, row, event, changes)
                    out.failed.append(f"{row['alert_id']}:{event}")
                    break
                changes = {f"{event}_delivered_at": now, "attempts": 0, "last_error": None}
                out.sent.append(f"{row['alert_id']}:{event}")
                # this notification only, in its own commit: a crash re-sends at most this one
                if not _record(cfg, row, event, changes):
                    break  # changed meanwhile: the next delivery sends what is owed now
                row.update(changes)
    return out
