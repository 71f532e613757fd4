"""``dagster dev`` whose code server outlasts a paused host: ``python -m orchestration.cli.dagster_dev
dev ...`` takes the arguments of ``dagster dev``.

``dagster dev`` starts the code server with a heartbeat: the code server shuts itself down after
45 s without one (and the server it spawns for the definitions after 30 s). A whole host paused
that long (a VM frozen, a laptop asleep) makes the check fire as the host resumes, before the
next heartbeat arrives. A code server that still hosts a run (tidemark's continuous run never
ends) then stays up but refuses every new run: no reconciliation, savepoint, restore or restart
could start until the continuous run ended (seen in a `make live` with every process frozen for
150 s, 2026-12-03; docs/reliability.md). A day of silence is tolerated instead. A code server
whose ``dagster dev`` is gone still ends: when it is killed with the process group that
`DagsterDev` stops, or after that day.
"""

from __future__ import annotations

import os

import dagster._cli.proxy_server_manager as proxy_server_manager
from dagster._cli import main

# How long the code server waits for a heartbeat from ``dagster dev`` before it shuts down.
PAUSE_TOLERANCE_SECONDS = 24 * 3600
# the definitions server's own (the code server's ``--heartbeat-ttl``, read from this variable)
DEFINITIONS_TTL_VARIABLE = "DAGSTER_GRPC_PROXY_HEARTBEAT_TTL_SECONDS"
# the code server's (``--heartbeat-timeout``; `dagster dev` passes this constant)
CODE_SERVER_TTL_NAME = "WEBSERVER_GRPC_SERVER_HEARTBEAT_TTL"


def tolerate_pauses() -> None:
    """Raise both timeouts; refuse to start if this Dagster no longer has the setting (a pinned
    version: an upgrade that moves it must be looked at, not silently lose the tolerance)."""
    if not isinstance(getattr(proxy_server_manager, CODE_SERVER_TTL_NAME, None), int):
        raise SystemExit(
            f"tidemark: dagster.{proxy_server_manager.__name__}.{CODE_SERVER_TTL_NAME} is gone in "
            "this Dagster version; see orchestration/cli/dagster_dev.py"
        )
    setattr(proxy_server_manager, CODE_SERVER_TTL_NAME, PAUSE_TOLERANCE_SECONDS)
    os.environ.setdefault(DEFINITIONS_TTL_VARIABLE, str(PAUSE_TOLERANCE_SECONDS))


if __name__ == "__main__":
    tolerate_pauses()
    main()
