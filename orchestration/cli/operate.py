"""The operating commands of `tidemark` (see docs/operating.md)."""

from __future__ import annotations

import json
import sys

from streaming_jobs.core.config import TidemarkConfig

OPERATIONS = (
    "continuous",
    "health",
    "state",
    "alerts",
    "savepoint",
    "restore",
    "rescale",
    "check",
    "rebuild",
    "rollback",
    "code",
    "accept",
    "release",
    "repair",
    "materialize",
    "new",
    "maintain",
)


class OperationError(RuntimeError):
    """An operating command could not do what was asked; the message says what to do."""


def _spark(cfg: TidemarkConfig):
    from streaming_jobs.storage.spark import get_spark

    return get_spark(cfg)


def _known(job: str):
    from streaming_jobs.storage.registry import get_job

    try:
        return get_job(job)
    except KeyError as exc:
        raise OperationError(str(exc.args[0] if exc.args else exc)) from None


def continuous(cfg: TidemarkConfig, args) -> int:
    from streaming_jobs.storage.registry import registry
    from streaming_jobs.operations.continuous import run_continuous

    names = [j for j in args.jobs.split(",") if j] or list(registry())
    specs = [_known(n) for n in names]
    streams = sorted({s for spec in specs for s in spec.sources})
    print(
        f"continuous: {', '.join(names)} (ingesting {', '.join(streams)}), trigger "
        f"{args.trigger:g}s; Ctrl-C or SIGTERM stops cleanly at the next batch boundary "
        "(a second one aborts)",
        flush=True,
    )
    try:
        result = run_continuous(
            _spark(cfg),
            cfg,
            streams=streams,
            jobs=names,
            trigger_seconds=args.trigger,
            max_seconds=args.max_seconds,
            holder="tidemark continuous (command line)",
        )
    except KeyboardInterrupt:
        print(
            "continuous: aborted by a second signal; each query's batch in flight, if any, is "
            "replayed by its next run (nothing lost or doubled)"
        )
        return 130
    for said in result.repaired:
        print(f"  repaired at the start: {said}")
    for name, m in result.metrics.items():
        print(
            f"  {name}: batch {m.checkpoint_batch_id}, {m.input_rows:,} rows in, "
            f"{m.late_rows_dropped:,} late dropped"
        )
    waited = (
        f"; waited {result.snapshot_wait_seconds:.1f}s for state snapshots to upload"
        if result.snapshot_wait_seconds >= 0.25
        else ""
    )
    print(f"continuous: stopped ({result.stopped_by}){waited}")
    return 0


def health(cfg: TidemarkConfig, args) -> int:
    from streaming_jobs.core.checkpoints import query_name
    from streaming_jobs.operations.health import CRITICAL, check
    from streaming_jobs.operations.savepoints import mend_corrupt
    from streaming_jobs.storage.registry import registry, streams

    critical = []  # the queries with a critical finding
    jobs = registry()
    queries = [(query_name(s), ()) for s in streams()] + [
        (spec.name, spec.sources) for spec in jobs.values()
    ]
    for query, sources in queries:
        findings = mend_corrupt(cfg, query, check(cfg, query, sources), ingestion=query not in jobs)
        print(f"{query}: {'healthy' if not findings else ''}")
        for f in findings:
            print(f"  [{f.severity}] {f.kind}: {f.message}")
        if any(f.severity == CRITICAL for f in findings):
            critical.append(query)
    if critical:
        print(
            f"critical findings on {', '.join(critical)}: each says what is wrong, most what to "
            "do; the rest are in docs/operating.md (Recovery playbook)"
        )
    return 1 if critical else 0


def state(cfg: TidemarkConfig, args) -> int:
    from streaming_jobs.operations.state import history, inspect

    spec = _known(args.job)
    spark = _spark(cfg)
    operators = inspect(spark, cfg, spec.name, top=args.top)
    if not operators:
        print(
            f"{spec.name}: no state in {cfg.paths.checkpoint(spec.name)} (never ran, or stateless)"
        )
        return 0
    for op in operators:
        print(
            f"{spec.name} operator {op.operator_id} {op.operator} (store {op.store}"
            + (f", variables {', '.join(op.variables)}" if op.variables else "")
            + f"): {op.rows:,} rows, {op.partitions} partitions, batches "
            f"{op.min_batch}..{op.max_batch}"
        )
        for key, size in op.largest:
            print(f"    {size:>10,} bytes  {key}")
    readings = history(cfg, spec.name, last=1)
    if readings:
        r = readings[-1]
        print(
            f"latest reading (batch {r.batch_id}, {r.ts}): {r.rows:,} rows, "
            f"{r.memory_bytes:,} bytes memory, {r.disk_bytes:,} bytes on disk; thresholds "
            f"warn {spec.thresholds.warn_rows:,} / critical {spec.thresholds.critical_rows:,} rows"
        )
    return 0


def alerts(cfg: TidemarkConfig, args) -> int:
    from streaming_jobs.operations import alerts as sink

    if args.deliver:
        d = sink.deliver(cfg)
        print(f"delivered {len(d.sent)}, failed {len(d.failed)}, backing off {d.waiting}")
    rows = sink.load(cfg)
    if not rows:
        print("no alerts")
    for r in rows[-50:]:
        state_ = "resolved" if r["resolved_at"] else "OPEN"
        pending = sink.owed(r)
        print(
            f"{r['last_seen']} {state_:8} [{r['severity']}] {r['alert_id']}: {r['message']}"
            + (f"  (pending: {pending}; {r['last_error'] or 'not sent yet'})" if pending else "")
        )
    return 0


def savepoint(cfg: TidemarkConfig, args) -> int:
    from streaming_jobs.storage.registry import registry
    from streaming_jobs.operations import savepoints

    if not args.all and not args.job:
        raise OperationError("tidemark savepoint: name a job, or --all")
    names = list(registry()) if args.all else [_known(args.job).name]
    results = savepoints.take_all(
        cfg, names, keep=cfg.ops.savepoints_keep, holder="tidemark savepoint (command line)"
    )
    for name, p in results.items():
        if not isinstance(p, savepoints.Savepoint):
            if not args.all:
                raise OperationError(p)
            print(f"{name}: skipped: {p}")
            continue
        print(f"{name}: savepoint {p.path} (batch {p.batch_id}, gold version {p.gold_version})")
    return 0


def restore(cfg: TidemarkConfig, args) -> int:
    from streaming_jobs.core.versions import RECORD, holds_current, job_version
    from streaming_jobs.core.locations import read_text
    from streaming_jobs.operations import savepoints
    from streaming_jobs.storage.registry import streams

    spec = _known(args.job)
    chosen = None
    if args.savepoint:
        chosen = next(
            (p for p in savepoints.savepoints(cfg, spec.name) if p.path.name == args.savepoint),
            None,
        )
        if chosen is None:
            raise OperationError(
                f"{spec.name} has no savepoint {args.savepoint!r}; "
                f"see {cfg.paths.savepoints / spec.name}"
            )
    chosen = chosen or next(reversed(savepoints.savepoints(cfg, spec.name)), None)
    now = job_version(spec, streams())

    def of_another_version(point: savepoints.Savepoint) -> bool:
        if point.job_version in (None, now):
            return False
        try:  # the same code recorded under another digest is this version
            record = json.loads(read_text(point.path / "checkpoint" / RECORD))
        except (OSError, ValueError):
            return True
        return not holds_current(record, spec, streams())

    if chosen is not None and of_another_version(chosen) and not args.any_version:
        raise OperationError(
            f"{spec.name}: savepoint {chosen.path.name} was taken under version "
            f"{chosen.job_version} of the job, and the job is now version {now}. Restore a "
            "savepoint of this version, or pass --any-version: the next run then checks the "
            "change against the savepoint's state before any batch (docs/changing-jobs.md)"
        )
    try:
        p = savepoints.restore(
            _spark(cfg), cfg, spec.name, chosen, holder="tidemark restore (command line)"
        )
    except (savepoints.SavepointError, RuntimeError) as exc:
        raise OperationError(str(exc)) from None
    print(
        json.dumps(
            {"restored": str(p.path), "batch_id": p.batch_id, "gold_version": p.gold_version}
        )
    )
    print(f"next: run {spec.name} (make run, the Dagster UI, or tidemark continuous) to catch up")
    return 0


def rescale(cfg: TidemarkConfig, args) -> int:
    from streaming_jobs.operations.rescale import RescaleError, rescale as run_rescale

    spec = _known(args.job)
    try:
        p = run_rescale(
            _spark(cfg), cfg, spec.name, args.partitions, holder="tidemark rescale (command line)"
        )
    except (RescaleError, RuntimeError) as exc:
        raise OperationError(str(exc)) from None
    print(
        f"{spec.name}: state repartitioned into {args.partitions} partitions "
        f"(savepoint {p.path.name} taken first)"
    )
    return 0


def check(cfg: TidemarkConfig, args) -> int:
    """Load every job and analyse it against its sources' schemas (nothing runs)."""
    from streaming_jobs.runtime.analysis import analyze
    from streaming_jobs.runtime.changes import assess, changed_since_checkpoint, refusal
    from streaming_jobs.runtime.gold import gold_query
    from streaming_jobs.storage.registry import catalogue

    found = catalogue(analysed=False)  # each file on its own: the ones that fail are problems
    for problem in found.problems:
        print(f"{problem}: error: left out")
    findings = analyze(_spark(cfg), found.jobs, policy=cfg.unbounded_state)
    for finding in findings:
        print(finding)
    # a job changed since its checkpoint in a way its state cannot take (data root's own)
    refused = []
    for spec in found.jobs.values():
        if changed_since_checkpoint(cfg, spec):
            old, new, changes = assess(cfg, spec, gold_query(_spark(cfg), cfg, spec))
            unsafe = [c for c in changes if c.unsafe]
            if unsafe:
                refused.append(refusal(spec, old, new, unsafe))
    for said in refused:
        print(f"error: {said}")
    errors = sum(f.level == "error" for f in findings) + len(found.problems) + len(refused)
    print(
        f"tidemark check: {len(found.jobs)} jobs, {errors} errors, "
        f"{sum(f.level == 'warning' for f in findings)} warnings"
    )
    return 1 if errors else 0


def rebuild(cfg: TidemarkConfig, args) -> int:
    """Build the job's current version beside the live one and swap it in
    (`streaming_jobs.operations.shadow`); ``--from-scratch``: reset it instead."""
    from streaming_jobs.core.checkpoints import CheckpointBusy
    from streaming_jobs.operations.rebuild import RebuildRefused, rebuild as reset
    from streaming_jobs.operations.shadow import RebuildError

    spec = _known(args.job)
    if getattr(args, "from_scratch", False):
        try:
            removed = reset(cfg, spec.name, force=getattr(args, "force", False))
        except (CheckpointBusy, RebuildRefused) as exc:
            raise OperationError(str(exc)) from None
        print(
            f"{spec.name}: removed {removed['progress_rows']:,} progress rows, "
            f"{removed['savepoints']} savepoints, gold table "
            f"{'yes' if removed['gold'] else 'none'}, checkpoint "
            f"{'yes' if removed['checkpoint'] else 'none'}; the next run "
            "(tidemark materialize --select ...) streams all of bronze again"
        )
        return 0
    from orchestration.recon.gate import NotSwapped, rebuild_and_swap

    try:
        _, _, done = rebuild_and_swap(
            _spark(cfg),
            cfg,
            spec,
            partitions=getattr(args, "partitions", None),
            holder="tidemark rebuild",
            skip_recon=getattr(args, "skip_recon", False),
            say=print,
        )
    except NotSwapped:
        raise OperationError(
            f"{spec.name}: not swapped: its new version does not reconcile. The live "
            "version serves on; the shadow is kept (the next rebuild goes on from it). Fix "
            "the job or its batch definition and rebuild again, or swap without a "
            "reconciliation: --skip-recon"
        ) from None
    except (CheckpointBusy, RebuildError) as exc:
        raise OperationError(str(exc)) from None
    print(_swapped(done))
    return _left_out(done)


def _left_out(done: dict) -> int:
    """1, said, when the continuous run that made the change could not start the job."""
    if not done.get("left_out"):
        return 0
    print(
        f"{done['job']}: the continuous run that hosts it could not start it at its new "
        f"version, and left it out: {done['left_out']}",
        file=sys.stderr,
    )
    return 1


def _swapped(done: dict) -> str:
    from orchestration.recon.gate import catch_up_said

    partitions = (
        f", {done['state_partitions']} state partitions" if done.get("state_partitions") else ""
    )
    return (
        f"{done['job']}: {done['kind']} done, version {done['from_version'] or 'none'} -> "
        f"{done['to_version']}: gold version {done['gold_version']} holds "
        f"{done['gold_rows']:,} rows{partitions}{catch_up_said(done)}. The version it "
        f"replaced is kept: `tidemark rollback {done['job']}` puts it back"
    )


def rollback(cfg: TidemarkConfig, args) -> int:
    """Put back the version of a job the last swap replaced (`shadow.rollback_locked`)."""
    from streaming_jobs.core.checkpoints import CheckpointBusy
    from streaming_jobs.operations.shadow import RebuildError, swap

    spec = _known(args.job)
    try:
        done = swap(lambda: _spark(cfg), cfg, spec.name, "rollback", "tidemark rollback")
    except (CheckpointBusy, RebuildError) as exc:
        raise OperationError(str(exc)) from None
    from streaming_jobs.operations.rebuild import code_after_rollback

    print(_swapped(done))
    print(code_after_rollback(cfg, spec, done["to_version"]))
    return 0


def code(cfg: TidemarkConfig, args) -> int:
    """The job's file against the version its checkpoint records; ``--put-back`` writes the
    checkpoint's copy back (`streaming_jobs.operations.rebuild.put_code_back`)."""
    from streaming_jobs.operations.rebuild import (
        CodeNotKept,
        code_against_checkpoint,
        put_code_back,
        put_code_back_unloaded,
    )

    try:
        spec = _known(args.job)
    except OperationError as exc:  # a file that does not load can still be put back
        if not args.put_back:
            from streaming_jobs.core.versions import read_record

            kept = (read_record(cfg.paths.checkpoint(args.job)) or {}).get("source")
            if kept:
                raise OperationError(
                    f"{exc}. Its checkpoint keeps the file as its version had it: "
                    f"`tidemark code {args.job} --put-back` writes it back"
                ) from None
            raise
        try:
            print(put_code_back_unloaded(cfg, args.job, str(exc)))
        except CodeNotKept as refused:
            raise OperationError(str(refused)) from None
        return 0
    if args.put_back:
        try:
            print(put_code_back(cfg, spec))
        except CodeNotKept as exc:
            raise OperationError(str(exc)) from None
        return 0
    state = code_against_checkpoint(cfg, spec)
    if state.checkpoint_version is None:
        print(f"{spec.name}: its checkpoint records no version yet (the job never ran here)")
        return 0
    if state.same:
        print(f"{spec.name}: the code is version {state.checkpoint_version}, its checkpoint's")
        return 0
    print(
        f"{spec.name}: the code is version {state.code_version}, its checkpoint holds version "
        f"{state.checkpoint_version}; what differs: {', '.join(state.differs)}"
    )
    diff = state.diff()
    if diff:
        print(diff, end="" if diff.endswith("\n") else "\n")
        print(f"`tidemark code {spec.name} --put-back` writes {state.file} back as above")
    elif state.kept:
        print(
            f"{state.file} is as version {state.checkpoint_version} had it: what differs is "
            "outside the job's file (a stream's declaration, or tidemark's stateful code)"
        )
    else:
        print(
            f"version {state.checkpoint_version}'s file is not kept (recorded before tidemark "
            "kept job files): see your version control"
        )
    return 1


def accept(cfg: TidemarkConfig, args) -> int:
    """Declare a changed job's checkpoint state fit for its new version (`accept_change`): by
    the continuous run that hosts the job, else here."""
    from streaming_jobs.core.checkpoints import CheckpointBusy
    from streaming_jobs.operations.rebuild import accept_change, code_against_checkpoint
    from streaming_jobs.operations.shadow import RebuildError

    spec = _known(args.job)
    state = code_against_checkpoint(cfg, spec)  # (read here: no Spark, no run asked)
    if state.same:
        print(
            f"{spec.name}: the code is version {state.code_version}, its checkpoint's: nothing "
            "to accept"
        )
        return 0
    try:
        done = accept_change(lambda: _spark(cfg), cfg, spec)
    except (CheckpointBusy, RebuildError) as exc:
        raise OperationError(str(exc)) from None
    if "left_out" not in done:  # accepted here
        then = "its next run starts on it without comparing"
    elif done["left_out"]:
        then = "the continuous run that hosts it recorded it"
    else:
        then = "the continuous run that hosts it runs it from its next batch"
    print(
        f"{spec.name}: version {done['to_version']} accepted for its checkpoint (it was "
        f"{done['from_version'] or 'not recorded'}); {then}. Check its next reconciliation: it "
        "compares gold with the new definition"
    )
    return _left_out({"job": spec.name, **done})


def release(cfg: TidemarkConfig, args) -> int:
    """End the hold on a query that failed the same batch again and again (`failures.held`)."""
    from streaming_jobs.storage.failures import HOLD_AFTER, release as end_hold
    from streaming_jobs.storage.registry import streams

    name = args.query
    if not (name.startswith("bronze_") and name.removeprefix("bronze_") in streams()):
        name = _known(name).name
    hold = end_hold(cfg, name)
    if hold is None:
        print(f"{name} is not held: nothing to release")
        return 0
    print(
        f"{name}: released from batch {hold.batch_id} ({hold.failures} failures in a row, the "
        f"last: {hold.error[:300]}). The next run that starts it (a materialization, the "
        "automation, the continuous run) tries that batch again; it is held again if the "
        f"batch fails {HOLD_AFTER} more times"
    )
    return 0


def repair(cfg: TidemarkConfig, args) -> int:
    """Set aside a checkpoint's torn newest file, an ingestion's or a job's, when it is safe
    (`streaming_jobs.storage.repairs`)."""
    from streaming_jobs.core.checkpoints import CheckpointBusy
    from streaming_jobs.storage.repairs import RepairRefused, ingestion_stream, repair as mend
    from streaming_jobs.storage.registry import registry, streams

    if args.query not in registry() and ingestion_stream(args.query) is None:
        known = ", ".join([*(f"bronze_{s}" for s in sorted(streams())), *sorted(registry())])
        raise OperationError(
            f"{args.query}: no such ingestion or job (one of: {known}); tidemark health lists "
            "each with its findings"
        )
    try:
        done = mend(cfg, args.query)
    except (CheckpointBusy, RepairRefused) as exc:
        raise OperationError(str(exc)) from None
    if done is None:
        print(
            f"{args.query}: no offsets or commits file of its checkpoint is unreadable: nothing to mend"
        )
        return 0
    print(done.said())
    return 0


def materialize(cfg: TidemarkConfig, args) -> int:
    """Materialize a selection of assets in one in-process run recorded in the instance."""
    import os

    import dagster as dg

    from orchestration.definitions import build_definitions
    from orchestration.lib.instance import prepare_dagster_home
    from orchestration.recon.recon_partitions import chosen_tags, incremental_tags

    prepare_dagster_home(cfg)
    os.environ["TIDEMARK_DATA_ROOT"] = str(cfg.data_root)
    defs = build_definitions()
    graph = defs.resolve_asset_graph()
    try:
        keys = dg.AssetSelection.from_string(args.select).resolve(graph)
    except Exception as exc:  # noqa: BLE001 - Dagster's parse errors vary in type
        raise OperationError(
            f"--select {args.select!r}: {exc}. Examples: 'key:gold/my_job', "
            "'+key:gold/my_job' (with what it reads), 'group:streaming'"
        ) from None
    if not keys:
        raise OperationError(
            f"--select {args.select!r} matches no asset; list them with "
            "'dg list defs' or see the Dagster UI"
        )
    partitioned = {k for k in keys if graph.get(k).partitions_def is not None}
    tags = {}
    if partitioned:
        # reconciliation's days: the ones asked for (at least), else an incremental run
        tags = chosen_tags(args.partition) if args.partition else incremental_tags(cfg)
        print(f"reconciliation partitions: {args.partition or 'today (incremental)'}", flush=True)
    elif args.partition:
        raise OperationError(
            f"--partition {args.partition}: --select {args.select!r} has no "
            "partitioned asset (only reconciliation's dbt models have days)"
        )
    print(
        f"materializing {len(keys)} assets: {', '.join(sorted(k.to_user_string() for k in keys))}",
        flush=True,
    )
    result = defs.resolve_implicit_global_asset_job_def().execute_in_process(
        asset_selection=list(keys),
        instance=dg.DagsterInstance.get(),
        raise_on_error=False,
        tags=tags,
    )
    print(f"run {result.run_id}: {'success' if result.success else 'FAILED (see the Dagster UI)'}")
    return 0 if result.success else 1


def new(cfg: TidemarkConfig, args) -> int:
    """Write a commented stream or job file that loads as it is."""
    from orchestration.cli.scaffold import scaffold

    try:
        if args.keyed and not args.python:
            raise ValueError("tidemark new job --keyed: keyed state is a Python job; add --python")
        path = scaffold(
            args.kind,
            args.name,
            folder=args.folder,
            source=args.source,
            sql=not args.python,
            keyed=args.keyed,
            key=args.key,
        )
    except (ValueError, FileExistsError) as exc:
        raise OperationError(str(exc)) from None
    print(f"wrote {path}; add its folder to TIDEMARK_JOBS_PATH, then run 'tidemark check'")
    return 0


def maintain(cfg: TidemarkConfig, args) -> int:
    """Retention now (what ``maintenance_schedule`` runs): exit 1 if a step failed."""
    from streaming_jobs.operations import retention

    report = retention.maintain(_spark(cfg), cfg)
    print("\n".join(retention.table(report)))
    print(
        f"{len(report.steps)} steps in {report.seconds:.1f} s, "
        f"{report.total('bytes_freed') / 1e6:.1f} MB freed, "
        f"{report.total('rows_removed'):,} ops rows pruned"
    )
    for step in report.failed:
        print(f"FAILED {step.target}: {step.detail}", file=sys.stderr)
    return 1 if report.failed else 0
