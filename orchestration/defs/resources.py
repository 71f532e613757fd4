"""The resources, chosen in one place (`orchestration.lib.resources`), for the data root in
``TIDEMARK_DATA_ROOT``."""

import dagster as dg

from streaming_jobs.core.config import TidemarkConfig

from orchestration.lib.resources import build_resources


@dg.definitions
def defs() -> dg.Definitions:
    return dg.Definitions(resources=build_resources(TidemarkConfig.from_env()))
