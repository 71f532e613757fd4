"""tidemark's Dagster code location: everything under `orchestration.defs` (workspace.yaml
loads ``defs``; ``dg list defs`` and ``dg check defs`` read the same folder)."""

from __future__ import annotations

from pathlib import Path

import dagster as dg


def build_definitions() -> dg.Definitions:
    """The definitions for the data root and settings in the environment."""
    return dg.load_from_defs_folder(path_within_project=Path(__file__).parent)


@dg.definitions
def defs() -> dg.Definitions:
    return build_definitions()
