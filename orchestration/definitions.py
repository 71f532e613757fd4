"""tidemark's Dagster code location: everything under `orchestration.defs` (workspace.yaml
loads ``defs``; ``dg list defs`` and ``dg check defs`` read the same folder)."""

from __future__ import annotations

from pathlib import Path

import dagster as dg


def build_definitions() -> dg.Definitions:
    """The definitions for the data root and settings in the environment.

    Every job is analysed first (`streaming_jobs.analysis.checked`, cached per content of the
    job files): a job the streaming engine would refuse, or whose state would never be
    evicted, stops the load with its file and line, before any run starts.
    """
    from streaming_jobs.analysis import checked
    from streaming_jobs.config import TidemarkConfig

    checked(TidemarkConfig.from_env())
    return dg.load_from_defs_folder(path_within_project=Path(__file__).parent)


@dg.definitions
def defs() -> dg.Definitions:
    return build_definitions()
