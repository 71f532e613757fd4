"""The Dagster home under the data root, with its dagster.yaml."""

from __future__ import annotations

import os

from streaming_jobs.config import TidemarkConfig

DAGSTER_YAML = """\
# Written by tidemark (orchestration/instance.py). Storage defaults to SQLite in this folder.
telemetry:
  enabled: false
# One run at a time: each run hosts its own JVM, two runs must not drive the same streaming
# checkpoint at once, and only one dbt process may open the Derby metastore.
concurrency:
  runs:
    max_concurrent_runs: 1
"""


def prepare_dagster_home(cfg: TidemarkConfig) -> str:
    home = cfg.paths.dagster_home
    home.mkdir(parents=True, exist_ok=True)
    config = home / "dagster.yaml"
    if not config.exists():
        config.write_text(DAGSTER_YAML)
    os.environ["DAGSTER_HOME"] = str(home)
    return str(home)
