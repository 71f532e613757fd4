"""Benchmark: what checkpointing costs a job holding 1,000,000 rows of state.

    make bench-checkpoint    # = .venv/bin/python tools/benchmarks/checkpoint_cost.py
    .venv/bin/python tools/benchmarks/checkpoint_cost.py --state-rows 200000 --batches 10 --kills 1

The job is ``events_by_type`` (RocksDB state with changelog checkpointing, as tidemark runs every
job). Its state is its deduplication: every click id until the watermark (10 minutes behind the
newest click) passes the click's time.

1. **Fill**: ``--state-rows`` clicks spread over 400 s of event time (well inside the 10 minutes,
   so every id stays in state), landed, ingested and run once.
2. **Commit**: ``--batches`` small waves (``--wave`` clicks each, event time going on), each
   landed, ingested and run as an incremental run runs it (``run_bronze``, ``run_job``). For each
   batch, from its progress row: the state commit time (Spark's ``commitTimeMs``, summed over
   the operators) and the batch's wall time; and the bytes the run added to the job's
   checkpoint folder (changelog files, snapshot uploads, offsets and commits; files listed
   before and after) against the newest full state snapshot (RocksDB's SST files and
   metadata: what a checkpoint copying the whole state would write).
3. **Recovery**: ``tidemark continuous --jobs events_by_type --trigger 1`` in a process of its
   own. A wave is landed; once the job has planned its batch (``offsets/N`` written,
   ``commits/N`` not) the process group gets SIGKILL, and the same command starts again at once.
   Measured: kill to the first commit after the restart (``commits/N``'s time), split into the
   start-up (process, JVM, Spark session, the queries' start: kill to batch N's trigger) and
   batch N itself (state loaded from its snapshot and changelog, the replayed batch). A kill
   that came after the batch committed is not counted (and tried again). Every trial checks
   that the restarted batch read the offsets the killed one planned and that gold (one row per
   distinct click) holds every landed click exactly once.

It prints markdown tables (docs/benchmarks.md) and writes ``--results`` (JSON).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

from streaming_jobs.storage import ops_tables
from streaming_jobs.core.checkpoints import last_committed_batch, last_planned_batch
from streaming_jobs.core.config import CHECKOUT, TidemarkConfig, default_results
from streaming_jobs.storage.generator import EPOCH, GeneratorConfig, generate, write_files
from streaming_jobs.storage.registry import get_job
from streaming_jobs.runtime.runner import run_bronze, run_job
from streaming_jobs.storage.spark import get_spark

JOB = "events_by_type"
FILL_SECONDS = 400.0  # of event time: inside the job's 10-minute watermark


def clicks(seed: int, events: int, start_s: float, span_s: float, files: int = 1):
    """Clean clicks (no late, duplicate or malformed lines) from ``start_s`` over ``span_s``
    seconds of event time, ids unique to ``seed``."""
    gen = GeneratorConfig(
        stream="clicks",
        events=events,
        files=files,
        seed=seed,
        rate=events / span_s,
        users=max(events // 10, 1),
        jitter_seconds=0.0,
        late_share=0.0,
        duplicate_share=0.0,
        malformed_share=0.0,
        start=EPOCH + timedelta(seconds=start_s),
        file_prefix=f"w{seed}",
    )
    return gen, generate(gen)


def land(
    cfg: TidemarkConfig, seed: int, events: int, start_s: float, span_s: float, files: int = 1
) -> int:
    gen, lines = clicks(seed, events, start_s, span_s, files)
    write_files(cfg.paths.landing_dir("clicks"), gen, lines)
    return sum(map(len, lines))


def files_in(folder: Path) -> dict[str, int]:
    out = {}
    for dirpath, _, names in os.walk(folder):
        for name in names:
            path = Path(dirpath) / name
            try:
                out[str(path)] = path.stat().st_size
            except OSError:
                pass
    return out


def snapshot_bytes(checkpoint: Path) -> int | None:
    """The size of the job's newest full state snapshot: per state partition, the newest
    ``<version>[_<id>].zip`` (RocksDB's metadata) and the SST files its metadata lists (what a
    checkpoint copying the whole state writes). None before the first snapshot."""
    import zipfile

    total, found = 0, False
    for folder in (checkpoint / "state").glob("*/*"):
        zips = [(int(p.name.split(".")[0].split("_")[0]), p) for p in folder.glob("*.zip")]
        if not zips:
            continue
        _, newest = max(zips)
        with zipfile.ZipFile(newest) as archive:
            text = archive.read("metadata").decode()
        meta = json.loads(text[text.index("{") :])
        total += newest.stat().st_size + sum(
            int(f.get("sizeBytes", 0)) for f in meta.get("sstFiles", [])
        )
        found = True
    return total if found else None


def progress(cfg: TidemarkConfig) -> dict[int, dict]:
    """The job's progress rows by batch id (the newest run's row for a batch that ran twice)."""
    rows = ops_tables.read(cfg, "stream_progress", where=f"job = {ops_tables.literal(JOB)}")
    out: dict[int, dict] = {}
    for row in sorted(rows, key=lambda r: r["ts"]):
        out[row["batch_id"]] = row
    return out


def custom(operator: dict) -> dict:
    metrics = operator.get("custom") or {}
    return dict(metrics) if not isinstance(metrics, dict) else metrics


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def gold_rows(cfg: TidemarkConfig) -> int:
    """Rows in the job's gold table (one per distinct click), from the files' footers."""
    from deltalake import DeltaTable

    return DeltaTable(str(cfg.paths.table("gold", JOB))).to_pyarrow_dataset().count_rows()


def commit_phase(spark, cfg: TidemarkConfig, args, next_s: float) -> tuple[list[dict], float]:
    checkpoint = cfg.paths.checkpoint(JOB)
    batches = []
    for k in range(args.batches):
        seed = 1000 + k
        land(cfg, seed, args.wave, next_s, args.wave / 2500)
        next_s += args.wave / 2500
        run_bronze(spark, cfg, "clicks")
        before = files_in(checkpoint)
        started = time.monotonic()
        run_job(spark, cfg, get_job(JOB))
        wall = time.monotonic() - started
        after = files_in(checkpoint)
        added = sum(
            size for path, size in after.items() if path not in before or before[path] != size
        )
        batch = last_committed_batch(checkpoint)
        row = progress(cfg)[batch]
        ops = row["state_operators"] or []
        batches.append(
            {
                "batch": batch,
                "wall_s": round(wall, 2),
                "trigger_ms": dict(row["durations_ms"] or {}).get("triggerExecution"),
                "commit_ms": row["state_commit_ms"],
                "state_rows": row["state_rows"],
                "snapshot_bytes": snapshot_bytes(checkpoint),
                "checkpoint_bytes_added": added,
                "files_added": sum(1 for p in after if p not in before),
                "rocksdb": {
                    o["operator"]: {
                        k: v for k, v in custom(o).items() if k.startswith("rocksdbCommit")
                    }
                    for o in ops
                },
            }
        )
        print(
            f"batch {batch}: commit {row['state_commit_ms']} ms, state "
            f"{row['state_rows']:,} rows, checkpoint +{added / 1e3:.0f} kB, "
            f"wall {wall:.1f} s",
            flush=True,
        )
    return batches, next_s


def kill_phase(cfg: TidemarkConfig, args, next_s: float) -> list[dict]:
    checkpoint = cfg.paths.checkpoint(JOB)
    env = {**os.environ, "TIDEMARK_DATA_ROOT": str(cfg.data_root)}
    command = [
        str(Path(sys.executable).with_name("tidemark")),
        "continuous",
        "--jobs",
        JOB,
        "--trigger",
        "1",
    ]
    log = open(cfg.data_root / "continuous.log", "a")

    def start():
        return subprocess.Popen(
            command,
            env=env,
            cwd=CHECKOUT,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def until(what, condition, timeout=600.0, every=0.02):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if condition():
                return
            time.sleep(every)
        raise RuntimeError(
            f"checkpoint benchmark: timed out waiting for {what} "
            f"(see {cfg.data_root / 'continuous.log'})"
        )

    def planned_past(done):
        planned = last_planned_batch(checkpoint)
        return planned is not None and (done is None or planned > done)

    trials, attempt = [], 0
    process = start()
    try:
        while len(trials) < args.kills and attempt < 3 * args.kills:
            attempt += 1
            done = last_committed_batch(checkpoint)
            expected = gold_rows(cfg) + land(
                cfg, 5000 + attempt, args.wave, next_s, args.wave / 2500
            )
            next_s += args.wave / 2500
            until("the job to plan its batch", lambda: planned_past(done))
            planned = last_planned_batch(checkpoint)
            offsets = (checkpoint / "offsets" / str(planned)).read_text()
            os.killpg(process.pid, signal.SIGKILL)
            killed = time.time()
            process.wait()
            cut_short = last_committed_batch(checkpoint) != planned
            process = start()
            commit = checkpoint / "commits" / str(planned)
            if cut_short:  # only a file's presence is polled while the restart is timed
                until(f"commits/{planned} after the restart", commit.exists)
            # tables are read at a slower pace, after the timed part
            until("gold to hold the wave", lambda: gold_rows(cfg) >= expected, every=0.5)
            if not cut_short:  # the batch committed before the kill landed: try again
                print(f"attempt {attempt}: batch {planned} committed before the kill", flush=True)
                continue
            first_commit = commit.stat().st_mtime
            until(
                "the batch's progress row", lambda: planned in progress(cfg), timeout=120, every=0.5
            )
            row = progress(cfg)[planned]
            trials.append(
                {
                    "trial": len(trials),
                    "batch": planned,
                    "kill_to_first_commit_s": round(first_commit - killed, 2),
                    "start_up_s": round(row["ts"].timestamp() - killed, 2),
                    "batch_s": round(first_commit - row["ts"].timestamp(), 2),
                    "replayed_same_offsets": (checkpoint / "offsets" / str(planned)).read_text()
                    == offsets,
                    "gold_exact": gold_rows(cfg) == expected,
                }
            )
            print(
                f"kill {len(trials)}: batch {planned} cut short; first commit "
                f"{trials[-1]['kill_to_first_commit_s']} s after SIGKILL",
                flush=True,
            )
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=180)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
        log.close()
    return trials


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--state-rows", type=int, default=1_000_000)
    parser.add_argument("--batches", type=int, default=30)
    parser.add_argument("--wave", type=int, default=1000, help="clicks per small wave")
    parser.add_argument("--kills", type=int, default=3)
    parser.add_argument(
        "--results",
        default=str(default_results("checkpoint.json")),
        help="where the JSON goes (default: the data root's results/; the committed evidence: results/checkpoint.json)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the temporary data root")
    args = parser.parse_args(argv)

    root = Path(tempfile.mkdtemp(prefix="tidemark-bench-checkpoint-"))
    os.environ["TIDEMARK_DATA_ROOT"] = str(root)
    cfg = TidemarkConfig.from_env().with_data_root(root)
    spark = get_spark(cfg)
    started = time.monotonic()
    landed = land(cfg, 1, args.state_rows, 0.0, FILL_SECONDS, files=8)
    run_bronze(spark, cfg, "clicks")
    run_job(spark, cfg, get_job(JOB))
    fill = progress(cfg)[last_committed_batch(cfg.paths.checkpoint(JOB))]
    print(
        f"fill: {landed:,} clicks, state {fill['state_rows']:,} rows, "
        f"{time.monotonic() - started:.0f} s",
        flush=True,
    )

    batches, next_s = commit_phase(spark, cfg, args, FILL_SECONDS)
    version = spark.version
    spark.stop()  # the recovery runs in processes of their own
    trials = kill_phase(cfg, args, next_s)

    commits = [b["commit_ms"] for b in batches]
    added = [b["checkpoint_bytes_added"] for b in batches]
    snapshots = [b["snapshot_bytes"] for b in batches if b["snapshot_bytes"]]
    state_bytes = snapshots[-1] if snapshots else None
    results = {
        "machine": f"{os.cpu_count()} cores, Python {platform.python_version()}, Spark {version}",
        "args": vars(args),
        "fill_state_rows": fill["state_rows"],
        "batches": batches,
        "kills": trials,
    }
    Path(args.results).write_text(json.dumps(results, indent=2, default=str) + "\n")
    lines = [
        f"`{JOB}`, {fill['state_rows']:,} state rows after the fill, {args.batches} batches of "
        f"{args.wave:,} clicks; {results['machine']}.",
        "",
        "| figure | p50 | p99 | max |",
        "|---|---:|---:|---:|",
        f"| state commit (ms) | {pct(commits, 0.5):,.0f} | {pct(commits, 0.99):,.0f} | "
        f"{max(commits):,.0f} |",
        f"| batch wall time (s) | {pct([b['wall_s'] for b in batches], 0.5):.2f} | "
        f"{pct([b['wall_s'] for b in batches], 0.99):.2f} | "
        f"{max(b['wall_s'] for b in batches):.2f} |",
        f"| checkpoint bytes added per batch (kB) | {pct(added, 0.5) / 1e3:,.0f} | "
        f"{pct(added, 0.99) / 1e3:,.0f} | {max(added) / 1e3:,.0f} |",
        "",
        (
            f"The newest full state snapshot (RocksDB's SST files and metadata, every state "
            f"partition): {state_bytes / 1e6:,.1f} MB; a batch adds "
            f"{pct(added, 0.5) / state_bytes:.2%} of it (median)."
            if state_bytes
            else "No full state snapshot was written during the batches."
        ),
        "",
        "| kill | batch | SIGKILL to first commit (s) | start-up (s) | the batch (s) "
        "| same offsets replayed | gold rows exact |",
        "|---|---:|---:|---:|---:|---|---|",
    ]
    for t in trials:
        lines.append(
            f"| {t['trial'] + 1} | {t['batch']} | {t['kill_to_first_commit_s']} | "
            f"{t['start_up_s']} | {t['batch_s']} | {t['replayed_same_offsets']} | "
            f"{t['gold_exact']} |"
        )
    print("\n".join(lines))
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)
    ok = all(t["replayed_same_offsets"] and t["gold_exact"] for t in trials)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
