"""The servers a command starts for its data root, all on 127.0.0.1 and all with one
lifecycle (`streaming_jobs.services.lifecycle`): the SQL endpoint, the project's Kafka broker
when a stream reads Kafka, the project's Spark cluster when TIDEMARK_SPARK_MASTER names it."""

from __future__ import annotations

import os

from streaming_jobs.core.config import TidemarkConfig
from streaming_jobs.services import sql_endpoint
from streaming_jobs.services.sql_endpoint import Endpoint


def start_sql_endpoint(
    cfg: TidemarkConfig, timeout: float = 300.0, *, owned: bool = True
) -> Endpoint:
    """Start the data root's SQL endpoint unless it runs; return its address once it answers.

    ``owned``: it stops by itself when this process dies (``tidemark dev``, ``live``, tests);
    without, it runs until stopped (``tidemark sql start``).
    """
    return sql_endpoint.start(cfg, owned=owned, timeout=timeout)


def describe_endpoint(cfg: TidemarkConfig, endpoint: Endpoint) -> str:
    """host:port and what it is: the data root's own (its pid and log) or a shared one."""
    if cfg.sql.shared:
        return (
            f"{endpoint.host}:{endpoint.port} (shared, TIDEMARK_SQL_ENDPOINT; dbt schemas "
            f"{cfg.sql.schema_prefix}staging, {cfg.sql.schema_prefix}batch, "
            f"{cfg.sql.schema_prefix}recon)"
        )
    return f"{endpoint.host}:{endpoint.port} (pid {endpoint.pid}; log {cfg.paths.logs / 'sql_endpoint.log'})"


def stop_sql_endpoint(cfg: TidemarkConfig, timeout: float = 60.0) -> bool:
    """Stop the data root's SQL endpoint cleanly (SIGTERM, then SIGKILL); False if none ran."""
    return sql_endpoint.stop(cfg, timeout)


def start_kafka_if_used(cfg: TidemarkConfig) -> str | None:
    """When a registered stream reads Kafka and no brokers of your own are named
    (TIDEMARK_KAFKA_BOOTSTRAP), start the project's broker for this process (it stops when the
    process ends); say which brokers are used, or None without Kafka."""
    from streaming_jobs.services import kafka_broker
    from streaming_jobs.storage.kafka import source_of
    from streaming_jobs.storage.registry import streams

    if not any(source_of(cfg, schema) == "kafka" for schema in streams().values()):
        return None
    if os.environ.get("TIDEMARK_KAFKA_BOOTSTRAP"):
        return f"brokers {cfg.kafka.bootstrap}"
    broker = kafka_broker.start(cfg)
    return f"the project's broker on {broker.bootstrap} (log {cfg.paths.logs / 'kafka.log'})"


def start_store_if_used(cfg: TidemarkConfig) -> str | None:
    """With the data root on an object store: start the project's own server when it is the
    endpoint and does not run (it stops when this process ends), and make the bucket unless it
    is there; say where the data goes, or None for a local data root."""
    from streaming_jobs.core.stores import ensure_bucket
    from streaming_jobs.services import object_store

    if not cfg.on_store:
        return None
    server = None
    if cfg.s3.own_server:
        server = object_store.discover(cfg) or object_store.start(cfg)
    ensure_bucket(cfg, cfg.data_root.bucket)
    where = (
        f"the project's S3 server on {server.endpoint} (files {cfg.s3.home})"
        if server
        else cfg.s3.endpoint
    )
    return f"{cfg.data_root} on {where}; working state in {cfg.work_root}"


def start_cluster_if_used(cfg: TidemarkConfig) -> str | None:
    """When TIDEMARK_SPARK_MASTER names the project's own cluster (spark://127.0.0.1:<its
    port>) and it does not run, start it for this process (it stops when the process ends);
    say which cluster is used, or None in local mode or on a cluster of your own."""
    from streaming_jobs.services import spark_cluster

    if cfg.spark.master != spark_cluster.master_url(cfg):
        return None
    found = spark_cluster.discover(cfg) or spark_cluster.start(cfg)
    return (
        f"the project's Spark cluster {found.master} ({found.workers} workers, UI "
        f"{found.ui}; logs {cfg.paths.logs}/spark-*.log)"
    )
