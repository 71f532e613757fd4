"""Sensors that watch the running system: checkpoint health, platform health (job files,
settings, disk), state size, expectations, and the overview.

Each reports its verdicts where people look: asset check evaluations on the job's gold asset
(``checkpoint_health``, ``state_size``), asset observations (state size and the overview,
plotted over time), and alerts (`streaming_jobs.operations.alerts`: Delta first, then the log
and the webhook). Alerts are per incident: a condition that persists over many evaluations is
one alert, and its end is one resolution.

Sensors are light: they read checkpoint files and the ops tables (delta-rs) and never start a
JVM, so a tick takes a second or less, the first one after start included. They get the data
root through the ``tidemark`` resource, as checks and assets do.
"""

import json

import dagster as dg

from streaming_jobs.core.config import setting_problems
from streaming_jobs.storage.expectations import latest
from streaming_jobs.operations import alerts
from streaming_jobs.operations.state import growth, history, level
from streaming_jobs.core.checkpoints import query_name
from streaming_jobs.operations.health import check
from streaming_jobs.operations.savepoints import mend_corrupt, repairable, restorable
from streaming_jobs.operations.landing import account
from streaming_jobs.storage.registry import catalogue, registry

from orchestration.lib import keys
from orchestration.lib.concurrency import RECOVERS_TAG, checkpoint_tags, job_tags, run_in_flight
from orchestration.lib.evaluations import (
    checkpoint_health,
    firing_kinds,
    open_level,
    expectation_check_name,
    expectation_evaluation,
    state_evaluation,
    sync_alerts,
    sync_disk_space,
    sync_load_problems,
    sync_setting_problems,
)
from orchestration.lib.overview import ops_observations
from orchestration.lib.resources import TidemarkResource


@dg.sensor(
    name="checkpoint_health_sensor",
    job_name="recovery_job",
    minimum_interval_seconds=60,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Per job: checkpoint files readable, batches committing, the query not "
    "failed or held, not falling behind, the watermark not in the future "
    "(streaming_jobs/operations/health.py); per stream: ingestion healthy and "
    "every landing line accounted for (operations/landing.py). Alerts, and starts "
    "recovery_job for a broken checkpoint: a torn newest file set aside when that is safe "
    "(left to the start of a run that owns the checkpoint, when one is queued or in "
    "progress), else a job's latest savepoint restored; otherwise the alert names what "
    "mends it instead (a rebuild, a backup).",
)
def checkpoint_health_sensor(context: dg.SensorEvaluationContext, tidemark: TidemarkResource):
    cfg = tidemark.config()
    events, requests = [], []
    open_rows = alerts.open_alerts(cfg)
    found = catalogue()  # the files as they are now: one that broke, or was fixed, since load
    for spec in found.jobs.values():
        findings, evaluation = checkpoint_health(cfg, spec)
        events.append(evaluation)
        firing = firing_kinds(findings)
        changes = sync_alerts(
            cfg, spec.name, "checkpoint", firing, "checkpoint healthy again", open_rows
        )
        if repairable(findings):
            if not _mended_at_start(context, spec.name):
                requests.append(
                    _recovery_request("repair", changes, spec.name, job_tags(spec), job=True)
                )
        elif restorable(findings):
            requests.append(_recovery_request("restore", changes, spec.name, job_tags(spec)))
    for stream in found.streams:  # bronze ingestion: its checkpoint, and the landing contract
        query = query_name(stream)
        findings = mend_corrupt(cfg, query, check(cfg, query), ingestion=True)
        firing = firing_kinds(findings + account(cfg, stream).findings)
        changes = sync_alerts(
            cfg, query, "checkpoint", firing, "ingestion healthy again", open_rows
        )
        if repairable(findings) and not _mended_at_start(context, query):
            requests.append(_recovery_request("repair", changes, query, checkpoint_tags([query])))
    delivery = alerts.deliver(cfg)
    context.log.info(
        f"checkpoint health: {len(requests)} recovery runs requested; alerts sent "
        f"{len(delivery.sent)}, failed {len(delivery.failed)}, waiting {delivery.waiting}"
    )
    return dg.SensorResult(asset_events=events, run_requests=requests)


def _mended_at_start(context: dg.SensorEvaluationContext, query: str) -> bool:
    """Whether a run that owns ``query``'s checkpoint is queued or in progress: it sets a torn
    newest file aside at its start, as a recovery run would (`repairs.mend_at_start`). A
    recovery run asked now would queue behind it on the checkpoint's tag, behind a continuous
    run for as long as that runs, and find nothing to mend."""
    owner = run_in_flight(context.instance, tags=checkpoint_tags([query]))
    if owner is not None:
        context.log.info(
            f"{query}: run {owner.run_id} ({owner.job_name}, {owner.status.value}) owns its "
            "checkpoint and sets its torn newest file aside at its start: no recovery run asked"
        )
    return owner is not None


def _recovery_request(
    remedy: str, changes, query: str, tags: dict, *, job: bool = False
) -> dg.RunRequest:
    """A `recovery_job` run that restores (a job) or repairs (a job or an ingestion)
    ``query``'s checkpoint, once per incident of its ``checkpoint_corrupt`` alert."""
    incident = next(c.alert_id for c in changes if "checkpoint_corrupt" in c.alert_id)
    config = {"job": query}
    if remedy == "restore":
        config["restore"] = True
    elif job:  # a job's repair (an ingestion's is said by its name)
        config.update(restore=False, repair=True)
    return dg.RunRequest(
        run_key=f"{remedy}:{incident}",
        job_name="recovery_job",
        run_config={"ops": {"recover": {"config": config}}},
        tags={RECOVERS_TAG: query, **tags},
    )


@dg.sensor(
    name="platform_health_sensor",
    minimum_interval_seconds=60,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="What every job stands on: each job file loads (job_file), each TIDEMARK_* "
    "setting is valid (setting), the data root's disk has room (disk_space). Alerts.",
)
def platform_health_sensor(context: dg.SensorEvaluationContext, tidemark: TidemarkResource):
    cfg = tidemark.config()
    open_rows = alerts.open_alerts(cfg)
    # the files as they are now: one that broke, or was fixed, since the code location loaded
    sync_load_problems(cfg, catalogue().problems, open_rows)
    sync_setting_problems(cfg, setting_problems(), open_rows)
    sync_disk_space(cfg, open_rows)
    delivery = alerts.deliver(cfg)
    context.log.info(
        f"platform health: alerts sent {len(delivery.sent)}, failed {len(delivery.failed)}, "
        f"waiting {delivery.waiting}"
    )


@dg.sensor(
    name="state_size_sensor",
    minimum_interval_seconds=60,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Per job and stateful operator: state rows, memory and disk against the "
    "job's thresholds (with hysteresis), and growth that will reach critical "
    "soon.",
)
def state_size_sensor(context: dg.SensorEvaluationContext, tidemark: TidemarkResource):
    cfg = tidemark.config()
    seen = json.loads(context.cursor or "{}")
    events = []
    open_rows = alerts.open_alerts(cfg)
    for spec in registry().values():
        readings = history(cfg, spec.name)
        if not readings:
            continue
        latest = readings[-1]
        limits = spec.thresholds
        if seen.get(spec.name) != latest.batch_id:
            seen[spec.name] = latest.batch_id
            events.append(
                dg.AssetObservation(
                    asset_key=keys.gold(spec.name),
                    metadata={
                        "state_rows": dg.MetadataValue.int(latest.rows),
                        "state_memory_bytes": dg.MetadataValue.int(latest.memory_bytes),
                        "state_disk_bytes": dg.MetadataValue.int(latest.disk_bytes),
                        "batch_id": dg.MetadataValue.int(latest.batch_id),
                        **{
                            f"rows.{o.operator}": dg.MetadataValue.int(o.rows)
                            for o in latest.operators
                        },
                    },
                )
            )
        verdict, why = level(latest, limits, open_level(cfg, spec.name, open_rows))
        events.append(state_evaluation(cfg, spec, readings, (verdict, why)))
        firing = {}
        if verdict != "ok":
            firing["state_size"] = (verdict, f"{spec.name}: {why}")
        trend = growth(readings, limits)
        horizon = cfg.ops.growth_horizon_hours
        if (
            verdict != "critical"
            and trend
            and trend.hours_to_critical is not None
            and trend.hours_to_critical <= horizon
        ):
            firing["state_growth"] = (
                "warning",
                (
                    f"{spec.name}: state grows {trend.rows_per_hour:,.0f} rows/h and reaches "
                    f"critical ({limits.critical_rows:,} rows) in {trend.hours_to_critical:.1f} h"
                ),
            )
        sync_alerts(cfg, spec.name, "state", firing, f"{spec.name}: {why}", open_rows)
    alerts.deliver(cfg)
    return dg.SensorResult(asset_events=events, cursor=json.dumps(seen, sort_keys=True))


@dg.sensor(
    name="expectations_sensor",
    minimum_interval_seconds=60,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Per declared expectation of a stream or a job: the rows failing it in "
    "each new batch (ops/expectations), as its expect_<name> check and as "
    "plotted observations of the asset.",
)
def expectations_sensor(context: dg.SensorEvaluationContext, tidemark: TidemarkResource):
    cfg = tidemark.config()
    seen = json.loads(context.cursor or "{}")
    found = catalogue()
    owners = [(keys.gold(n), n, spec.expectations) for n, spec in found.jobs.items()]
    owners += [
        (keys.bronze(n), query_name(n), stream.expectations) for n, stream in found.streams.items()
    ]
    # a rule added since the code location loaded has no check yet: reported after a reload
    repository = context.repository_def
    declared = set(repository.asset_graph.asset_check_keys) if repository else None
    events = []
    for asset_key, query, expectations in owners:
        if declared is not None:
            expectations = [
                e
                for e in expectations
                if dg.AssetCheckKey(asset_key, expectation_check_name(e)) in declared
            ]
        if not expectations:
            continue
        recorded = latest(cfg, query)
        newest = max(
            (str(r["recorded_at"]) for rows in recorded.values() for r in rows), default=None
        )
        if newest is None or seen.get(query) == newest:
            continue
        seen[query] = newest
        observed = {}
        for e in expectations:
            rows = recorded.get(e.name, [])
            events.append(expectation_evaluation(asset_key, e, rows))
            if rows:
                observed[f"expect.{e.name}.rows_failed"] = dg.MetadataValue.int(
                    rows[-1]["rows_failed"]
                )
        observed["expect.rows_checked"] = dg.MetadataValue.int(
            max(rows[-1]["rows_checked"] for rows in recorded.values() if rows)
        )
        events.append(dg.AssetObservation(asset_key=asset_key, metadata=observed))
    return dg.SensorResult(asset_events=events, cursor=json.dumps(seen, sort_keys=True))


@dg.sensor(
    name="ops_overview_sensor",
    minimum_interval_seconds=60,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Every job in one place (ops/overview: state, watermark lag, last batch, "
    "reconciliation, open alerts) and the ops tables' own observations.",
)
def ops_overview_sensor(context: dg.SensorEvaluationContext, tidemark: TidemarkResource):
    return dg.SensorResult(asset_events=ops_observations(tidemark.config()))


@dg.definitions
def defs() -> dg.Definitions:
    return dg.Definitions(
        sensors=[
            checkpoint_health_sensor,
            platform_health_sensor,
            state_size_sensor,
            expectations_sensor,
            ops_overview_sensor,
        ]
    )
