"""The alert sink: Delta first, then a real webhook on 127.0.0.1 that refuses, then accepts."""

from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from streaming_jobs.operations import alerts

SECRET_URL_PATH = "/hook/s3cr3t-path"
TOKEN = "tok-very-secret"


class Hook:
    """A webhook receiver on 127.0.0.1: answers 503 while ``down``, else records and 200."""

    def __init__(self) -> None:
        self.down = True
        self.received: list[tuple[dict, dict]] = []
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's name
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if hook.down:
                    self.send_response(503)
                else:
                    hook.received.append((body, dict(self.headers)))
                    self.send_response(200)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = HTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def settings(monkeypatch):
    return alerts.DeliverySettings(retry_seconds=0.0)  # no backoff wait in the test


def test_alerts_stay_pending_while_the_webhook_is_down_and_are_delivered_once(
    cfg, settings, monkeypatch, caplog
):
    monkeypatch.setenv("TIDEMARK_ALERT_WEBHOOK_TOKEN", TOKEN)
    # 1. Nothing listens: connection refused.
    monkeypatch.setenv(
        "TIDEMARK_ALERT_WEBHOOK_URL", f"http://127.0.0.1:{free_port()}{SECRET_URL_PATH}"
    )
    first = alerts.raise_alert(
        cfg, job="job_a", kind="state_size", severity="warning", message="state rows 120 > warn 100"
    )
    second = alerts.raise_alert(
        cfg, job="job_b", kind="checkpoint", severity="critical", message="offsets/7 unreadable"
    )
    again = alerts.raise_alert(
        cfg, job="job_a", kind="state_size", severity="warning", message="state rows 130 > warn 100"
    )
    assert first.opened and second.opened and not again.opened
    assert again.alert_id == first.alert_id
    refused = alerts.deliver(cfg, settings)
    assert refused.sent == [] and len(refused.failed) == 2

    # 2. The server answers 503.
    hook = Hook()
    try:
        monkeypatch.setenv(
            "TIDEMARK_ALERT_WEBHOOK_URL", f"http://127.0.0.1:{hook.port}{SECRET_URL_PATH}"
        )
        unavailable = alerts.deliver(cfg, settings)
        assert unavailable.sent == [] and len(unavailable.failed) == 2
        stored = {r["alert_id"]: r for r in alerts.load(cfg)}
        assert {r["attempts"] for r in stored.values()} == {2}
        assert {r["last_error"] for r in stored.values()} == {"webhook delivery failed: HTTP 503"}
        assert all(alerts.owed(r) == "firing" for r in stored.values())

        # 3. Back up: each pending alert is delivered once; later calls send nothing more.
        hook.down = False
        delivered = alerts.deliver(cfg, settings)
        assert sorted(delivered.sent) == sorted(
            [f"{first.alert_id}:firing", f"{second.alert_id}:firing"]
        )
        assert alerts.deliver(cfg, settings).sent == []
        bodies = [body for body, _ in hook.received]
        assert sorted((b["alert_id"], b["event"]) for b in bodies) == sorted(
            [(first.alert_id, "firing"), (second.alert_id, "firing")]
        )
        a = next(b for b in bodies if b["job"] == "job_a")
        assert a["message"] == "state rows 130 > warn 100" and a["severity"] == "warning"
        headers = [h for _, h in hook.received]
        assert {h["Authorization"] for h in headers} == {f"Bearer {TOKEN}"}
        assert {h["Idempotency-Key"] for h in headers} == {
            f"{first.alert_id}:firing",
            f"{second.alert_id}:firing",
        }

        # 4. A resolution is one more notification, and the key can fire again later.
        assert alerts.resolve(cfg, "state_size:job_a", "state rows 40 < warn 100").resolved
        assert alerts.resolve(cfg, "state_size:job_a", "again") is None
        assert alerts.deliver(cfg, settings).sent == [f"{first.alert_id}:resolved"]
        reopened = alerts.raise_alert(
            cfg,
            job="job_a",
            kind="state_size",
            severity="warning",
            message="state rows 150 > warn 100",
        )
        assert reopened.opened and reopened.alert_id == "state_size:job_a#2"
        assert alerts.deliver(cfg, settings).sent == ["state_size:job_a#2:firing"]
        assert [(b["alert_id"], b["event"]) for b, _ in hook.received[2:]] == [
            (first.alert_id, "resolved"),
            ("state_size:job_a#2", "firing"),
        ]
    finally:
        hook.close()

    # Secrets never reach the table or the logs.
    table_text = json.dumps([{k: str(v) for k, v in r.items()} for r in alerts.load(cfg)])
    assert SECRET_URL_PATH not in table_text and TOKEN not in table_text
    assert SECRET_URL_PATH not in caplog.text and TOKEN not in caplog.text


def test_backoff_defers_a_failed_delivery(cfg, monkeypatch):
    monkeypatch.setenv("TIDEMARK_ALERT_WEBHOOK_URL", f"http://127.0.0.1:{free_port()}/x")
    alerts.raise_alert(cfg, job="j", kind="k", severity="info", message="m")
    slow = alerts.DeliverySettings(retry_seconds=3600.0)
    assert len(alerts.deliver(cfg, slow).failed) == 1
    retry = alerts.deliver(cfg, slow)  # inside the backoff: not attempted
    assert retry.failed == [] and retry.sent == [] and retry.waiting == 1
    with pytest.raises(ValueError, match="severity must be one of"):
        alerts.raise_alert(cfg, job="j", kind="k", severity="loud", message="m")


class Redirector(Hook):
    """Answers every POST with a 307 to ``target``; records what it received."""

    def __init__(self, target: str) -> None:
        self.target, self.hits = target, 0
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                hook.hits += 1
                self.send_response(307)
                self.send_header("Location", hook.target)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = HTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def test_a_redirecting_webhook_never_gets_the_token_elsewhere_and_the_alert_stays_pending(
    cfg, settings, monkeypatch
):
    elsewhere = Hook()
    elsewhere.down = False
    redirector = Redirector(f"http://127.0.0.1:{elsewhere.port}/stolen")
    try:
        monkeypatch.setenv("TIDEMARK_ALERT_WEBHOOK_TOKEN", TOKEN)
        monkeypatch.setenv(
            "TIDEMARK_ALERT_WEBHOOK_URL", f"http://127.0.0.1:{redirector.port}{SECRET_URL_PATH}"
        )
        alerts.raise_alert(cfg, job="j", kind="k", severity="critical", message="m")
        result = alerts.deliver(cfg, settings)
        assert result.sent == [] and len(result.failed) == 1
        assert redirector.hits == 1 and elsewhere.received == []  # nothing followed it
        [row] = alerts.load(cfg)
        assert alerts.owed(row) == "firing"
        assert "does not follow redirects" in row["last_error"]
        assert TOKEN not in row["last_error"] and SECRET_URL_PATH not in row["last_error"]
    finally:
        redirector.close()
        elsewhere.close()


@pytest.mark.parametrize(
    "url, ok",
    [
        ("https://hooks.example.test/x", True),
        ("http://127.0.0.1:8080/x", True),
        ("http://localhost/x", True),
        ("http://hooks.example.test/x", False),  # a token in clear text across a network
        ("ftp://127.0.0.1/x", False),
        ("https:///x", False),
    ],
)
def test_the_webhook_url_is_https_or_loopback(url, ok):
    if ok:
        alerts.check_url(url)
    else:
        with pytest.raises(alerts.WebhookRefused, match="must be an https:// URL"):
            alerts.check_url(url)


FULL_DISK = """
import json, resource, signal
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails (EFBIG) instead
from streaming_jobs.storage import ops_tables
from streaming_jobs.core.config import TidemarkConfig
from streaming_jobs.operations import alerts
cfg = TidemarkConfig.from_env()
ops_tables.ensure(cfg, "alerts")
_, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
resource.setrlimit(resource.RLIMIT_FSIZE, (0, hard))  # no file can be written: a full disk
for _ in range(3):  # three sensor ticks while the disk is full
    alerts.raise_alert(cfg, job="j1", kind="checkpoint_corrupt", severity="critical",
                       message="checkpoint of j1 is broken")
recorded_while_full = len(ops_tables.read(cfg, "alerts"))
resource.setrlimit(resource.RLIMIT_FSIZE, (hard, hard))  # room again
alerts.raise_alert(cfg, job="j1", kind="checkpoint_corrupt", severity="critical",
                   message="checkpoint of j1 is broken")
sent = alerts.deliver(cfg, alerts.DeliverySettings(retry_seconds=0.0)).sent
rows = ops_tables.read(cfg, "alerts")
print(json.dumps({"recorded_while_full": recorded_while_full, "sent_after": sent,
                  "rows": [[r["alert_id"], r["firing_delivered_at"] is not None] for r in rows]}))
"""


def test_with_the_disk_full_the_alert_still_leaves_once_and_is_recorded_later(cfg, tmp_path):
    import os
    import subprocess
    import sys

    hook = Hook()
    hook.down = False
    try:
        env = {
            **os.environ,
            "TIDEMARK_DATA_ROOT": str(cfg.data_root),
            "TIDEMARK_ALERT_WEBHOOK_URL": f"http://127.0.0.1:{hook.port}/hook",
        }
        probe = subprocess.run(
            [sys.executable, "-c", FULL_DISK], env=env, capture_output=True, text=True, timeout=300
        )
        assert probe.returncode == 0, probe.stderr[-3000:]
        outcome = json.loads(probe.stdout.strip().splitlines()[-1])
        assert outcome["recorded_while_full"] == 0  # the outbox really could not be written
        [(body, headers)] = hook.received  # sent once, from memory, not once per tick
        assert body["message"] == "checkpoint of j1 is broken" and body["event"] == "firing"
        assert headers["Idempotency-Key"] == "checkpoint_corrupt:j1#1:firing"
        # once there is room the incident is recorded as already delivered: not sent again
        assert outcome["rows"] == [["checkpoint_corrupt:j1#1", True]]
        assert outcome["sent_after"] == [] and len(hook.received) == 1
        assert "ops/alerts cannot be written" in probe.stderr
    finally:
        hook.close()
