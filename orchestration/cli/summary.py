"""What a data root holds: rows per table, quarantine reasons, reconciliation per job."""

from __future__ import annotations

from dataclasses import dataclass, field

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from streaming_jobs.core import locations
from streaming_jobs.core.config import TidemarkConfig
from streaming_jobs.runtime.ingestion import landing_files
from streaming_jobs.storage.kafka import accounting as kafka_accounting
from streaming_jobs.storage.kafka import source_of
from streaming_jobs.operations.landing import account
from streaming_jobs.operations.retention import archived_files
from streaming_jobs.storage.registry import registry, streams
from streaming_jobs.core.locations import is_delta_table
from streaming_jobs.storage.lake import read_table

from orchestration.recon import recon_runs
from orchestration.recon.recon_report import RECON_CLASSES, late_events
from orchestration.recon.recon_runs import ReconStatus


@dataclass
class Summary:
    landing_lines: dict[str, int] = field(default_factory=dict)
    bronze_rows: dict[str, int] = field(default_factory=dict)
    quarantine_rows: dict[str, int] = field(default_factory=dict)
    quarantine_reasons: dict[str, dict[str, int]] = field(default_factory=dict)
    landing_findings: dict[str, list] = field(default_factory=dict)  # files breaking the contract
    # rows of bronze and quarantine whose landing file is gone: retention deletes archived
    # files after TIDEMARK_OPS_RETENTION_DAYS (or at once with TIDEMARK_LANDING_RETENTION=delete)
    removed_lines: dict[str, int] = field(default_factory=dict)
    refused_lines: dict[str, int] = field(default_factory=dict)  # in files ingestion refused
    sources: dict[str, str] = field(default_factory=dict)  # stream -> what its lines are
    gold_rows: dict[str, int | None] = field(default_factory=dict)  # None: no table yet
    recon: ReconStatus = field(default_factory=ReconStatus)

    @property
    def compared(self) -> int:
        return self.recon.compared

    @property
    def unexplained(self) -> int | None:
        return self.recon.unexplained


def _count(spark: SparkSession, path) -> int:
    return read_table(spark, path).count() if is_delta_table(path) else 0


@dataclass(frozen=True)
class Note:
    message: str


def _kafka_lines(cfg: TidemarkConfig, schema, out: Summary) -> None:
    """A Kafka-sourced stream's records read, and a note per partition that does not balance."""
    acct = kafka_accounting(cfg, schema)
    out.sources[schema.name] = f"Kafka records of {acct.topic}"
    out.landing_lines[schema.name] = acct.records
    out.landing_findings[schema.name] = [
        Note(
            f"partition {p}: {a['read']:,} offsets read, {a['missing']:,} not in bronze or "
            f"quarantine, {a['doubled']:,} twice"
        )
        for p, a in acct.partitions.items()
        if a["missing"] or a["doubled"]
    ]


def rows_from_removed_files(
    cfg: TidemarkConfig, stream: str, files: list, rows_by_file: dict[str, int]
) -> int:
    """Rows bronze and quarantine hold from landing files that are no longer there, neither in
    ``landing/`` nor in the archive (an archived file keeps its name)."""
    landing = locations.canonical(cfg.paths.landing_dir(stream))
    present = {f"{landing}/{f.name}" for f in files}
    return sum(
        n for name, n in rows_by_file.items() if name and locations.canonical(name) not in present
    )


def collect(spark: SparkSession, cfg: TidemarkConfig) -> Summary:
    paths, out = cfg.paths, Summary()
    for stream, schema in streams().items():
        out.bronze_rows[stream] = _count(spark, paths.table("bronze", stream))
        if source_of(cfg, schema) == "kafka":
            _kafka_lines(cfg, schema, out)
        else:
            landing = paths.landing_dir(stream)
            # every file bronze reads, whatever its extension, and those retention archived
            files = landing_files(landing) + archived_files(cfg, stream)
            out.landing_lines[stream] = (
                # (lines end at '\n' only, as ingestion reads them)
                spark.read.option("lineSep", "\n").text([f.place.spark for f in files]).count()
                if files
                else 0
            )
            acct = account(cfg, stream)
            out.removed_lines[stream] = rows_from_removed_files(
                cfg, stream, files, acct.rows_by_file
            )
            out.landing_findings[stream] = acct.findings
            out.refused_lines[stream] = acct.refused
        quarantine = paths.table("quarantine", stream)
        out.quarantine_rows[stream] = _count(spark, quarantine)
        if out.quarantine_rows[stream]:
            reasons = (
                read_table(spark, quarantine)
                .groupBy(F.regexp_replace("reason", ":.*", "").alias("r"))
                .count()
                .collect()
            )
            out.quarantine_reasons[stream] = {r["r"]: r["count"] for r in reasons}
    for name in registry():
        gold = paths.table("gold", name)
        # a job that never wrote is said so, not shown as a table of 0 rows
        out.gold_rows[name] = read_table(spark, gold).count() if is_delta_table(gold) else None
    out.recon = recon_runs.status(cfg)
    return out


def render(summary: Summary, cfg: TidemarkConfig) -> str:
    """The data root in a screenful: accounting per stream, gold rows, reconciliation per job."""
    lines = [f"tidemark summary (data root {cfg.data_root})"]
    for stream in summary.landing_lines:
        landing, bronze, quarantined = (
            summary.landing_lines[stream],
            summary.bronze_rows[stream],
            summary.quarantine_rows[stream],
        )
        removed = summary.removed_lines.get(stream, 0)
        verdict = "holds" if landing + removed == bronze + quarantined else "DOES NOT HOLD"
        reasons = ", ".join(
            f"{reason} {count:,}"
            for reason, count in sorted(summary.quarantine_reasons.get(stream, {}).items())
        )
        source = summary.sources.get(stream, "landing lines")
        if removed:
            source += f" + {removed:,} in files retention removed"
        lines.append(
            f"  {stream}: {landing:,} {source} = "
            f"{bronze:,} bronze + "
            f"{quarantined:,} quarantined ({verdict})" + (f": {reasons}" if reasons else "")
        )
        if summary.refused_lines.get(stream):
            lines.append(
                f"    and {summary.refused_lines[stream]:,} lines in files ingestion refused, "
                "not read (each named below)"
            )
        lines += [f"    {f.message}" for f in summary.landing_findings.get(stream, [])]
    if summary.gold_rows:
        lines.append(
            "  gold rows: "
            + ", ".join(
                f"{job} " + ("no table yet" if rows is None else f"{rows:,}")
                for job, rows in summary.gold_rows.items()
            )
        )
    lines += recon_lines(summary.recon)
    return "\n".join(lines)


def _width(recon_class: str) -> int:
    return max(len(recon_class), 7) + 2


def unexplained_text(status: ReconStatus) -> str:
    """'N unexplained rows', or, when some could not be counted, what was not and the rest's."""
    if status.unexplained is not None:
        return f"{status.unexplained:,} unexplained rows"
    return (
        f"unexplained rows not known (not counted: {', '.join(status.uncounted)}; "
        f"{status.counted_unexplained:,} in the jobs counted)"
    )


def recon_lines(status: ReconStatus) -> list[str]:
    """Each job's latest reconciliation, a line each, then what is wrong, then the closing line
    (a failed run says so last: never "0 unexplained" for a run that did not finish clean)."""
    lines = []
    if status.jobs:
        lines.append(
            f"  {'recon':<24}{'status':>10}{'compared':>10}"
            + "".join(f"{c:>{_width(c)}}" for c in RECON_CLASSES)
            + "  late events replayed/reported"
        )
    for job, r in sorted(status.jobs.items()):
        classes = r["class_rows"]  # None: its recon table was not built in that run
        counts = "".join(
            f"{'-':>{_width(c)}}" if classes is None else f"{classes.get(c, 0):>{_width(c)},}"
            for c in RECON_CLASSES
        )
        compared = "-" if r["rows_compared"] is None else f"{r['rows_compared']:,}"
        late = late_events(r) if r["late_events_replayed"] is not None else "-"
        lines.append(f"  {job:<24}{r['status']:>10}{compared:>10}{counts}  {late}")
    if not status.ran:
        lines.append("  no reconciliation has run yet")
        lines.append(
            "reconciliation: none has run yet (run `tidemark run`, or the "
            "reconciliation job in Dagster)"
        )
        return lines
    lines.append(f"  latest run {status.finished_at:%Y-%m-%d %H:%M:%S} UTC: {status.run_status}")
    problems = status.problems()
    lines += [f"  FAILED {p}" for p in problems]
    if problems:
        lines.append(
            f"reconciliation FAILED: {len(problems)} problem(s), {unexplained_text(status)} "
            f"in {status.compared:,} compared: " + "; ".join(problems)
        )
    else:
        lines.append(
            f"reconciliation: {status.compared:,} rows compared, {status.unexplained:,} unexplained"
        )
    return lines
