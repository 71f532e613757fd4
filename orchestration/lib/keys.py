"""Asset keys, in one place: they mirror the lake (``bronze/<stream>``, ``gold/<job>``,
``ops/<table>``) and the dbt layers (``staging/``, ``batch/``, ``recon/``)."""

from __future__ import annotations

from dagster import AssetKey

from streaming_jobs.core.checkpoints import stream_of

STREAM_PROGRESS = AssetKey(["ops", "stream_progress"])
STREAM_LATE_ROWS = AssetKey(["ops", "stream_late_rows"])
STREAM_FAILURES = AssetKey(["ops", "stream_failures"])
ALERTS = AssetKey(["ops", "alerts"])
OVERVIEW = AssetKey(["ops", "overview"])
RECON_SUMMARY = AssetKey(["recon", "recon_summary"])


def bronze(stream: str) -> AssetKey:
    return AssetKey(["bronze", stream])


def gold(job: str) -> AssetKey:
    return AssetKey(["gold", job])


def recon(job: str) -> AssetKey:
    return AssetKey(["recon", f"recon_{job}"])


def of_query(query: str) -> AssetKey:
    """The asset a streaming query writes: its stream's bronze table, or its job's gold."""
    stream = stream_of(query)
    return bronze(stream) if stream is not None else gold(query)


def table_path(cfg, key: AssetKey):
    """Where a lake asset's Delta table lives under the data root."""
    return cfg.paths.table(key.path[0], key.path[-1])
