"""The dbt project, in one place: where it lives, where its target goes, how dbt is invoked."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

from streaming_jobs.core.config import CHECKOUT, TidemarkConfig

if TYPE_CHECKING:
    from dagster_dbt import DbtProject

DBT_PROJECT_DIR = CHECKOUT / "dbt_project"  # the project's source, in the checkout


def run_project_dir(cfg: TidemarkConfig) -> Path:
    """The copy dbt runs: the source plus the generated models (orchestration/recon/dbt_models.py)."""
    return cfg.paths.dbt / "project"


def dbt_executable() -> str:
    """tidemark-dbt: dbt with tidemark's SparkSession and the job registry's --vars."""
    return str(Path(sys.executable).with_name("tidemark-dbt"))


def dbt_project(cfg: TidemarkConfig) -> DbtProject:
    # imported here: tidemark-dbt and `dbt parse` come through this module, and importing
    # Dagster takes about 4 s of every invocation that does not need it
    from dagster_dbt import DbtProject

    return DbtProject(
        project_dir=run_project_dir(cfg),
        profiles_dir=run_project_dir(cfg),
        target_path=cfg.paths.dbt / "target",
    )
