"""Soak: the always-on setup for a bounded time with retention on, sampled every minute.

    make soak SOAK_MINUTES=20             # = .venv/bin/python tools/soak.py --minutes 20
    .venv/bin/python tools/soak.py --minutes 60 --rate 10 --recon-every 10 --results out.json

It runs ``tidemark live`` (landing at a steady rate, the continuous run hosting every job,
reconciliation, savepoints, sensors, the SQL endpoint, Dagster's daemon) on a data root of its
own, with retention every ``--maintenance-minutes`` that keeps little history
(``TIDEMARK_VACUUM_RETAIN_HOURS``, ``TIDEMARK_OPS_RETENTION_DAYS``,
``TIDEMARK_LOG_RETAIN_HOURS``), so that whatever does not plateau within the soak would not
plateau in days either. Delta's ``VACUUM`` keeps whole hours (tidemark rounds a shorter
retention up to one hour), so files on disk can level only after the first hour: a soak that is
to show it runs 90 minutes or more. Delta log entries are kept at least as long as ``VACUUM``
keeps removed files (whole hours: one, plus 5 minutes), longer than ``--log-retain-hours`` and
the oldest savepoint's age at the soak's cadence; the ops tables' for an hour. Every minute,
from outside the processes (nothing here runs inside tidemark), it records:

- state rows per job: the latest progress row of each query in ``ops/stream_progress``;
- memory of the continuous run's JVM (Spark in local mode: the driver and the executors are
  that one JVM): heap in use after the last collection (``jstat``) and resident set (``/proc``);
- files: data files on disk and in the current version of every lake table, the files of
  every table's Delta log, landing files waiting and archived;
- ops tables: rows and data files of each.

The samples go to ``--results`` (JSON); a markdown table is printed for docs/reliability.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(CHECKOUT))


def _java_processes(root: Path) -> dict[int, str]:
    """The JVMs started for ``root`` (their environment names it), by pid: their main class."""
    out = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().split(b"\0")
            if not cmdline or not cmdline[0].endswith(b"java"):
                continue
            environ = (proc / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"TIDEMARK_DATA_ROOT={root}".encode() not in environ:
            continue
        out[int(proc.name)] = (
            "sql endpoint" if "sql_endpoint" in _ancestry(int(proc.name)) else "spark"
        )
    return out


def _ancestry(pid: int, depth: int = 4) -> str:
    """The command lines of a process's parents (the SQL endpoint's JVM is started by
    ``python -m streaming_jobs.services.sql_endpoint``; a run's JVM by Dagster's run worker)."""
    lines = []
    for _ in range(depth):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            pid = int(stat.rsplit(")", 1)[1].split()[1])
            lines.append(
                (
                    Path(f"/proc/{pid}/cmdline")
                    .read_bytes()
                    .replace(b"\0", b" ")
                    .decode(errors="replace")
                )
            )
        except (OSError, ValueError):
            break
    return "\n".join(lines)


def _memory(pid: int) -> dict:
    rss = 0
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) * 1024
    except OSError:
        return {}
    heap = None
    gc = subprocess.run(["jstat", "-gc", str(pid)], capture_output=True, text=True)
    if gc.returncode == 0 and len(gc.stdout.splitlines()) == 2:
        names, values = (line.split() for line in gc.stdout.splitlines())
        stats = dict(zip(names, values))
        heap = sum(float(stats[k]) for k in ("S0U", "S1U", "EU", "OU") if k in stats) * 1024
    return {
        "rss_mb": round(rss / 2**20),
        "heap_mb": round(heap / 2**20) if heap else None,
        "uptime_s": _uptime(pid),
    }


def _uptime(pid: int) -> float:
    """Seconds since the process started; 0 once it is gone (processes come and go while a
    sample is taken)."""
    ticks = os.sysconf("SC_CLK_TCK")
    try:
        start = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]) / ticks
    except (OSError, ValueError, IndexError):
        return 0.0
    return round(float(Path("/proc/uptime").read_text().split()[0]) - start)


def _continuous_jvm(root: Path) -> dict:
    """The longest-lived Spark JVM of the root that is not the SQL endpoint: the continuous run
    (reconciliations and other runs come and go)."""
    spark = [(pid, _memory(pid)) for pid, kind in _java_processes(root).items() if kind == "spark"]
    spark = [(pid, m) for pid, m in spark if m]
    if not spark:
        return {}
    pid, memory = max(spark, key=lambda pm: pm[1]["uptime_s"])
    return {"pid": pid, **memory}


def sample(root: Path, started: float) -> dict:
    from deltalake import DeltaTable

    from streaming_jobs.operations.retention import _disk, delta_tables, log_files

    lake = root / "lake"
    tables = {}
    for layer in ("bronze", "quarantine", "gold"):
        for table in delta_tables(lake / layer):
            try:
                active = len(DeltaTable(str(table)).file_uris())
            except Exception:  # noqa: BLE001 - mid-commit or mid-creation: next sample
                active = None
            tables[f"{layer}/{table.name}"] = {
                "disk_files": _disk(table)[0],
                "active_files": active,
                "log_files": log_files(table),
            }
    ops = {}
    state = {}
    for table in delta_tables(lake / "ops"):
        try:
            handle = DeltaTable(str(table))
            rows = handle.to_pyarrow_dataset().count_rows()
        except Exception:  # noqa: BLE001
            continue
        files, size = _disk(table)
        ops[table.name] = {
            "rows": rows,
            "files": files,
            "mb": round(size / 1e6, 2),
            "log_files": log_files(table),
        }
        if table.name == "stream_progress":
            data = handle.to_pyarrow_table(columns=["job", "batch_id", "state_rows"])
            latest: dict[str, tuple[int, int]] = {}
            for job, batch, rows_ in zip(
                *(data.column(c).to_pylist() for c in ("job", "batch_id", "state_rows"))
            ):
                if job not in latest or batch > latest[job][0]:
                    latest[job] = (batch, rows_ or 0)
            state = {job: rows_ for job, (_, rows_) in sorted(latest.items())}
    landing = sum(1 for p in (root / "landing").rglob("*") if p.is_file())
    archived = (
        sum(1 for p in (root / "archive").rglob("*") if p.is_file())
        if (root / "archive").is_dir()
        else 0
    )
    return {
        "minute": round((time.monotonic() - started) / 60, 1),
        "continuous_jvm": _continuous_jvm(root),
        "state_rows": state,
        "tables": tables,
        "ops": ops,
        "landing_files": landing,
        "archived_files": archived,
    }


def table(samples: list[dict]) -> list[str]:
    lines = [
        "| minute | state rows (all jobs) | JVM heap used MB | JVM RSS MB | lake files on "
        "disk | lake files current | Delta log files: lake / ops | "
        "ops/stream_progress rows / files / MB | "
        "ops/stream_late_rows rows | ops/alerts rows / files | "
        "landing files waiting / archived |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in samples:
        if "error" in s:
            lines.append(f"| {s['minute']:.0f} | sample failed: {s['error'][:80]} |||||||||| ")
            continue
        jvm = s["continuous_jvm"]
        disk = sum(t["disk_files"] for t in s["tables"].values())
        active = sum(t["active_files"] or 0 for t in s["tables"].values())
        lake_log = sum(t.get("log_files", 0) for t in s["tables"].values())
        ops_log = sum(t.get("log_files", 0) for t in s["ops"].values())
        progress = s["ops"].get("stream_progress", {})
        alerts = s["ops"].get("alerts", {})
        late = s["ops"].get("stream_late_rows", {})
        lines.append(
            f"| {s['minute']:.0f} | {sum(s['state_rows'].values()):,} | {jvm.get('heap_mb')} | "
            f"{jvm.get('rss_mb')} | {disk:,} | {active:,} | {lake_log:,} / {ops_log:,} | "
            f"{progress.get('rows', 0):,} / "
            f"{progress.get('files', 0)} / {progress.get('mb', 0)} | {late.get('rows', 0):,} | "
            f"{alerts.get('rows', 0)} / "
            f"{alerts.get('files', 0)} | {s['landing_files']} / {s['archived_files']} |"
        )
    return lines


def maintenance_runs(root: Path) -> list[dict]:
    """Every maintenance run of the soak, from its Dagster instance: when it started, how long
    it took, and from its step table (`streaming_jobs.operations.retention.table`) the files
    its VACUUMs deleted and the seconds spent per kind of step."""
    import sqlite3

    db = root / "dagster_home" / "history" / "runs.db"
    if not db.exists():
        return []
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        runs = conn.execute(
            "select run_id, status, create_timestamp, update_timestamp from runs "
            "where pipeline_name = 'maintenance_job' order by create_timestamp"
        ).fetchall()
    out = []
    for run_id, status, created, updated in runs:
        row = {
            "run": run_id[:8],
            "status": status,
            "created": created[11:19],
            "minutes": round((_stamp(updated) - _stamp(created)) / 60, 1),
        }
        steps = _steps_table(root / "dagster_home" / "history" / "runs" / f"{run_id}.db")
        deleted, seconds = 0, {}
        for step in steps:
            kind = step["target"].split("/")[0]
            seconds[kind] = seconds.get(kind, 0.0) + step["seconds"]
            if step["action"] == "vacuum" and step["before"] is not None:
                deleted += max(step["before"] - (step["after"] or 0), 0)
        row.update(
            {
                "vacuum_deleted": deleted,
                "seconds": {k: round(v) for k, v in sorted(seconds.items())},
            }
        )
        out.append(row)
    return out


def _stamp(text: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(text).timestamp()


def _steps_table(db: Path) -> list[dict]:
    """The rows of a maintenance run's ``steps`` metadata (its markdown table)."""
    import sqlite3

    if not db.exists():
        return []
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        events = [
            e
            for (e,) in conn.execute(
                "select event from event_logs where dagster_event_type in "
                "('STEP_OUTPUT', 'STEP_FAILURE')"
            )
        ]
    for event in events:
        for entry in _metadata_entries(json.loads(event)):
            if entry.get("label") != "steps":
                continue
            text = entry["entry_data"].get("md_str") or ""
            header, rows = None, []
            for line in text.splitlines():
                cells = [c.strip() for c in line.strip().strip("|").split("|")]
                if header is None:
                    header = cells
                    continue
                if set(line) <= set("|-"):
                    continue
                rows.append(dict(zip(header, cells)))
            return [
                {
                    "target": r["target"],
                    "action": r["action"],
                    "before": _int(r.get("files before")),
                    "after": _int(r.get("files after")),
                    "seconds": float(r.get("seconds") or 0),
                }
                for r in rows
            ]
    return []


def _metadata_entries(event: dict) -> list[dict]:
    data = (event.get("dagster_event") or {}).get("event_specific_data") or {}
    entries = data.get("metadata_entries") or []
    error = data.get("error") or {}
    failure = data.get("user_failure_data") or {}
    return entries + (failure.get("metadata_entries") or []) + (error.get("metadata") or [])


def _int(text: str | None) -> int | None:
    try:
        return int((text or "").replace(",", ""))
    except ValueError:
        return None


def maintenance_table(runs: list[dict]) -> list[str]:
    lines = [
        "| started (UTC) | status | minutes | files VACUUM deleted | seconds per step kind |",
        "|---|---|---:|---:|---|",
    ]
    for r in runs:
        kinds = ", ".join(f"{k} {v}" for k, v in r["seconds"].items())
        lines.append(
            f"| {r['created']} | {r['status']} | {r['minutes']} | "
            f"{r['vacuum_deleted']:,} | {kinds} |"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=20)
    parser.add_argument("--rate", type=float, default=10, help="events/s landed per stream")
    parser.add_argument("--recon-every", type=int, default=10, help="minutes between recons")
    parser.add_argument("--maintenance-minutes", type=int, default=4)
    parser.add_argument("--vacuum-retain-hours", default="0.1")
    parser.add_argument("--ops-retention-days", default="0.007")  # 10 minutes
    parser.add_argument("--log-retain-hours", default="0.25")
    parser.add_argument(
        "--shutdown-minutes",
        type=float,
        default=10,
        help="how long `tidemark live` may take to stop cleanly after the soak "
        "(catch up, final reconciliation) before its processes are killed",
    )
    parser.add_argument("--port", type=int, default=3311)
    parser.add_argument("--data-root", default=str(CHECKOUT / ".tidemark" / "soak"))
    parser.add_argument(
        "--results",
        default=None,
        help="where the JSON goes (default: soak.json in the --data-root; the "
        "committed evidence: results/soak.json, named explicitly)",
    )
    parser.add_argument(
        "--report",
        action="store_true",
        help="only print the maintenance runs of an existing soak's data root",
    )
    args = parser.parse_args(argv)
    args.results = args.results or str(Path(args.data_root) / "soak.json")
    root = Path(args.data_root).resolve()
    if args.report:
        print("\n".join(maintenance_table(maintenance_runs(root))))
        return 0
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    env = {
        **os.environ,
        "TIDEMARK_DATA_ROOT": str(root),
        "TIDEMARK_MAINTENANCE_CRON": f"*/{args.maintenance_minutes} * * * *",
        "TIDEMARK_VACUUM_RETAIN_HOURS": args.vacuum_retain_hours,
        "TIDEMARK_OPS_RETENTION_DAYS": args.ops_retention_days,
        "TIDEMARK_LOG_RETAIN_HOURS": args.log_retain_hours,
    }
    log = open(root.parent / f"{root.name}.live.log", "w")
    live = subprocess.Popen(
        [
            str(Path(sys.executable).with_name("tidemark")),
            "live",
            "--minutes",
            str(args.minutes),
            "--rate",
            str(args.rate),
            "--port",
            str(args.port),
            "--recon-every",
            str(args.recon_every),
        ],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=CHECKOUT,
        start_new_session=True,
    )
    started = time.monotonic()
    deadline = started + (args.minutes + args.shutdown_minutes) * 60
    samples: list[dict] = []
    while live.poll() is None and time.monotonic() < deadline:
        time.sleep(60 - (time.monotonic() - started) % 60)
        if live.poll() is not None:
            break
        try:
            samples.append(sample(root, started))
        except Exception as exc:  # noqa: BLE001 - one bad sample must not end the soak
            samples.append({"minute": round((time.monotonic() - started) / 60), "error": repr(exc)})
            print(f"sample failed: {exc!r}", flush=True)
            continue
        print(table(samples)[-1], flush=True)
        Path(args.results).write_text(
            json.dumps(
                {
                    "command": "tools/soak.py "
                    + " ".join(argv if argv is not None else sys.argv[1:]),
                    "samples": samples,
                },
                indent=1,
            )
        )
    if live.poll() is None:  # it did not stop by itself in time: its whole process group goes
        print(f"tidemark live still stopping after {args.shutdown_minutes:g} min; stopped")
        _stop_group(live)
        _kill_rest(root)
    subprocess.run(
        [str(Path(sys.executable).with_name("tidemark")), "sql", "stop"],
        env=env,
        cwd=CHECKOUT,
        capture_output=True,
    )
    print("\n".join(table(samples)))
    runs = maintenance_runs(root)
    print("\n".join(maintenance_table(runs)))
    Path(args.results).write_text(
        json.dumps(
            {
                "command": "tools/soak.py " + " ".join(argv if argv is not None else sys.argv[1:]),
                "samples": samples,
                "maintenance_runs": runs,
            },
            indent=1,
        )
    )
    print(f"tidemark live exited {live.returncode}; its output: {log.name}")
    return live.returncode or 0


def _kill_rest(root: Path) -> None:
    """Every process left with this soak's data root in its environment (``dagster dev`` and
    its run workers start sessions of their own, outside the live run's group)."""
    import signal

    marker = f"TIDEMARK_DATA_ROOT={root}".encode()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            if marker in (proc / "environ").read_bytes().split(b"\0"):
                os.kill(int(proc.name), signal.SIGKILL)
        except (OSError, ProcessLookupError):
            continue


def _stop_group(proc: subprocess.Popen) -> None:
    import signal

    for sig, wait in ((signal.SIGINT, 60), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


if __name__ == "__main__":
    sys.exit(main())
