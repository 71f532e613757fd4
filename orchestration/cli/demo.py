"""The embedded default's demo: which streams `tidemark run` and `tidemark live` generate, and
how a data root made by them is cleared (never one holding data they did not make)."""

from __future__ import annotations

from streaming_jobs.core import locations
from streaming_jobs.core.config import TidemarkConfig
from streaming_jobs.core.locations import Location

DEMO_MARKER = ".tidemark-demo"
# The streams the registered jobs read; the main job generates a sample of each.
DEMO_STREAMS = ("transactions", "rides", "orders", "payments", "clicks")
# Clicks arrive slower, so users go idle and sessions end within the sample's span.
DEMO_RATES = {"clicks": 0.5}
# What `run --fresh` clears: everything a run produced except the Dagster run history.
RUN_STATE = ("landing", "lake", "checkpoints", "savepoints", "dbt", "kafka")
# Folders that hold real data: never cleared unless the demo created them.
DATA_BEARING = ("landing", "lake", "checkpoints", "savepoints", "kafka")


def has_data(root) -> bool:
    """Whether ``root`` (a local folder or a place on a store) holds data. The empty ops tables
    `tidemark setup` creates (``lake/ops``, a log and no data file) are not data: ``make run``
    is setup, then ``run --fresh``, on a new root."""
    for name in DATA_BEARING:
        for child in locations.items(Location.of(root) / name):
            if name == "lake" and child.name == "ops":
                if not any(e.relative.endswith(".parquet") for e in locations.entries(child.place)):
                    continue
            return True
    return False


def reset_demo_root(cfg: TidemarkConfig) -> None:
    """Clear what a demo run left in the data root; refuse a root holding data it did not make."""
    root = Location.of(cfg.data_root)
    marker = root / DEMO_MARKER
    if has_data(root) and not locations.is_file(marker):
        raise SystemExit(
            f"tidemark run --fresh: {root} holds data that tidemark run did not create; "
            "refusing to clear it. Point TIDEMARK_DATA_ROOT at an empty folder, or run without --fresh."
        )
    # the data root's, and this machine's working state of it (the same folder when local)
    for base in dict.fromkeys((root, Location.of(cfg.work_root))):
        for name in RUN_STATE:
            locations.delete_tree(base / name)
    locations.write_bytes(
        marker, b"created by `tidemark run`; `tidemark run --fresh` may clear this folder\n"
    )
