"""The reconciliation that gates a rebuild's swap: the new version a rebuild built beside a job
(`streaming_jobs.operations.shadow`) is reconciled against that version's batch definition
before it is swapped in, and swapped only with 0 unexplained rows.

`reconcile_shadow` runs ``tidemark-dbt --shadow JOB build --select +recon_JOB``: the job's
models read the shadow's gold table and its progress rows as the job's, over every day, in
schemas and a warehouse of their own under the shadow's folder
(`orchestration.recon.dbt_cli.shadow_setting`). The live version's reconciliation tables and
status are not touched. A job with no batch definition (no recon models) cannot be gated: it
is said so, and the caller decides.

`rebuild_and_swap` is the whole change, as `tidemark rebuild` and Dagster's ``rebuild_job`` run
it: build, reconcile, swap. The swap first lets the shadow catch up with what bronze gained
since its reconciliation; those batches are counted in the swap's record
(``unreconciled_batches``), for the next reconciliation covers them, not this one.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from streaming_jobs.core.config import TidemarkConfig
from streaming_jobs.core.delta_log import latest_version
from streaming_jobs.core.locations import Location

from orchestration.recon.recon_report import UNEXPLAINED, recon_counts

OUTPUT_TAIL = 3000


@dataclass
class Gate:
    """What the reconciliation of a shadow said."""

    job: str
    reconciled: bool  # False: the job has no batch definition to reconcile against
    passed: bool = False  # the build succeeded and no row is unexplained
    compared: int | None = None
    unexplained: int | None = None
    classes: dict[str, int] = field(default_factory=dict)
    table: str = ""  # the shadow's recon table, for a look at each row
    message: str = ""

    @property
    def allows_swap(self) -> bool:
        return self.passed or not self.reconciled

    def as_dict(self) -> dict:
        return {
            "reconciled": self.reconciled,
            "passed": self.passed,
            "compared": self.compared,
            "unexplained": self.unexplained,
        }


class NotSwapped(Exception):
    """The new version did not reconcile: nothing was swapped; ``gate`` says why."""

    def __init__(self, gate: Gate) -> None:
        super().__init__(gate.message)
        self.gate = gate


def rebuild_and_swap(
    spark,
    cfg: TidemarkConfig,
    spec,
    *,
    partitions: int | None,
    holder: str,
    skip_recon: bool,
    say: Callable[[str], None],
) -> tuple[dict, Gate, dict]:
    """Build ``spec`` beside the live version, reconcile it (unless ``skip_recon``), swap it
    in; ``say`` is told each step. Returns what the build, the gate and the swap said. Raises
    `NotSwapped` (the live version serves on, the shadow is kept) and the shadow's
    `RebuildError` and `CheckpointBusy`."""
    from streaming_jobs.operations import shadow

    built = shadow.build(spark, cfg, spec, partitions, holder)
    say(
        f"{spec.name}: version {built['version']} built beside the live one (shadow batch "
        f"{built['last_batch']})"
    )
    if skip_recon:
        gate = Gate(spec.name, reconciled=False, message="reconciliation skipped")
    else:
        gate = reconcile_shadow(cfg, spec.name)
    say(gate.message)
    if not gate.allows_swap:
        raise NotSwapped(gate)
    if not gate.reconciled:
        say(f"{spec.name}: swapping it in without a reconciliation")
    recorded = {**gate.as_dict(), "shadow_batch": built["last_batch"] if gate.reconciled else None}
    done = shadow.swap(lambda: spark, cfg, spec.name, "rebuild", holder, gate=recorded)
    return built, gate, done


def catch_up_said(done: dict) -> str:
    """The words for batches swapped in after the reconciliation, or nothing."""
    late = done.get("unreconciled_batches")
    if not late:
        return ""
    return (
        f"; {late} batch{'es' if late > 1 else ''} the new version streamed after its "
        "reconciliation (what bronze gained meanwhile) are not reconciled yet: the next "
        f"reconciliation of {done['job']} covers them"
    )


def shadow_recon_table(cfg: TidemarkConfig, job: str) -> Location:
    return Location.of(cfg.paths.shadow(job)) / "dbt" / "recon.db" / f"recon_{job}"


def reconcile_shadow(cfg: TidemarkConfig, job: str) -> Gate:
    """Reconcile the shadow of ``job`` (built by `shadow.build`); see the module doc."""
    from orchestration.recon.dbt_models import reconciled_jobs

    if job not in reconciled_jobs():
        return Gate(
            job,
            reconciled=False,
            message=f"job {job} declares no batch definition (no recon models, no batch_sql), "
            "so its new version cannot be reconciled before the swap",
        )
    command = [
        str(Path(sys.executable).with_name("tidemark-dbt")),
        "--data-root",
        str(cfg.data_root),
        "--shadow",
        job,
        "build",
        "--select",
        f"+recon_{job}",
        "--exclude-resource-type",
        "unit_test",
    ]
    table = shadow_recon_table(cfg, job)
    before = latest_version(table)  # an earlier attempt's table, when a rebuild is run again
    done = subprocess.run(command, capture_output=True, text=True, env=dict(os.environ))
    gate = Gate(job, reconciled=True, table=str(table))
    after = latest_version(table)
    # a failed build that did not write the table (a model upstream failed) leaves an earlier
    # attempt's there: its counts are not this reconciliation's
    if after is not None and (done.returncode == 0 or after != before):
        gate.classes = recon_counts(cfg, job, table)
        gate.compared = sum(gate.classes.values())
        gate.unexplained = sum(gate.classes[c] for c in UNEXPLAINED)
    output = done.stdout + done.stderr
    if gate.compared is None:
        earlier = " (the one there is an earlier attempt's)" if after is not None else ""
        gate.message = (
            f"the reconciliation of job {job}'s new version built no recon table{earlier} "
            f"(tidemark-dbt exit {done.returncode}): {output[-OUTPUT_TAIL:]}"
        )
        return gate
    gate.passed = done.returncode == 0 and gate.unexplained == 0
    shown = ", ".join(f"{c} {n:,}" for c, n in gate.classes.items() if n)
    gate.message = (
        f"job {job}'s new version reconciled: {gate.compared:,} rows compared, "
        f"{gate.unexplained:,} unexplained ({shown or 'no rows'})"
    )
    if done.returncode != 0:
        failed = [
            line.strip() for line in output.splitlines() if re.search(r"\b(FAIL|ERROR)\b", line)
        ]
        gate.message += "; its checks failed: " + " | ".join(failed[:8] or [output[-500:]])
    if gate.unexplained:
        gate.message += f"; each row is in {table}"
    return gate
