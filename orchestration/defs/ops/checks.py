"""The ops checks, declared on every job's gold asset: ``checkpoint_health`` and ``state_size``.

The ops sensors report them on every tick; they can also be run by hand (or by the whole-graph
job). Neither blocks anything: they are signals, the sensors raise the alerts.
"""

import dagster as dg

from streaming_jobs.registry import registry
from streaming_jobs.spec import JobSpec

from orchestration import keys
from orchestration.evaluations import (CHECKPOINT_CHECK, STATE_CHECK, checkpoint_health,
                                       state_evaluation)
from orchestration.resources import TidemarkResource


def _result(evaluation: dg.AssetCheckEvaluation) -> dg.AssetCheckResult:
    return dg.AssetCheckResult(passed=evaluation.passed, severity=evaluation.severity,
                               metadata=evaluation.metadata)


def checks_for(spec: JobSpec) -> list[dg.AssetChecksDefinition]:
    @dg.asset_check(asset=keys.gold(spec.name), name=CHECKPOINT_CHECK, blocking=False,
                    description="Checkpoint files readable, batches committing, the query not "
                                "failed, not falling behind (reported by "
                                "checkpoint_health_sensor every minute).")
    def health(tidemark: TidemarkResource) -> dg.AssetCheckResult:
        return _result(checkpoint_health(tidemark.config(), spec)[1])

    @dg.asset_check(asset=keys.gold(spec.name), name=STATE_CHECK, blocking=False,
                    description="State rows and bytes under the job's warn and critical "
                                "thresholds (reported by state_size_sensor every minute).")
    def state(tidemark: TidemarkResource) -> dg.AssetCheckResult:
        return _result(state_evaluation(tidemark.config(), spec))

    return [health, state]


def ops_checks() -> list[dg.AssetChecksDefinition]:
    return [check for spec in registry().values() for check in checks_for(spec)]


@dg.definitions
def defs() -> dg.Definitions:
    return dg.Definitions(asset_checks=ops_checks())
