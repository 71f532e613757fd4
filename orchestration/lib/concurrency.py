"""Which runs may overlap: run tags that name what a run owns, and the instance's limits on them.

The Dagster instance runs many runs at once: a continuous run, a scheduled reconciliation, a
savepoint run, a recovery run, sensor ticks. What truly conflicts is limited, nothing else:

- one owner per streaming checkpoint: a run that drives checkpoints carries the tag
  ``.dagster/tidemark/checkpoint.<query>`` for each, and the instance admits one run per such
  tag (the queue holds a second one until the first ends). The prefix hides them in the UI's
  runs (Dagster keeps its own pool claims under it): a run that hosts every job would otherwise
  show a dozen ownership tags above the few that tell runs apart. The OS lock on the checkpoint
  (`streaming_jobs.core.checkpoints`) still guards every run, tagged or not: a run launched with
  no tags (an ad-hoc materialization in the UI) is refused at once, naming the owner;
- one reconciliation at a time (``tidemark/reconciliation``): two dbt builds would replace the
  same recon tables under each other.

Dagster's pools do not fit ownership: a pool is fixed on an asset or op, while a continuous
run's one op hosts the jobs its config names, and a run of one gold asset drives its sources'
ingestion too. What a run owns is known when it is launched, so it is said by run tags.

Savepoint runs carry no checkpoint tag: for a job a continuous run hosts they ask that run for
the savepoint (`savepoints.request`) instead of taking the checkpoint.
"""

from __future__ import annotations

from streaming_jobs.core.checkpoints import query_name
from streaming_jobs.storage.registry import registry, streams
from streaming_jobs.spec import JobSpec

CHECKPOINT_TAG = ".dagster/tidemark/checkpoint."
RECON_TAG = "tidemark/reconciliation"
RECOVERS_TAG = "tidemark/recovers"  # a recovery run's job or ingestion
CONTINUOUS_TAG = "tidemark/continuous"
OWNED = "owned"


def all_queries() -> list[str]:
    """Every checkpoint a run can drive: the bronze ingestion of each stream, then each job."""
    return [*(query_name(s) for s in streams()), *registry()]


def checkpoint_tags(queries) -> dict[str, str]:
    return {f"{CHECKPOINT_TAG}{q}": OWNED for q in queries}


def job_tags(spec: JobSpec) -> dict[str, str]:
    """What a run of one job (its sources' ingestion, then the job) owns."""
    return checkpoint_tags([*(query_name(s) for s in spec.sources), spec.name])


def run_limits(queries, max_concurrent_runs: int) -> dict:
    """The ``concurrency.runs`` section of the instance's dagster.yaml."""
    return {
        "max_concurrent_runs": max_concurrent_runs,
        "tag_concurrency_limits": [
            {"key": RECON_TAG, "limit": 1},
            *({"key": f"{CHECKPOINT_TAG}{q}", "limit": 1} for q in queries),
        ],
    }


IN_FLIGHT = ("QUEUED", "NOT_STARTED", "STARTING", "STARTED", "CANCELING")


def run_in_flight(instance, job_name: str | None = None, tags: dict | None = None):
    """A run of the job (or with the tags) that is queued or in progress, if any: schedules
    skip a tick for it."""
    from dagster import DagsterRunStatus, RunsFilter

    records = instance.get_run_records(
        filters=RunsFilter(
            job_name=job_name, tags=tags, statuses=[DagsterRunStatus(s) for s in IN_FLIGHT]
        ),
        limit=1,
    )
    return records[0].dagster_run if records else None
