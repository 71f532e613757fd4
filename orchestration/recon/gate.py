"""The reconciliation that gates a rebuild's swap: the new version a rebuild built beside a job
(`streaming_jobs.operations.shadow`) is reconciled against that version's batch definition
before it is swapped in, and swapped only with 0 unexplained rows.

`reconcile_shadow` runs ``tidemark-dbt --shadow JOB build --select +recon_JOB``: the job's
models read the shadow's gold table and its progress rows as the job's, over every day, in
schemas and a warehouse of their own under the shadow's folder
(`orchestration.recon.dbt_cli.shadow_setting`). The live version's reconciliation tables and
status are not touched. A job with no batch definition (no recon models) cannot be gated: it
is said so, and the caller decides.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from streaming_jobs.core import locations
from streaming_jobs.core.config import TidemarkConfig
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
    done = subprocess.run(command, capture_output=True, text=True, env=dict(os.environ))
    table = shadow_recon_table(cfg, job)
    gate = Gate(job, reconciled=True, table=str(table))
    if locations.is_delta_table(table):
        gate.classes = recon_counts(cfg, job, table)
        gate.compared = sum(gate.classes.values())
        gate.unexplained = sum(gate.classes[c] for c in UNEXPLAINED)
    output = done.stdout + done.stderr
    if gate.compared is None:
        gate.message = (
            f"the reconciliation of job {job}'s new version built no recon table (tidemark-dbt "
            f"exit {done.returncode}): {output[-OUTPUT_TAIL:]}"
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
