"""Reconciliation's Dagster partitions: one per day of event time (UTC).

The dbt assets (staging, batch and recon models) share a ``DailyPartitionsDefinition`` from
``TIDEMARK_RECON_START_DATE`` to today. What a run's partitions mean depends on who asked:

- **incremental** (run tag ``tidemark/recon: incremental``: the schedule, the automation
  sensor, ``tidemark live``, ``tidemark run``): the run recomputes what its new events can
  change (`orchestration.recon.recon_scope`): late events reach back into earlier days, windows that
  closed since finish the day before. It is labelled with today's partition, and each recon
  model's materialization says from which day its job was recomputed (``recomputed_from``).
  Each batch and recon table of a job with a day is also labelled with the days the run
  rewrote in it that hold rows (`labelled_days`: a materialization per day, logged by the run,
  the newest ``MAX_LABELLED_DAYS`` of them), so that a day's partition badge says whether that
  day of data was reconciled. Days without a row are not labelled: a first reconciliation of
  a year of history would otherwise write 23 x 365 events to the instance's event log
  (measured: a run labelled with 693 days of 23 assets had not finished recording them after
  14 minutes; about 7 ms per event on SQLite). The views, the lateness tables and the summary
  cover every day: they carry the run's partition only.
- **chosen partitions** (no mode tag: the UI's materialize or backfill, ``tidemark materialize
  --partition``): every job recomputes from the range's first day at least (earlier when its
  new events reach further back). A range that starts at the first partition is a full
  reconciliation: a backfill of every partition is exactly ``tidemark/recon: full``.
- **full** (``tidemark/recon: full``): every day of every job, whatever the range.

Days after a range's end are recomputed as well: a job's batch and recon tables replace every
day from the first recomputed one in a single commit (windows and sessions cross midnight, and
one commit per run keeps a crash from leaving half a range new).

Keyed-state jobs without a day (``recon_partition`` unset, e.g. a profile) are composed from
their table and the new events when ``recon_composed``, else recomputed in full by every run;
their tables carry the partitions of the run like the others.
"""

from __future__ import annotations

import dagster as dg

from streaming_jobs.core.config import ConfigError, TidemarkConfig

RECON_MODE_TAG = "tidemark/recon"
FULL, INCREMENTAL = "full", "incremental"
RANGE_START, RANGE_END = "dagster/asset_partition_range_start", "dagster/asset_partition_range_end"
PARTITION = "dagster/partition"
# the most days one run labels per table (its newest): a year, about 2.5 s of event log each
MAX_LABELLED_DAYS = 366
# the metadata key of those day labels (each names the run that rewrote the day)
DAY_LABEL = "rewritten_by_run"


def partitions_def(cfg: TidemarkConfig) -> dg.DailyPartitionsDefinition:
    """Days of event time from ``TIDEMARK_RECON_START_DATE`` to today (UTC) included: today's
    events are reconciled while the day runs."""
    return dg.DailyPartitionsDefinition(
        start_date=cfg.recon_start_date, timezone="UTC", end_offset=1
    )


def run_scope(mode: str | None, range_start: str | None, first: str) -> tuple[bool, str | None]:
    """(full, floor) for a run (pure): whether it recomputes everything, else the day every job
    recomputes from at least (None: only what its new events change)."""
    if mode == FULL:
        return True, None
    if mode == INCREMENTAL or range_start is None:
        return False, None
    if range_start <= first:
        return True, None  # every partition from the first: a backfill is the full run
    return False, range_start


def latest_partition(cfg: TidemarkConfig) -> str:
    """Today's partition (UTC): the label of an incremental run."""
    last = partitions_def(cfg).get_last_partition_key()
    if last is None:
        raise ConfigError(
            f"TIDEMARK_RECON_START_DATE={cfg.recon_start_date} is after today "
            "(UTC): reconciliation has no partition to run; set an earlier day"
        )
    return last


def incremental_tags(cfg: TidemarkConfig) -> dict[str, str]:
    """The tags of an incremental reconciliation launched by tags alone (GraphQL, a run
    request): its mode and today's partition (what it recomputes is its scope, see the
    module doc)."""
    return {RECON_MODE_TAG: INCREMENTAL, PARTITION: latest_partition(cfg)}


def chosen_tags(partitions: str) -> dict[str, str]:
    """The tags of a run for partitions chosen by hand: ``DAY`` or ``FROM:TO`` (days written
    YYYY-MM-DD)."""
    start, _, end = partitions.partition(":")
    if not end or start == end:
        return {PARTITION: start}
    return {RANGE_START: start, RANGE_END: end}


def recomputed_from(variables: dict, job: str) -> str:
    """The first day of event time a run rewrote for ``job`` (pure, from its dbt vars): a day,
    ``all`` (every day) or ``none`` (nothing new reached it)."""
    from orchestration.recon.recon_scope import NOTHING_NEW

    scope = variables.get("recon_from", {})
    day = scope.get(job)
    if day is None:
        return "all"
    return "none" if day == NOTHING_NEW else day


def labelled_days(
    held: set[str], since: str, run_days: set[str], partitions: dg.PartitionsDefinition
) -> tuple[list[str], int]:
    """(days to label, days left unlabelled) (pure): the days of a table a run rewrote
    (``held``: its recon_date partitions; ``since``: ``recomputed_from``: a day, ``all`` or
    ``none``) that are partitions of reconciliation and not already the run's own, newest
    ``MAX_LABELLED_DAYS`` first kept."""
    if since == "none":
        return [], 0
    first, last = partitions.get_first_partition_key(), partitions.get_last_partition_key()
    days = sorted(
        d
        for d in held
        if (since == "all" or d >= since)
        and first is not None
        and last is not None
        and first <= d <= last
        and d not in run_days
    )
    kept = days[-MAX_LABELLED_DAYS:]
    return kept, len(days) - len(kept)
