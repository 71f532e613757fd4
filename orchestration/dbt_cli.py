"""``tidemark-dbt``: the dbt command line with tidemark's SparkSession and job parameters.

dbt-spark's session method calls ``SparkSession.builder.getOrCreate()``; starting the session
here first, from `streaming_jobs.spark`, gives dbt the same Delta, time-zone and jar settings as
the streaming jobs, plus the Derby metastore under the data root (this process is the only one
that opens it). The job registry is passed as ``--vars`` so batch models use the very window,
slide and tolerance the stream uses. Dagster's DbtCliResource runs this instead of ``dbt``.
"""

from __future__ import annotations

import json
import os
import sys

from streaming_jobs.config import TidemarkConfig
from streaming_jobs.jobs.intervals import interval_seconds
from streaming_jobs.schemas import stream_schema

# Commands that run SQL need Spark; parse, ls, clean, debug do not.
NEEDS_SPARK = {"build", "run", "test", "seed", "snapshot", "show", "compile", "docs", "run-operation"}
TAKES_VARS = NEEDS_SPARK | {"parse", "list", "ls"}


def dbt_vars() -> dict:
    """The jobs dbt reconciles (`reconciled_jobs`), with their spec as plain values.

    A job with neither hand-written recon models nor a ``batch_sql`` still streams; it is just
    not reconciled (dbt's loops over ``var('jobs')`` would otherwise ref a model that is not
    there).
    """
    from orchestration.dbt_models import reconciled_jobs

    jobs = {}
    for name, spec in reconciled_jobs().items():
        params = {"source": spec.source, "tolerance": spec.tolerance, "keys": list(spec.keys),
                  "warn_share": spec.recon_warn_share,
                  "measures": list(spec.measures), "event_time": spec.event_time,
                  # each source stream with its own event-time column (lateness replay)
                  "sources": {s: stream_schema(s).event_time for s in spec.sources}}
        bounds = {"watermark": spec.state.watermark, "ttl": spec.state.ttl}
        for key, value in {**spec.params, **{k: v for k, v in bounds.items() if v}}.items():
            seconds = interval_seconds(value) if isinstance(value, str) else None
            params[f"{key}_seconds" if seconds is not None else key] = (
                seconds if seconds is not None else value)
        jobs[name] = params
    return {"jobs": jobs}


def with_vars(args: list[str]) -> list[str]:
    command_at = next((i for i, a in enumerate(args) if not a.startswith("-")), None)
    if command_at is None or args[command_at] not in TAKES_VARS or "--vars" in args:
        return args
    return [*args[:command_at + 1], "--vars", json.dumps(dbt_vars()), *args[command_at + 1:]]


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    cfg = TidemarkConfig.from_env()
    os.environ.setdefault("TIDEMARK_DATA_ROOT", str(cfg.data_root))
    from orchestration.project import run_project_dir

    os.environ.setdefault("DBT_PROFILES_DIR", str(run_project_dir(cfg)))
    os.environ.setdefault("DBT_PROJECT_DIR", str(run_project_dir(cfg)))
    os.environ.setdefault("DBT_TARGET_PATH", str(cfg.paths.dbt / "target"))
    os.environ.setdefault("DBT_LOG_PATH", str(cfg.paths.dbt / "logs"))
    from orchestration.dbt_models import sync

    sync(cfg)  # the data root's copy of the project, with the models generated from the registries
    command = next((a for a in args if not a.startswith("-")), None)
    if command in NEEDS_SPARK:
        from streaming_jobs.spark import get_spark
        from streaming_jobs.tables import ensure_lake

        # Models read every lake table: a stream that never ran yet has an empty one.
        ensure_lake(get_spark(cfg, hive_metastore=True), cfg)
    from dbt.cli.main import dbtRunner

    result = dbtRunner().invoke(with_vars(args))
    if result.exception is not None:
        return 2
    return 0 if result.success else 1


if __name__ == "__main__":
    raise SystemExit(main())
