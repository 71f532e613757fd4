"""tidemark's Dagster code location: everything under `orchestration.defs` (workspace.yaml
loads ``defs``; ``dg list defs`` and ``dg check defs`` read the same folder)."""

from __future__ import annotations

import logging
from pathlib import Path

import dagster as dg

LOG = logging.getLogger("tidemark")


def build_definitions() -> dg.Definitions:
    """The definitions for the data root and settings in the environment.

    Every job is analysed first (`streaming_jobs.runtime.analysis.checked`, cached per content of the
    job files). Each job file loads on its own: one that fails to load, or that the analysis
    refuses (the engine would reject it, or its state would never be evicted), is left out with
    its file and line (`streaming_jobs.storage.registry.load_problems`: logged here, alerted by the
    ``platform_health_sensor``), and every other job, sensor and schedule loads. Likewise
    a malformed setting: it takes its default in the code location, and the sensor raises a
    ``setting`` alert naming it.
    """
    from streaming_jobs.runtime.analysis import checked
    from streaming_jobs.core.config import (
        TidemarkConfig,
        setting_problems,
        tolerate_bad_settings,
    )
    from streaming_jobs.storage.registry import load_problems

    # a malformed setting takes its default here and is alerted on (platform_health_sensor)
    tolerate_bad_settings()
    cfg = TidemarkConfig.from_env()
    checked(cfg)
    for variable, problem in setting_problems().items():
        LOG.warning("tidemark: %s uses its default: %s", variable, problem)
    for problem in load_problems():
        LOG.warning("tidemark: left out of the code location: %s", problem)
    return dg.load_from_defs_folder(path_within_project=Path(__file__).parent)


@dg.definitions
def defs() -> dg.Definitions:
    return build_definitions()
