"""The ``--vars`` every dbt invocation gets, built by pure functions from the job registry and
the streams' recorded position.

- ``jobs``: per reconciled job its spec as plain values (keys, measures, tolerance, window,
  slide, watermark or TTL in seconds, its sources' event-time columns), so the batch models use
  the very parameters the stream uses;
- ``progress_version``: one version of ``ops/stream_progress`` for every model of the
  invocation, and ``gold_versions``: each job's gold table as of the last batch that version
  records. Streams that keep running while dbt reads cannot make the models disagree.

The dbt asset builds them in the open (`orchestration.defs.dbt.assets`); ``tidemark-dbt`` builds
them for dbt run by hand.
"""

from __future__ import annotations

from streaming_jobs.core import locations
from streaming_jobs.storage import ops_tables
from streaming_jobs.core.config import TidemarkConfig
from streaming_jobs.intervals import interval_seconds
from streaming_jobs.storage.registry import stream_schema
from streaming_jobs.spec import JobSpec


def job_vars(jobs: dict) -> dict:
    """The jobs dbt reconciles, with their spec as plain values (a pure function of the specs).

    A job with neither hand-written recon models nor a ``batch_sql`` still streams; it is just
    not reconciled (dbt's loops over ``var('jobs')`` would otherwise ref a model that is not
    there).
    """
    out = {}
    for name, spec in jobs.items():
        params = {
            "source": spec.source,
            "tolerance": spec.tolerance,
            "keys": list(spec.keys),
            "warn_share": spec.recon_warn_share,
            "measures": list(spec.measures),
            "event_time": spec.event_time,
            # each source stream with its own event-time column (lateness replay)
            "sources": {s: stream_schema(s).event_time for s in spec.sources},
        }
        if spec.reads:
            # the only rows of its source the job reads, and so counts late (lateness replay)
            params["reads"] = {spec.source: spec.reads}
        bounds = {"watermark": spec.state.watermark, "ttl": spec.state.ttl}
        for key, value in {**spec.params, **{k: v for k, v in bounds.items() if v}}.items():
            seconds = interval_seconds(value) if isinstance(value, str) else None
            params[f"{key}_seconds" if seconds is not None else key] = (
                seconds if seconds is not None else value
            )
        if spec.recon_partition:
            # incremental reconciliation by day (orchestration/recon/recon_scope.py): hand-written
            # recon models, and generated ones of windowed jobs (macros/batch_by_basis.sql)
            params["recon_partition"] = spec.recon_partition
            params["recon_read_back_seconds"] = interval_seconds(spec.recon_read_back) or 0
        if spec.recon_composed and not spec.batch_sql:
            # its batch model composes its rows from its table and the new events
            params["recon_composed"] = True
        if spec.batch_sql:
            # what batch_by_basis needs to run the job's own SQL over bronze
            params["batch_sql"] = spec.batch_sql.strip().rstrip(";")
            # each source's dedup key (one column, several, or every field) and the rest
            dedup = {s: stream_schema(s).dedup_key for s in spec.sources}
            params["source_keys"] = {s: list(key) for s, key in dedup.items()}
            params["source_columns"] = {
                s: [f for f in stream_schema(s).field_names if f not in dedup[s]]
                for s in spec.sources
            }
        out[name] = params
    return out


def last_batches(progress_rows: list[dict]) -> dict[str, dict]:
    """Per job: its last recorded batch that has a gold version (a pure function of the rows).

    Only the job's current lineage counts (the query id of its newest row): a job rebuilt from
    scratch has a new gold table, whose versions start again.
    """
    newest: dict[str, dict] = {}
    for row in progress_rows:
        job = row["job"]
        if job not in newest or (row["ts"], row["batch_id"]) > (
            newest[job]["ts"],
            newest[job]["batch_id"],
        ):
            newest[job] = row
    out = {}
    for job, last in newest.items():
        lineage = [
            r
            for r in progress_rows
            if r["job"] == job
            and r["query_id"] == last["query_id"]
            and r["sink_version"] is not None
        ]
        if lineage:
            out[job] = max(lineage, key=lambda r: (r["batch_id"], r["sink_version"]))
    return out


def read_progress(cfg: TidemarkConfig, jobs: dict) -> tuple[int | None, list[dict]]:
    """The one read of ``ops/stream_progress`` an invocation makes: its version now, pinned
    for every model, and the jobs' rows as of that version (what the position and the
    reconciliation scope are taken from)."""
    version = ops_tables.version(cfg, "stream_progress")
    if version is None:
        return None, []
    # a job seen through its rebuild's shadow: the shadow's rows, as the job's
    names = {shadow_name(job) if job in cfg.shadowed else job: job for job in jobs}
    rows = ops_tables.read(
        cfg,
        "stream_progress",
        as_of=version,
        where=f"job in ({', '.join(map(ops_tables.literal, names))})" if names else "false",
        columns=["job", "query_id", "batch_id", "ts", "sink_version", "source_versions"],
    )
    for row in rows:
        row["job"] = names[row["job"]]
    return version, rows


def shadow_name(job: str) -> str:
    """The name a rebuild's shadow of ``job`` records its ops rows under."""
    from streaming_jobs.storage.swaps import SHADOW

    return f"{job}{SHADOW}"


def position_vars(
    cfg: TidemarkConfig, jobs: dict, progress: tuple[int | None, list[dict]] | None = None
) -> dict:
    """The streams' committed position, pinned for one dbt invocation (see the module doc);
    ``progress``: what `read_progress` returned (read here when not given)."""
    from streaming_jobs.core.checkpoints import query_id
    from streaming_jobs.core.delta_log import latest_version, version_as_of_batch
    from streaming_jobs.core.delta_log import sink_app_id

    version, rows = progress if progress is not None else read_progress(cfg, jobs)
    if version is None:
        return {}
    recorded = last_batches(rows)
    gold = {}
    for job, spec in jobs.items():
        # The table's version first, then the checkpoint: a stream writes only after its
        # checkpoint has a query id, so a job found without one had written nothing by then.
        latest = latest_version(cfg.paths.table("gold", job))
        current = query_id(cfg.paths.checkpoint(job))
        if current is None:
            # never ran (yet): pin it where it stands, or a job starting while dbt reads would
            # show rows whose progress this invocation does not see
            if latest is not None:
                gold[job] = latest
            continue
        last = recorded.get(job)
        if last is None or last["query_id"] != current:
            # no batch of this checkpoint recorded yet: gold as it was before its first batch
            last = {"batch_id": -1, "sink_version": -1}
        pinned = version_as_of_batch(
            cfg.paths.table("gold", job),
            sink_app_id(spec, current),
            last["batch_id"],
            last["sink_version"],
        )
        if pinned >= 0:
            gold[job] = pinned
    return {"progress_version": version, "gold_versions": gold}


NUMERIC = ("byte", "short", "integer", "long", "float", "double", "decimal")


def text_measures(types: dict[str, dict[str, str]], jobs: dict[str, JobSpec]) -> dict:
    """Per job, its measures whose gold column is not a number (a pure function of the types:
    job -> column -> Delta type name). The recon compares those for exact equality."""
    out = {}
    for job, columns in types.items():
        text = [
            m for m in jobs[job].measures if m in columns and not columns[m].startswith(NUMERIC)
        ]
        if text:
            out[job] = text
    return out


def gold_types(cfg: TidemarkConfig, jobs: dict) -> dict[str, dict[str, str]]:
    """Each existing gold table's column types, from its Delta log (delta-rs, no JVM)."""
    from deltalake.exceptions import TableNotFoundError

    out = {}
    for job in jobs:
        try:
            schema = locations.delta_table(cfg.paths.table("gold", job)).schema()
        except TableNotFoundError:
            continue
        out[job] = {f.name: str(getattr(f.type, "type", f.type)) for f in schema.fields}
    return out


def dbt_vars(
    jobs: dict[str, JobSpec],
    cfg: TidemarkConfig | None = None,
    full: bool = False,
    partitions_from: str | None = None,
) -> dict:
    """Every var: the jobs, and with ``cfg`` the pinned position of the streams, the measures
    that are not numbers and the days each job's reconciliation recomputes (all with
    ``full``: a backfill; from ``partitions_from`` at least: the first day of the run's
    partitions)."""
    out = {"jobs": job_vars(jobs)}
    if cfg is not None:
        from orchestration.recon.project import run_project_dir
        from orchestration.recon.recon_scope import recon_scope_vars

        progress = read_progress(cfg, jobs)
        out.update(position_vars(cfg, jobs, progress))
        # from the same rows: the run's positions are the pinned version's
        out.update(
            recon_scope_vars(
                cfg, jobs, out["jobs"], run_project_dir(cfg), progress[1], full, partitions_from
            )
        )
        out["text_measures"] = text_measures(gold_types(cfg, jobs), jobs)
        out["watermark_ahead_seconds"] = int(cfg.ops.watermark_ahead_seconds)
    return out
