"""The reconciliation classes, and what one recon table says, as Dagster metadata.

A recon model's materialization carries its class counts as numeric metadata (Dagster plots
them over time, run after run) and as a markdown table. The counts are read from the recon
table with delta-rs: the reconciliation run itself starts no JVM.
"""

from __future__ import annotations

from collections import Counter

from dagster import MetadataValue

from streaming_jobs.config import TidemarkConfig

RECON_CLASSES = ("match", "window_open", "late_dropped", "value_mismatch",
                 "missing_in_stream", "missing_in_batch")
UNEXPLAINED = ("value_mismatch", "missing_in_stream", "missing_in_batch")


def recon_counts(cfg: TidemarkConfig, job: str) -> dict[str, int]:
    from deltalake import DeltaTable

    table = DeltaTable(str(cfg.paths.dbt_table("recon", f"recon_{job}")))
    classes = table.to_pyarrow_dataset().to_table(columns=["recon_class"]).column(0)
    found = Counter(classes.to_pylist())
    return {c: int(found.get(c, 0)) for c in RECON_CLASSES}


def recon_metadata(counts: dict[str, int]) -> dict[str, MetadataValue]:
    compared = sum(counts.values())
    unexplained = sum(counts[c] for c in UNEXPLAINED)
    lines = ["| class | rows | share | explained |", "|---|---:|---:|---|"]
    for c in RECON_CLASSES:
        share = counts[c] / compared if compared else 0.0
        lines.append(f"| {c} | {counts[c]:,} | {share:.1%} | {'no' if c in UNEXPLAINED else 'yes'} |")
    return {
        "rows_compared": MetadataValue.int(compared),
        "unexplained_rows": MetadataValue.int(unexplained),
        **{f"{c}_rows": MetadataValue.int(counts[c]) for c in RECON_CLASSES},
        "recon_classes": MetadataValue.md("\n".join(lines)),
    }
