"""The always-on setup, as a user runs it: ``tidemark dev`` and ``tidemark live`` (`make live`).

Processes, all on 127.0.0.1:

- the SQL endpoint (`streaming_jobs.services.sql_endpoint`): Spark's Thrift server, port 10000;
- ``dagster dev``: the webserver (port 3000), the daemon (schedules, sensors, the run queue,
  automation) and the code server; every run is a process of its own;
- in `live`, a landing thread in this process writes the five demo streams at a steady rate.

`DagsterDev` starts and stops ``dagster dev``; `Graphql` launches, watches and terminates runs
through the webserver, as the UI does. `live` runs the whole system for a bounded time: events
land, the continuous run hosts every job, reconciliation runs on a short schedule, savepoints
are taken, retention runs (every 5 minutes unless TIDEMARK_MAINTENANCE_CRON says otherwise),
sensors tick; then it stops cleanly (landing, then the continuous run, then a final
reconciliation) and prints the summary. Full logs go under ``<data root>/logs/``. If the
continuous run fails, landing goes on (producers do not wait for a consumer) and `live` follows
the run ``streaming_restart_sensor`` starts; ``kill`` (SIGTERM) stops it as Ctrl-C does.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

from streaming_jobs.core.config import CHECKOUT, TidemarkConfig

from orchestration.lib.instance import prepare_dagster_home
from orchestration.recon.recon_partitions import incremental_tags

TERMINAL = ("SUCCESS", "FAILURE", "CANCELED")
IN_FLIGHT = ("QUEUED", "NOT_STARTED", "STARTING", "STARTED", "CANCELING")
# at the stop, how long runs in flight (a reconciliation, retention, a savepoint) get to finish
# before they are terminated through Dagster (recorded CANCELED, never killed with the UI)
SETTLE_SECONDS = 300.0
CONTINUOUS_JOB = "continuous_streaming_job"
TRIGGER_SECONDS = 15.0  # the continuous run's trigger in `tidemark live`
# how long the queries have, after the landing stops, to read everything landed
CATCH_UP_SECONDS = 600


class LiveError(RuntimeError):
    """The always-on setup could not start or stop; the message names the process and log."""


# What the daemon's environment needs, set by tidemark's own commands (and by you wherever you
# run the daemon yourself: see docs/running-at-scale.md).
#
# DAGSTER_AUTOMATION_TICK_SETTLE_SECONDS: with the default 0, an automation tick reads "newly
# updated" with no upper bound on the event log, but reads the run tags of those updates only up
# to the id it noted when the tick began. A continuous run reports its tables every flush, so a
# report landing between the two was "updated by an untagged run" and reconcile_on_update asked
# for a reconciliation (seen once in a 50-minute soak). Any value above 0 bounds both reads by
# that one id (the update counts at the next tick, with its tags), after sleeping that long.
DAEMON_ENV = {"DAGSTER_AUTOMATION_TICK_SETTLE_SECONDS": "1"}


class DagsterDev:
    """``dagster dev`` (webserver + daemon + code server) on 127.0.0.1, as a process group."""

    def __init__(self, cfg: TidemarkConfig, port: int, env: dict[str, str] | None = None) -> None:
        self.cfg, self.port = cfg, port
        self.env = {
            **DAEMON_ENV,
            **os.environ,
            "TIDEMARK_DATA_ROOT": str(cfg.data_root),
            "DAGSTER_HOME": str(cfg.paths.dagster_home),
            **(env or {}),
        }
        self.log_path = cfg.paths.logs / "dagster.log"
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        """`dagster dev` on loopback, with a code server that outlasts a paused host
        (orchestration/cli/dagster_dev.py); run in the checkout with `env`."""
        dagster = [sys.executable, "-m", "orchestration.cli.dagster_dev"]
        return [*dagster, "dev", "-h", "127.0.0.1", "-p", str(self.port), "-w", "workspace.yaml"]

    def start(self, timeout: float = 300.0) -> "Graphql":
        prepare_dagster_home(self.cfg)
        self.cfg.paths.logs.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "a") as log:
            self.proc = subprocess.Popen(
                self.command(),
                cwd=CHECKOUT,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        client = Graphql(self.url)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise LiveError(
                    f"dagster dev exited while starting (code {self.proc.returncode});"
                    f" see {self.log_path}"
                )
            if client.location_loaded():
                return client
            time.sleep(1.0)
        raise LiveError(
            f"the Dagster webserver did not load the code location within "
            f"{timeout:.0f}s; see {self.log_path}"
        )

    def wait(self) -> None:
        if self.proc is not None:
            self.proc.wait()

    def stop(self, timeout: float = 60.0) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)  # dagster dev stops its children on SIGTERM
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


class Graphql:
    """The webserver's GraphQL API: what the UI does, from code."""

    def __init__(self, url: str) -> None:
        self.endpoint = f"{url}/graphql"

    def query(self, text: str, variables: dict | None = None) -> dict:
        body = json.dumps({"query": text, "variables": variables or {}}).encode()
        request = urllib.request.Request(
            self.endpoint, data=body, headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=60) as answer:
            reply = json.loads(answer.read())
        if reply.get("errors"):
            raise LiveError(f"Dagster GraphQL error: {reply['errors'][0].get('message')}")
        return reply["data"]

    def location_loaded(self) -> bool:
        try:
            data = self.query(
                "{ workspaceOrError { ... on Workspace { locationEntries { name "
                "loadStatus locationOrLoadError { __typename } } } } }"
            )
        except (OSError, urllib.error.URLError, LiveError, ValueError):
            return False
        entries = data["workspaceOrError"].get("locationEntries") or []
        return bool(entries) and all(
            e["loadStatus"] == "LOADED"
            and e["locationOrLoadError"]["__typename"] == "RepositoryLocation"
            for e in entries
        )

    def repository(self) -> dict:
        data = self.query(
            "{ repositoriesOrError { ... on RepositoryConnection { nodes { name "
            "location { name } } } } }"
        )
        repo = data["repositoriesOrError"]["nodes"][0]
        return {"repositoryLocationName": repo["location"]["name"], "repositoryName": repo["name"]}

    def selector(self, job: str) -> dict:
        data = self.query(
            "{ repositoriesOrError { ... on RepositoryConnection { nodes { name "
            "location { name } jobs { name } } } } }"
        )
        for repo in data["repositoriesOrError"]["nodes"]:
            if job in {j["name"] for j in repo["jobs"]}:
                return {
                    "repositoryLocationName": repo["location"]["name"],
                    "repositoryName": repo["name"],
                    "jobName": job,
                }
        raise LiveError(f"job {job} is not in the loaded code location")

    def launch(
        self,
        job: str,
        run_config: dict | None = None,
        tags: dict[str, str] | None = None,
        assets: list[list[str]] | None = None,
    ) -> str:
        """Launch ``job`` (of its assets, only ``assets`` when given: "Materialize selected"
        in the UI); its run id."""
        selector = self.selector(job)
        if assets is not None:
            selector = {
                **selector,
                "assetSelection": [{"path": list(a)} for a in assets],
                "assetCheckSelection": [],
            }
        data = self.query(
            """mutation Launch($params: ExecutionParams!) { launchRun(executionParams: $params) {
                 __typename ... on LaunchRunSuccess { run { runId } }
                 ... on PythonError { message } ... on RunConfigValidationInvalid {
                 errors { message } } ... on InvalidSubsetError { message } } }""",
            {
                "params": {
                    "selector": selector,
                    "runConfigData": run_config or {},
                    "executionMetadata": {
                        "tags": [{"key": k, "value": v} for k, v in (tags or {}).items()]
                    },
                }
            },
        )
        result = data["launchRun"]
        if result["__typename"] != "LaunchRunSuccess":
            raise LiveError(f"launching {job} failed: {json.dumps(result)[:1000]}")
        return result["run"]["runId"]

    def status(self, run_id: str) -> str:
        data = self.query(
            "query S($id: ID!) { runOrError(runId: $id) { ... on Run { status } } }", {"id": run_id}
        )
        return data["runOrError"]["status"]

    def runs(
        self, job: str | None = None, limit: int | None = 100, created_after: float | None = None
    ) -> list[dict]:
        """Runs, newest first: ``job``'s only, those created after ``created_after`` (epoch
        seconds) only; ``limit`` None for all of them."""
        where: dict = {"pipelineName": job} if job else {}
        if created_after is not None:
            where["createdAfter"] = created_after
        data = self.query(
            "query R($filter: RunsFilter, $limit: Int) { runsOrError(filter: $filter, "
            "limit: $limit) { ... on Runs { results { runId jobName status startTime endTime "
            "tags { key value } } } } }",
            {"filter": where, "limit": limit},
        )
        return data["runsOrError"]["results"]

    def in_flight(self) -> list[dict]:
        """Runs queued or running (the run queue's and the run workers')."""
        data = self.query(
            "query F($filter: RunsFilter) { runsOrError(filter: $filter) { ... on Runs { "
            "results { runId jobName status } } } }",
            {"filter": {"statuses": list(IN_FLIGHT)}},
        )
        return data["runsOrError"]["results"]

    def terminate(self, run_id: str) -> None:
        self.query(
            "mutation T($id: String!) { terminateRun(runId: $id) { __typename } }", {"id": run_id}
        )

    def wait(self, run_id: str, states=TERMINAL, timeout: float = 900.0) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            status = self.status(run_id)
            if status in states:
                return status
            time.sleep(1.0)
        raise LiveError(f"run {run_id} did not reach {'/'.join(states)} within {timeout:.0f}s")

    def set_schedule(self, schedule: str, running: bool) -> str:
        """Turn a schedule on or off, as its toggle in the UI does; its new status."""
        selector = {**self.repository(), "scheduleName": schedule}
        if running:
            data = self.query(
                """mutation On($selector: ScheduleSelector!) { startSchedule(scheduleSelector:
                     $selector) { __typename ... on ScheduleStateResult { scheduleState { status
                     } } ... on PythonError { message } } }""",
                {"selector": selector},
            )
            result = data["startSchedule"]
        else:
            state = self.query(
                """query S($selector: ScheduleSelector!) { scheduleOrError(scheduleSelector:
                     $selector) { ... on Schedule { scheduleState { id } } } }""",
                {"selector": selector},
            )["scheduleOrError"]["scheduleState"]
            data = self.query(
                """mutation Off($id: String) { stopRunningSchedule(id: $id) { __typename
                     ... on ScheduleStateResult { scheduleState { status } }
                     ... on PythonError { message } } }""",
                {"id": state["id"]},
            )
            result = data["stopRunningSchedule"]
        if result["__typename"] != "ScheduleStateResult":
            raise LiveError(
                f"turning {schedule} {'on' if running else 'off'} failed: "
                f"{json.dumps(result)[:1000]}"
            )
        return result["scheduleState"]["status"]

    def sensor_ticks(self, sensor: str, limit: int = 20) -> list[dict]:
        """The sensor's latest ticks: status and start/end timestamps."""
        data = self.query(
            """query Ticks($selector: SensorSelector!, $limit: Int) { sensorOrError(
                 sensorSelector: $selector) { ... on Sensor { sensorState { ticks(limit: $limit) {
                 status timestamp endTimestamp error { message } } } } } }""",
            {"selector": {**self.repository(), "sensorName": sensor}, "limit": limit},
        )
        return data["sensorOrError"]["sensorState"]["ticks"]


class Landing(threading.Thread):
    """Lands the demo streams at a steady rate: one file per stream every ``every`` seconds,
    each the next stretch of event time (``rate * every`` events at the stream's rate), so that
    the streams stay in step in event time."""

    def __init__(
        self, cfg: TidemarkConfig, rate: float, minutes: float, every: float = 5.0, seed: int = 7
    ) -> None:
        super().__init__(daemon=True, name="tidemark-landing")
        from streaming_jobs.storage.generator import GeneratorConfig, generate_by_time

        from orchestration.cli.demo import DEMO_RATES, DEMO_STREAMS

        self.cfg, self.every = cfg, every
        self.ticks = max(1, int(minutes * 60 / every))
        per_file = max(1, int(rate * every))
        self.samples = []
        for stream in DEMO_STREAMS:
            gen = GeneratorConfig(
                stream=stream,
                events=per_file * self.ticks,
                files=self.ticks,
                seed=seed,
                rate=DEMO_RATES.get(stream, 2.0),
                file_prefix=f"live-{seed}",
            )
            # each file is the next stretch of event time that holds ``per_file`` events at
            # the stream's rate: payments (fewer than their orders) keep pace with the orders
            self.samples.append((gen, generate_by_time(gen, per_file / gen.rate)))
        self.landed = 0
        self.stop_event = threading.Event()

    def run(self) -> None:
        from streaming_jobs.storage.generator import deliver

        for tick in range(self.ticks):
            for gen, files in self.samples:
                deliver(self.cfg, gen, files, range(tick, tick + 1))  # landing or Kafka
                self.landed += len(files[tick])
            if self.stop_event.wait(self.every):
                return


def live(
    cfg: TidemarkConfig,
    *,
    minutes: float = 5.0,
    rate: float = 40.0,
    port: int = 3000,
    recon_every_minutes: int = 2,
    out=print,
) -> int:
    """Run the always-on setup for ``minutes``, stop cleanly, print the summary; see the doc."""
    from streaming_jobs.storage.spark import get_spark

    from orchestration.cli.services import (
        start_cluster_if_used,
        start_kafka_if_used,
        start_store_if_used,
        describe_endpoint,
        start_sql_endpoint,
        stop_sql_endpoint,
    )
    from orchestration.cli.summary import collect, render

    started = time.monotonic()
    if threading.current_thread() is threading.main_thread():
        stop_like_ctrl_c()  # Dagster, the endpoint and landing are stopped
    env = {
        "TIDEMARK_RECON_CRON": f"*/{recon_every_minutes} * * * *",
        "TIDEMARK_SAVEPOINT_CRON": f"*/{max(recon_every_minutes + 1, 3)} * * * *",
        # retention runs too (with the retention settings of the environment)
        "TIDEMARK_MAINTENANCE_CRON": os.environ.get("TIDEMARK_MAINTENANCE_CRON", "*/5 * * * *"),
    }
    out(f"tidemark live: {minutes:g} min on {cfg.data_root}; full logs in {cfg.paths.logs}")
    store = start_store_if_used(cfg)
    if store:
        out(f"  data              {store}")
    cluster = start_cluster_if_used(cfg)
    if cluster:
        out(f"  Spark             {cluster}")
    kafka = start_kafka_if_used(cfg)
    if kafka:
        out(f"  Kafka             {kafka}")
    endpoint = start_sql_endpoint(cfg)
    out(
        f"  SQL endpoint      {describe_endpoint(cfg, endpoint)}  "
        f"({time.monotonic() - started:.0f}s)"
    )
    dagster = DagsterDev(cfg, port, env)
    landing = Landing(cfg, rate=rate, minutes=minutes)
    failures: list[str] = []  # why the command exits 1, said last
    gql, interrupted = None, False
    session = time.time()  # runs created before this were an earlier session's
    final = None  # the final reconciliation's run, whose outcome is said on its own
    try:
        gql = dagster.start()
        out(f"  Dagster UI        {dagster.url}  (daemon: schedules, sensors, run queue)")
        landing.start()
        continuous = gql.launch(CONTINUOUS_JOB, continuous_config(TRIGGER_SECONDS))
        out(
            f"  continuous run    {continuous[:8]} hosting every job; landing {rate:g} events/s "
            f"per stream (payments fewer, in step with their orders); reconciliation every "
            f"{recon_every_minutes} min"
        )
        deadline = started + minutes * 60
        restarts = 0
        while time.monotonic() < deadline:
            time.sleep(min(30.0, max(0.0, deadline - time.monotonic())))
            out("  " + _status_line(cfg, gql, continuous, landing, started, session))
            ended = gql.status(continuous)
            if ended in TERMINAL:
                # producers do not stop when a consumer fails: landing goes on while
                # streaming_restart_sensor starts the run again (with its backoff)
                wait = cfg.ops.restart_wait(restarts + 1) + 120.0
                successor = successor_run(gql, continuous, timeout=wait)
                if successor is None:
                    out(
                        f"  the continuous run {continuous[:8]} ended ({ended}) and was not "
                        f"started again within {wait:.0f}s; see the Dagster UI"
                    )
                    failures.append(
                        f"the continuous run {continuous[:8]} ended ({ended}) and was not restarted"
                    )
                    break
                restarts += 1
                out(
                    f"  continuous run {continuous[:8]} ended ({ended}); "
                    f"streaming_restart_sensor started {successor[:8]} (restart {restarts})"
                )
                continuous = successor
        landing.stop_event.set()
        landing.join()
        out(
            f"  landing stopped: {landing.landed:,} lines landed; waiting for every query to "
            "catch up"
        )
        waited = time.monotonic()
        behind = wait_caught_up(
            hosted_assets(),
            since=time.time(),
            timeout=CATCH_UP_SECONDS,
            trigger_seconds=TRIGGER_SECONDS,
            say=out,
        )
        waited = time.monotonic() - waited
        if behind:
            out(
                f"  every query caught up: NO: after {CATCH_UP_SECONDS} s, "
                f"{', '.join(behind)} had no report of having read everything"
            )
            failures.append(
                f"{len(behind)} queries did not catch up with the landed data within "
                f"{CATCH_UP_SECONDS} s ({', '.join(behind)}): the continuous run fell behind "
                "the landing rate or stopped reading; see the run and each asset's latest "
                "materialization in the Dagster UI"
            )
        else:
            out(f"  every query caught up: yes, {waited:.0f} s after the landing stopped")
        gql.terminate(continuous)
        ended = gql.wait(continuous, timeout=300)
        out(f"  continuous run    {ended} (stopped cleanly at a committed batch)")
        final = gql.launch("reconciliation_job", tags=incremental_tags(cfg))
        status = gql.wait(final, timeout=900)
        out(f"  final reconciliation {final[:8]}: {status}")
        if status != "SUCCESS":
            failures.append(f"the final reconciliation run {final[:8]} ended {status}")
    except BaseException:
        interrupted = True  # Ctrl-C or kill: runs in flight are canceled, not waited for
        raise
    finally:
        landing.stop_event.set()
        if gql is not None:
            out("  " + settle_runs(gql, 0.0 if interrupted else SETTLE_SECONDS))
            if not interrupted:
                runs = gql.runs(limit=None, created_after=session)
                tally, failed = session_runs(runs, said=(final,) if final else ())
                out("  runs of this session: " + tally)
                if failed:
                    failures.append(
                        f"{len(failed)} run(s) of this session failed: {', '.join(failed)} "
                        "(each run's error is in the Dagster UI, Runs)"
                    )
        dagster.stop()
        stop_sql_endpoint(cfg)
    summary = collect(get_spark(cfg), cfg)
    out(f"tidemark live took {time.monotonic() - started:.0f}s")
    out(render(summary, cfg))
    if not summary.recon.clean:
        failures.append("the reconciliation is not clean (above)")
    if failures:
        out("tidemark live: exit 1: " + "; ".join(failures))
    return 1 if failures else 0


def continuous_config(trigger_seconds: float) -> dict:
    """The run config `live` launches the continuous run with (every job, this trigger)."""
    settings = {
        "trigger_seconds": trigger_seconds,
        "flush_seconds": 15.0,
        "heartbeat_seconds": 15.0,
    }
    return {"ops": {"run_continuously": {"config": settings}}}


def settle_runs(gql: Graphql, wait_seconds: float, poll: float = 2.0) -> str:
    """Before Dagster stops (its run workers share its process group): let the runs in flight
    finish for up to ``wait_seconds``, then terminate the rest through Dagster, so that each is
    recorded as it ended (SUCCESS, or CANCELED), never as a FAILURE of a killed process."""
    deadline = time.monotonic() + wait_seconds
    while (running := gql.in_flight()) and time.monotonic() < deadline:
        time.sleep(poll)
    canceled = []
    for run in running:
        gql.terminate(run["runId"])
        canceled.append(f"{run['jobName']} {run['runId'][:8]}")
    for run in running:
        try:
            gql.wait(run["runId"], timeout=120.0)
        except LiveError:
            pass  # said below: still not ended
    left = [f"{r['jobName']} {r['runId'][:8]}" for r in gql.in_flight()]
    text = "runs in flight at the stop: " + (
        "none"
        if not running
        else f"{len(canceled)} terminated through Dagster (CANCELED): " + ", ".join(canceled)
    )
    return text + (f"; still running when Dagster stopped: {', '.join(left)}" if left else "")


def terminated(signum, frame) -> None:
    raise SystemExit(128 + signum)


def stop_like_ctrl_c() -> None:
    """`kill` (SIGTERM) stops this command as Ctrl-C does. And Ctrl-C works in what it starts
    even when it was started in the background by a shell (`make dev &`, a script), which
    starts it with SIGINT ignored: its children would inherit that, and `dagster dev`'s
    webserver and daemon then ignore the SIGINT it stops them with, until killed a minute
    later. A handler is reset at a child's exec; an ignored signal is not."""
    signal.signal(signal.SIGTERM, terminated)
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def successor_run(gql: "Graphql", ended: str, timeout: float) -> str | None:
    """The continuous run launched after ``ended`` (by streaming_restart_sensor), if one is
    launched within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        runs = gql.runs(CONTINUOUS_JOB, limit=5)  # newest first
        ids = [r["runId"] for r in runs]
        if ended in ids and ids.index(ended) > 0:
            return ids[0]
        if time.monotonic() >= deadline:
            return None
        time.sleep(5.0)


def hosted_assets() -> list:
    """The assets a continuous run of every job reports: bronze of their sources, their gold."""
    from dagster import AssetKey

    from streaming_jobs.storage.registry import registry

    specs = registry().values()
    streams = sorted({s for spec in specs for s in spec.sources})
    return [
        *(AssetKey(["bronze", s]) for s in streams),
        *(AssetKey(["gold", spec.name]) for spec in specs),
    ]


def wait_caught_up(
    keys,
    since: float,
    timeout: float,
    trigger_seconds: float,
    instance=None,
    say=None,
    every: float = 30.0,
    poll: float = 2.0,
) -> list[str]:
    """Until every query has read all that reached its source before ``since`` (nothing lands
    after it): each asset's latest continuous report says it read no new row and its source
    has nothing waiting (`orchestration.lib.metadata.IDLE`): judged by data, not by batches, since
    a commit that changes no data (OPTIMIZE, VACUUM) makes the queries downstream run empty
    batches.

    A report tells what the query's last trigger saw, up to ``trigger_seconds`` before it was
    made, so only reports made a trigger interval after a moment count for that moment. And a
    job's "nothing waiting" can be seen just before its bronze commits the last files. So two
    rounds: the first shows bronze has committed everything landed; the second, begun when the
    first ends, shows each job has read that last bronze commit.

    Returns the assets not caught up when ``timeout`` ran out ([]: every one did). While some
    are not, ``say`` gets a line every ``every`` seconds naming them: a wait of minutes is not
    silent."""
    from dagster import DagsterInstance

    from orchestration.lib.metadata import IDLE

    instance = instance or DagsterInstance.get()
    started = time.monotonic()
    deadline, next_say = started + timeout, started + every

    def behind(after: float) -> list[str]:
        out = []
        for key in keys:
            event = instance.get_latest_materialization_event(key)
            if (
                event is None
                or event.timestamp <= after
                or not (event.asset_materialization.description or "").endswith(IDLE)
            ):
                out.append(key.to_user_string())
        return out

    for round_ in ("bronze has committed what landed", "each job has read bronze's last commit"):
        while waiting := behind(since + trigger_seconds):
            now = time.monotonic()
            if now >= deadline:
                return waiting
            if say is not None and now >= next_say:
                named = ", ".join(waiting[:4]) + (", ..." if len(waiting) > 4 else "")
                say(
                    f"  still waiting ({now - started:.0f} s; until {round_}): "
                    f"{len(waiting)} of {len(keys)} queries without a caught-up report: {named}"
                )
                next_say = now + every
            time.sleep(poll)
        since = time.time()
    return []


def _status_line(
    cfg, gql: Graphql, continuous: str, landing: Landing, started: float, session: float
) -> str:
    from streaming_jobs.operations import alerts

    runs = gql.runs(limit=None, created_after=session)
    elapsed = time.monotonic() - started
    return (
        f"t+{elapsed / 60:4.1f}m  landed {landing.landed:,} | continuous "
        f"{gql.status(continuous)} | reconciliations {_run_counts(runs, 'reconciliation_job')} | "
        f"savepoint runs {_run_counts(runs, 'savepoint_job')} | open alerts "
        f"{len(alerts.open_alerts(cfg))}"
    )


def session_runs(runs: list[dict], said: tuple[str, ...] = ()) -> tuple[str, list[str]]:
    """Every job's runs of a session by outcome, and the failed ones (``job run-id``) that
    make ``tidemark live`` exit 1, but for the runs in ``said`` (the final reconciliation's
    failure is said on its own). A failed continuous run is not among them either: the
    restart sensor starts it again, and a run it did not restart is a failure of its own."""
    jobs = sorted({r["jobName"] for r in runs}, key=lambda j: (j != CONTINUOUS_JOB, j))
    tally = "; ".join(f"{job} {_run_counts(runs, job)}" for job in jobs) or "none"
    failed = [
        f"{r['jobName']} {r['runId'][:8]}"
        for r in runs
        if r["status"] == "FAILURE" and r["jobName"] != CONTINUOUS_JOB and r["runId"] not in said
    ]
    return tally, failed


def _run_counts(runs: list[dict], job: str) -> str:
    """A job's runs by outcome, e.g. ``2 ok, 1 failed, 1 running``: a failure is never hidden,
    and a run in flight is not counted as anything else."""
    statuses = [r["status"] for r in runs if r["jobName"] == job]
    groups = {
        "ok": ("SUCCESS",),
        "failed": ("FAILURE",),
        "running": ("STARTING", "STARTED"),
        "queued": ("QUEUED", "NOT_STARTED"),
        "canceled": ("CANCELING", "CANCELED"),
    }
    counts = {name: sum(s in kinds for s in statuses) for name, kinds in groups.items()}
    shown = [f"{counts[n]} {n}" for n in ("ok", "failed")]
    shown += [f"{counts[n]} {n}" for n in ("running", "queued", "canceled") if counts[n]]
    return ", ".join(shown)
