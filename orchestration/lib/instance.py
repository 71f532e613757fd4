"""The Dagster home under the data root, with its dagster.yaml.

The file is tidemark's while its first line is `HEADER`: every `prepare_dagster_home` writes it
again from the registries, so a new job's checkpoint gets its run limit. Remove that line to
take the file over (storage in PostgreSQL, another run launcher): tidemark then leaves it alone.
"""

from __future__ import annotations

import os

import yaml

from streaming_jobs.core.config import TidemarkConfig

from orchestration.lib.concurrency import all_queries, run_limits

DEQUEUE_INTERVAL_SECONDS = 1

HEADER = "# Written by tidemark (orchestration/lib/instance.py); delete this line to edit the file."


def dagster_yaml(cfg: TidemarkConfig) -> str:
    settings = {
        "telemetry": {"enabled": False},
        # Runs overlap (a continuous run, a reconciliation, a savepoint run...): only what truly
        # conflicts is limited, see orchestration/lib/concurrency.py.
        "concurrency": {"runs": run_limits(all_queries(), cfg.ops.max_concurrent_runs)},
        # The daemon looks at the run queue every second, not every 5 s (Dagster's default): a
        # continuous run's restart waits there between the sensor's tick and its launch.
        "run_coordinator": {
            "module": "dagster.core.run_coordinator",
            "class": "QueuedRunCoordinator",
            "config": {"dequeue_interval_seconds": DEQUEUE_INTERVAL_SECONDS},
        },
        # A run that never starts or never finishes cancelling is failed, not left hanging.
        "run_monitoring": {
            "enabled": True,
            "start_timeout_seconds": 300,
            "cancel_timeout_seconds": 300,
            "poll_interval_seconds": 30,
        },
    }
    return f"{HEADER}\n" + yaml.safe_dump(settings, sort_keys=False)


def prepare_dagster_home(cfg: TidemarkConfig) -> str:
    home = cfg.paths.dagster_home
    home.mkdir(parents=True, exist_ok=True)
    config = home / "dagster.yaml"
    if not config.exists() or config.read_text().startswith(HEADER):
        text = dagster_yaml(cfg)
        if not config.exists() or config.read_text() != text:
            config.write_text(text)
    os.environ["DAGSTER_HOME"] = str(home)
    return str(home)
