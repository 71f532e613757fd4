"""Helpers for tests: landing hand-made events, running tidemark-dbt (no fixtures here)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from datetime import datetime, timedelta
from pathlib import Path

from streaming_jobs.core.config import TidemarkConfig
from streaming_jobs.storage.generator import write_files

TRANSACTION_FIELDS = (
    "event_id",
    "user_id",
    "card_id",
    "merchant",
    "amount",
    "currency",
    "status",
    "event_time",
)


def is_valid_transaction(line: str) -> bool:
    """An independent check of a transactions line (plain Python, no Spark)."""
    try:
        event = json.loads(line)
        if not isinstance(event, dict) or any(event.get(k) is None for k in TRANSACTION_FIELDS):
            return False
        float(event["amount"])
        datetime.fromisoformat(event["event_time"].replace("Z", "+00:00"))
        return True
    except (ValueError, TypeError):
        return False


def dbt(*args: str) -> subprocess.CompletedProcess:
    """tidemark-dbt (dbt with the job registry's vars) on the test's data root."""
    return subprocess.run(
        [str(Path(sys.executable).with_name("tidemark-dbt")), *args], capture_output=True, text=True
    )


def table_shape(spark, cfg: TidemarkConfig, item: str) -> tuple:
    """A lake table (``layer/name``) as Delta describes it: its columns (name, type,
    nullability), partition columns, properties, table features and file count."""
    from streaming_jobs.core.locations import Location

    path = Location.of(cfg.paths.table(*item.split("/"))).spark
    [detail] = spark.sql(f"describe detail delta.`{path}`").collect()
    columns = [
        (f.name, f.dataType, f.nullable) for f in spark.read.format("delta").load(path).schema
    ]
    # row tracking's hidden columns are named at random by each creation
    named = {k: "named" if k.endswith("ColumnName") else v for k, v in detail.properties.items()}
    features = sorted(detail.tableFeatures or [])
    return columns, detail.partitionColumns, named, features, detail.numFiles


# Columns a dbt row takes from the run that last recomputed it, not from the data
# (composed_through: the bronze version a composed row's run read up to, macros/compose.sql).
RUN_COLUMNS = ("reconciled_at", "stream_watermark", "composed_through")


def table_rows(cfg: TidemarkConfig, schema: str, name: str) -> list[tuple]:
    """A dbt table's rows, sorted, without the run's own columns (delta-rs)."""
    from deltalake import DeltaTable

    rows = DeltaTable(str(cfg.paths.dbt_table(schema, name))).to_pyarrow_table().to_pylist()
    return sorted(
        tuple(sorted((k, repr(v)) for k, v in row.items() if k not in RUN_COLUMNS)) for row in rows
    )


def scopes(stderr: str) -> dict[str, str]:
    """tidemark-dbt's scope line per job: 'zone_revenue_hourly: from 2026-..'."""
    out = {}
    for line in stderr.splitlines():
        if line.startswith("tidemark-dbt: ") and ": " in line[len("tidemark-dbt: ") :]:
            job, reason = line[len("tidemark-dbt: ") :].split(": ", 1)
            out[job] = reason
    return out


def windowed_counts_job(name: str, minutes: int) -> str:
    """A user's SQL job file: failed transactions per merchant and ``minutes``-long window."""
    return f"""-- {name}: failed transactions per merchant and window.
-- source: transactions
-- keys: merchant, window_start, window_end
-- measures: n
-- watermark: 5 minutes
select merchant, window.start as window_start, window.end as window_end, count(*) as n
from events
where status = 'FAILED'
group by merchant, window(event_time, '{minutes} minutes')
"""


def fail_bronze_batch(monkeypatch, after_write: bool) -> None:
    """The next bronze batch fails as a machine going down would: before its writes, or after
    them (before its checkpoint commit)."""
    from streaming_jobs.runtime import ingestion

    real = ingestion.append_once

    def append(df, path, app_id, version):
        if after_write:
            real(df, path, app_id, version)
        raise RuntimeError("the machine went down here")

    monkeypatch.setattr(ingestion, "append_once", append)


def land(
    cfg: TidemarkConfig, name: str, events: list[dict | str], stream: str = "transactions"
) -> Path:
    """Write one landing file of events (dicts become JSON; strings are written as they are),
    on the data root's disk or store; returns its place (a Path on a disk)."""
    from streaming_jobs.core import locations

    place = locations.Location.of(cfg.paths.landing_dir(stream)) / name
    text = "".join((e if isinstance(e, str) else json.dumps(e)) + "\n" for e in events)
    locations.write_bytes(place, text.encode())
    return place if place.on_store else place.path


def txn(
    event_id: str, user: str, minute: float, status: str = "FAILED", amount: float = 10.0
) -> dict:
    """A transaction at ``minute`` minutes after 2026-01-01T00:00:00Z."""
    seconds = round(minute * 60, 3)
    whole = int(seconds)
    millis = int(round((seconds - whole) * 1000))
    hh, rem = divmod(whole, 3600)
    mm, ss = divmod(rem, 60)
    day = 1 + hh // 24
    return {
        "event_id": event_id,
        "user_id": user,
        "card_id": f"c-{user}",
        "merchant": "m1",
        "amount": amount,
        "currency": "USD",
        "status": status,
        "event_time": f"2026-01-{day:02d}T{hh % 24:02d}:{mm:02d}:{ss:02d}.{millis:03d}Z",
    }


def click(event_id: str, user: str, minute: float, amount: float = 0.0) -> dict:
    """A click at ``minute`` minutes after 2026-01-01T00:00:00Z (a purchase when amount > 0)."""
    t = datetime(2026, 1, 1) + timedelta(minutes=minute)
    return {
        "event_id": event_id,
        "user_id": user,
        "page": "/",
        "action": "purchase" if amount else "view",
        "amount": amount,
        "event_time": t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z",
    }


def clicks_per_user(events) -> dict[str, list[tuple[datetime, float]]]:
    """Distinct clicks (first copy of each event id) per user, as sorted (time, amount)."""
    seen, by_user = set(), {}
    for e in events:
        if e["event_id"] not in seen:
            seen.add(e["event_id"])
            by_user.setdefault(e["user_id"], []).append(
                (datetime.fromisoformat(e["event_time"][:-1]), e["amount"])
            )
    return {user: sorted(clicks) for user, clicks in by_user.items()}


def write_wave(cfg, gen, files, wave: int) -> None:
    write_files(cfg.paths.landing_dir(gen.stream), gen, files, range(wave, wave + 1))


# Each job's code digests and version as tidemark 478b91e recorded them (its text digests),
# printed by that commit's `code_parts` and `job_version`
BY_TEXT = {
    "user_activity_profile": (
        "1004401ac267",
        {
            "ProfileProcessor": "a1bf496a662a",
            "build": "aa86a9978793",
            "latest_profile": "73ac0f2b3bc6",
            "streaming_jobs.stateful.dedup": "0a4641b1e114",
            "streaming_jobs.stateful.epochs": "620a0025381e",
            "streaming_jobs.stateful.frames": "a63e20f061a7",
        },
    ),
    "failed_txn_velocity": (
        "1c285c9c76c9",
        {
            "build": "e694c9d1214e",
            "streaming_jobs.stateful.dedup": "0a4641b1e114",
            "streaming_jobs.stateful.frames": "a63e20f061a7",
            "streaming_jobs.stateful.panes": "8332345d4aa2",
            "streaming_jobs.stateful.sliding": "2b222e0981be",
        },
    ),
}


def by_text(job: str, shape: dict) -> dict:
    """The record a checkpoint of ``job`` holds from before syntax digests (with ``shape``)."""
    version, code = BY_TEXT[job]
    from streaming_jobs.core.versions import version_of, version_parts
    from streaming_jobs.storage.registry import get_job, streams

    parts = {**version_parts(get_job(job), streams()), "code": code}
    assert version_of(parts) == version  # the rest of the parts as they were then
    return {"version": version, "parts": parts, "shape": shape}


def on_store(spark, cfg: TidemarkConfig, s3_bucket, folder: str = "root") -> TidemarkConfig:
    """``cfg`` with its data root at ``s3://<the test's bucket>/<folder>`` on the project's S3
    server (``s3_bucket``, the fixture's value), set for the session's Spark."""
    from dataclasses import replace

    from streaming_jobs.storage.spark import use_object_store

    _, s3_cfg, _, bucket = s3_bucket
    store = replace(cfg, s3=s3_cfg.s3).with_data_root(f"s3://{bucket}/{folder}")
    use_object_store(spark, store)
    return store


def failures_job(name: str, udf: str) -> str:
    """The file of a job ``name``: FAILED transactions per merchant per 10 minutes (keyed state:
    a dedup and windows, 5 minutes of watermark), each merchant passed through ``udf``, the
    body of a Python UDF of ``merchant`` that may fail as the test needs (it reads its flag
    file's path from ``TIDEMARK_TEST_FLAG``)."""
    body = textwrap.indent(textwrap.dedent(udf).strip(), " " * 4)
    return (
        textwrap.dedent(f'''
        """{name}: FAILED transactions per merchant per 10 minutes, through a UDF that fails."""
        import os

        from pyspark.sql import functions as F
        from pyspark.sql import types as T
        from streaming_jobs.stateful.dedup import dedup_within_watermark
        from streaming_jobs.spec import JobSpec, StateBound

        FLAG = os.environ["TIDEMARK_TEST_FLAG"]


        @F.udf(T.StringType())
        def through(merchant):
        ''')
        + body
        + textwrap.dedent(f'''


        def build(events, *, window, watermark):
            failed = dedup_within_watermark(events, "event_time", watermark).where(
                "status = 'FAILED'"
            )
            return (failed.withColumn("merchant", through("merchant"))
                    .groupBy("merchant", F.window("event_time", window).alias("w"))
                    .agg(F.count(F.lit(1)).alias("failures"))
                    .select("merchant", F.col("w.start").alias("window_start"),
                            F.col("w.end").alias("window_end"), "failures"))


        SPEC = JobSpec(
            name="{name}", description="FAILED per merchant per 10 min, through a failing UDF",
            source="transactions", keys=("merchant", "window_start", "window_end"),
            measures=("failures",), event_time="event_time",
            state=StateBound(watermark="5 minutes"), output_mode="append", build=build,
            params={{"window": "10 minutes"}},
        )
        ''')
    )
