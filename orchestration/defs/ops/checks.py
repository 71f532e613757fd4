"""The ops checks, declared on every job's gold asset: ``checkpoint_health`` and ``state_size``;
and one ``expect_<name>`` per declared expectation, on the stream's bronze asset or the job's
gold asset.

The ops sensors report them on every tick; they can also be run by hand (or by the whole-graph
job). None blocks anything: they are signals, the sensors raise the alerts (a ``fail``
expectation has already stopped its query).
"""

import dagster as dg

from streaming_jobs.storage.expectations import latest
from streaming_jobs.core.checkpoints import query_name
from streaming_jobs.storage.registry import catalogue
from streaming_jobs.spec import JobSpec

from orchestration.lib import keys
from orchestration.lib.evaluations import (
    CHECKPOINT_CHECK,
    STATE_CHECK,
    checkpoint_health,
    expectation_check_name,
    expectation_evaluation,
    state_evaluation,
)
from orchestration.lib.resources import TidemarkResource


def _result(evaluation: dg.AssetCheckEvaluation) -> dg.AssetCheckResult:
    return dg.AssetCheckResult(
        passed=evaluation.passed,
        severity=evaluation.severity,
        metadata=evaluation.metadata,
        description=evaluation.description,
    )


def checks_for(spec: JobSpec) -> list[dg.AssetChecksDefinition]:
    @dg.asset_check(
        asset=keys.gold(spec.name),
        name=CHECKPOINT_CHECK,
        blocking=False,
        description="Checkpoint files readable, batches committing, the query not "
        "failed, not falling behind (reported by "
        "checkpoint_health_sensor every minute).",
    )
    def health(tidemark: TidemarkResource) -> dg.AssetCheckResult:
        return _result(checkpoint_health(tidemark.config(), spec)[1])

    @dg.asset_check(
        asset=keys.gold(spec.name),
        name=STATE_CHECK,
        blocking=False,
        description="State rows and bytes under the job's warn and critical "
        "thresholds (reported by state_size_sensor every minute).",
    )
    def state(tidemark: TidemarkResource) -> dg.AssetCheckResult:
        return _result(state_evaluation(tidemark.config(), spec))

    return [health, state]


def expectation_checks(asset_key: dg.AssetKey, query: str, expectations) -> list:
    """One check per declared expectation of ``query`` (a job, or ``bronze_<stream>``)."""
    out = []
    for e in expectations:

        @dg.asset_check(
            asset=asset_key,
            name=expectation_check_name(e),
            blocking=False,
            description=f"Expectation {e.name}: {e.rule} (on violation: "
            f"{e.action}); rows failing it per batch (reported by "
            "expectations_sensor).",
        )
        def expectation(tidemark: TidemarkResource, e=e) -> dg.AssetCheckResult:
            rows = latest(tidemark.config(), query).get(e.name, [])
            return _result(expectation_evaluation(asset_key, e, rows))

        out.append(expectation)
    return out


def ops_checks() -> list[dg.AssetChecksDefinition]:
    found = catalogue()
    checks = [check for spec in found.jobs.values() for check in checks_for(spec)]
    checks += [
        c
        for spec in found.jobs.values()
        for c in expectation_checks(keys.gold(spec.name), spec.name, spec.expectations)
    ]
    checks += [
        c
        for name, stream in found.streams.items()
        for c in expectation_checks(keys.bronze(name), query_name(name), stream.expectations)
    ]
    return checks


@dg.definitions
def defs() -> dg.Definitions:
    return dg.Definitions(asset_checks=ops_checks())
