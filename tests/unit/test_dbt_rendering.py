"""The dbt side written from the registries, without running dbt: the committed built-in
models, the generated models of your jobs, and the --vars every invocation gets."""

from __future__ import annotations

import os
from datetime import datetime, timedelta

import yaml

from streaming_jobs.storage.registry import registry
from streaming_jobs.schemas import STREAMS

from orchestration.recon import dbt_models
from orchestration.recon.dbt_cli import (
    parse_args,
    split_own_options,
    split_run_vars,
    with_excluded,
    with_vars,
)
from orchestration.recon.dbt_vars import job_vars, last_batches
from orchestration.recon.project import DBT_PROJECT_DIR

PROJECT = yaml.safe_load((DBT_PROJECT_DIR / "dbt_project.yml").read_text())


def test_the_committed_sources_and_staging_models_are_what_the_schemas_render():
    """The checkout's dbt project holds the built-in streams' side; it must not drift from
    streaming_jobs/schemas.py (fix with `make dbt-models`)."""
    rendered = dbt_models.builtin_files()
    assert set(rendered) == {"staging/_lake__sources.yml"} | {
        f"staging/stg_{s}.{ext}" for s in STREAMS for ext in ("sql", "yml")
    }
    for relative, text in rendered.items():
        assert (DBT_PROJECT_DIR / "models" / relative).read_text() == text, relative
    sources = yaml.safe_load(rendered["staging/_lake__sources.yml"])["sources"][0]["tables"]
    columns = {t["name"]: [c["name"] for c in t.get("columns", [])] for t in sources}
    assert columns["bronze_clicks"] == STREAMS["clicks"].field_names


def test_the_projects_job_vars_are_the_built_in_specs():
    """dbt run from the checkout alone uses dbt_project.yml's vars: they are the specs'."""
    assert PROJECT["vars"]["jobs"] == job_vars(registry())
    classes = PROJECT["vars"]["recon_classes"]
    from orchestration.recon.recon_report import RECON_CLASSES, UNEXPLAINED

    assert RECON_CLASSES == tuple(classes["explained"] + classes["unexplained"])
    assert UNEXPLAINED == ("value_mismatch", "missing_in_stream", "missing_in_batch")


SQL_JOB = """-- logins_10m: failed logins per user per 10 minutes.
-- source: logins
-- keys: user_id, window_start, window_end
-- measures: failures
-- watermark: 5 minutes
with failed as (select * from events where outcome = 'failed')
select user_id, window.start as window_start, window.end as window_end, count(*) as failures
from failed
group by user_id, window(event_time, '10 minutes')
"""
STREAM = """
from pyspark.sql import types as T
from streaming_jobs.schemas import Field, StreamSchema
STREAM = StreamSchema(name="logins", key="login_id", event_time="event_time", fields=(
    Field("login_id", T.StringType(), "id"), Field("user_id", T.StringType(), "who"),
    Field("outcome", T.StringType(), "ok or failed"),
    Field("event_time", T.TimestampType(), "when")))
"""


def test_your_jobs_get_one_line_models_in_the_generated_folder(tmp_path, monkeypatch):
    (tmp_path / "logins.py").write_text(STREAM)
    (tmp_path / "logins_10m.sql").write_text(SQL_JOB)
    monkeypatch.setenv("TIDEMARK_JOBS_PATH", str(tmp_path))
    files = dbt_models.render()
    generated = {p for p in files if p.startswith("generated/")}
    assert generated == {
        f"generated/{p}"
        for p in (
            "staging/stg_logins.sql",
            "staging/stg_logins.yml",
            "batch/int_logins_10m__batch.sql",
            "batch/int_logins_10m__batch.yml",
            "recon/recon_logins_10m.sql",
            "recon/recon_logins_10m.yml",
        )
    }
    code = [
        l
        for l in files["generated/batch/int_logins_10m__batch.sql"].splitlines()
        if not l.startswith("--")
    ]
    # a windowed job over one stream: its tables replace only the days a run recomputes
    by_day = "{{ config(materialized='recon_partitions', recon_job='logins_10m') }}"
    assert code == [by_day, "{{ batch_by_basis('logins_10m') }}"]
    recon = [
        l
        for l in files["generated/recon/recon_logins_10m.sql"].splitlines()
        if not l.startswith("--")
    ]
    assert recon == [
        by_day,
        "{{ recon_by_basis('logins_10m', open_when='coalesce(t.window_end, "
        "o.window_end) > s.stream_watermark') }}",
    ]
    # the copy's sources list your stream and job beside the built-in ones
    tables = {
        t["name"]
        for t in yaml.safe_load(files["staging/_lake__sources.yml"])["sources"][0]["tables"]
    }
    assert {"bronze_logins", "gold_logins_10m", "bronze_clicks"} <= tables
    # the job's SQL and its source's dedup key and columns reach the macro through --vars
    params = job_vars(registry())["logins_10m"]
    assert params["batch_sql"].startswith("with failed as") and not params["batch_sql"].endswith(
        ";"
    )
    assert params["source_keys"] == {"logins": ["login_id"]}
    assert params["source_columns"] == {"logins": ["user_id", "outcome", "event_time"]}
    # by the day its window ends, reading events back by the window's length
    assert (params["recon_partition"], params["recon_read_back_seconds"]) == (
        "to_date(window_end)",
        600,
    )


def test_the_pinned_position_takes_each_jobs_last_batch_of_its_current_lineage():
    t0 = datetime(2026, 1, 1)
    rows = [
        {"job": "a", "query_id": "old", "batch_id": 9, "ts": t0, "sink_version": 40},
        {
            "job": "a",
            "query_id": "new",
            "batch_id": 0,
            "ts": t0 + timedelta(hours=1),
            "sink_version": 1,
        },
        {
            "job": "a",
            "query_id": "new",
            "batch_id": 1,
            "ts": t0 + timedelta(hours=2),
            "sink_version": 3,
        },
        {"job": "b", "query_id": "q", "batch_id": 5, "ts": t0, "sink_version": None},
    ]
    chosen = last_batches(rows)
    # a was rebuilt (new query id): its old lineage's versions belong to another table
    assert (chosen["a"]["query_id"], chosen["a"]["batch_id"], chosen["a"]["sink_version"]) == (
        "new",
        1,
        3,
    )
    assert "b" not in chosen  # no batch with a known gold version


def test_vars_and_the_data_root_are_placed_where_dbt_expects_them():
    assert with_vars(["build", "--select", "x"], {"a": 1}) == [
        "build",
        "--vars",
        '{"a": 1}',
        "--select",
        "x",
    ]
    assert with_vars(["build", "--vars", "{}"], {"a": 1}) == ["build", "--vars", "{}"]
    assert with_vars(["clean"], {"a": 1}) == ["clean"]
    assert split_own_options(["--data-root", "/d", "build"]) == (
        {"TIDEMARK_DATA_ROOT": "/d"},
        ["build"],
    )
    assert split_own_options(["--data-root", "/d", "--dagster-run-id", "abc", "build"]) == (
        {"TIDEMARK_DATA_ROOT": "/d", "TIDEMARK_DAGSTER_RUN_ID": "abc"},
        ["build"],
    )
    assert split_own_options(["build"]) == ({}, ["build"])
    # the jobs nothing new reached join the user's own --exclude, or get one
    assert with_excluded(["build", "--exclude", "x", "--select", "y"], ["a", "b"]) == [
        "build",
        "--exclude",
        "a",
        "b",
        "x",
        "--select",
        "y",
    ]
    assert with_excluded(["build"], ["a"]) == ["build", "--exclude", "a"]
    assert with_excluded(["build"], []) == ["build"]


def test_the_parse_before_a_warm_session_keeps_what_changes_the_manifest_and_drops_the_rest():
    # what Dagster's DbtCliResource passes, after tidemark-dbt added the target and the vars
    args = [
        "--no-use-color",
        "build",
        "--vars",
        '{"a": 1}',
        "--select",
        "fqn:x",
        "--full-refresh",
        "--target-path=/t",
        "--no-partial-parse",
        "--target",
        "session",
    ]
    assert parse_args(args) == [
        "parse",
        "--quiet",
        "--vars",
        '{"a": 1}',
        "--target-path=/t",
        "--no-partial-parse",
        "--target",
        "session",
    ]
    assert parse_args(["test", "-t", "endpoint", "--profiles-dir", "/p", "--exclude", "y"]) == [
        "parse",
        "--quiet",
        "-t",
        "endpoint",
        "--profiles-dir",
        "/p",
    ]
    # the partial-parse file's own place, unless the command names one
    assert parse_args(["build", "--target", "endpoint"], "/root/dbt/target") == [
        "parse",
        "--quiet",
        "--target",
        "endpoint",
        "--target-path",
        "/root/dbt/target",
    ]
    assert parse_args(["build", "--target-path", "/t"], "/root/dbt/target") == [
        "parse",
        "--quiet",
        "--target-path",
        "/t",
    ]


def test_each_runs_own_vars_leave_the_vars_dbt_parses_with():
    """The position and the scope change every run: in --vars, every run would parse the whole
    project again; they go to the environment, and --vars keep the rest as they were."""
    import json

    jobs = {"j": {"keys": ["k"]}}
    own = {
        "progress_version": 7,
        "gold_versions": {"j": 3},
        "recon_from": {"j": "2026-01-02"},
        "recon_positions": [{"job": "j"}],
        "recon_reasons": {"j": "from 2026-01-02"},
        "recon_full": False,
        "text_measures": {"j": ["label"]},
        "watermark_ahead_seconds": 86400,
    }
    args = ["build", "--vars", json.dumps({"jobs": jobs, **own}), "--select", "x"]
    rest, taken = split_run_vars(args)
    assert taken == own
    assert rest[0:2] == ["build", "--vars"] and rest[3:] == ["--select", "x"]
    assert json.loads(rest[2]) == {"jobs": jobs}
    # two runs at other positions parse with the same --vars
    other = {**own, "progress_version": 8, "recon_from": {"j": "2026-01-03"}}
    assert split_run_vars(["build", "--vars", json.dumps({"jobs": jobs, **other})])[0][2] == rest[2]
    # YAML, as dbt reads --vars, and no --vars at all
    assert split_run_vars(["run", "--vars", "{progress_version: 2, jobs: {}}"]) == (
        ["run", "--vars", '{"jobs": {}}'],
        {"progress_version": 2},
    )
    assert split_run_vars(["build"]) == (["build"], {})


def test_a_build_parses_with_the_vars_of_the_parse_made_at_load(cfg):
    """Dagster's parse when it loads reads no lake; a build's vars read the lake: once its own
    vars are taken out, what is left must be what that parse used, or dbt parses all again."""
    import json

    from streaming_jobs.storage import ops_tables
    from orchestration.recon.dbt_models import reconciled_jobs
    from orchestration.recon.dbt_vars import dbt_vars

    ops_tables.ensure_all(cfg)
    jobs = reconciled_jobs()
    build = dbt_vars(jobs, cfg)
    assert {"progress_version", "text_measures", "watermark_ahead_seconds"} <= set(build)
    rest, _ = split_run_vars(["build", "--vars", json.dumps(build)])
    # as dbt reads --vars (YAML)
    assert yaml.safe_load(rest[2]) == yaml.safe_load(json.dumps(dbt_vars(jobs)))


def test_a_job_that_never_ran_is_pinned_where_its_gold_table_stands(cfg):
    """A reconciliation must not see rows a job writes while dbt reads (its progress rows are
    pinned): a job without a checkpoint yet is read as of its gold table's version now."""
    import pyarrow as pa
    from deltalake import write_deltalake

    from streaming_jobs.storage import ops_tables
    from orchestration.recon.dbt_vars import position_vars

    ops_tables.ensure_all(cfg)
    jobs = {n: s for n, s in registry().items() if n in ("user_sessions", "events_by_type")}
    gold = cfg.paths.table("gold", "user_sessions")
    write_deltalake(str(gold), pa.table({"user_id": pa.array([], pa.string())}))  # version 0
    write_deltalake(str(gold), pa.table({"user_id": ["u1"]}), mode="append")  # version 1
    pinned = position_vars(cfg, jobs)
    assert pinned["gold_versions"] == {"user_sessions": 1}  # events_by_type: no table yet
    assert pinned["progress_version"] == ops_tables.version(cfg, "stream_progress")


def test_a_statement_on_the_endpoint_is_polled_soon_then_less_often(monkeypatch):
    """dbt-spark's own polling loop, with tidemark's waits (`poll_quickly`): 0.05 s, doubled up
    to the profile's poll_interval, and again from 0.05 s for the next statement. The cursor
    stands for the Thrift server's: it reports each statement running for a number of polls."""
    import time
    from types import SimpleNamespace

    from dbt.adapters.spark import connections
    from TCLIService.ttypes import TOperationState

    from orchestration.recon.dbt_cli import poll_quickly

    class Cursor:
        def __init__(self, running_polls: list[int]) -> None:
            self.running_polls = running_polls

        def execute(self, sql, bindings, async_):
            self.left = self.running_polls.pop(0)

        def poll(self):
            self.left -= 1
            state = (
                TOperationState.RUNNING_STATE if self.left >= 0 else TOperationState.FINISHED_STATE
            )
            return SimpleNamespace(operationState=state, errorMessage=None)

    waits: list[float] = []
    # the module's own name for `time`, not the time module's sleep: other threads sleep too
    monkeypatch.setattr(connections, "time", SimpleNamespace(sleep=waits.append, time=time.time))
    monkeypatch.setattr(connections, "PyhiveConnectionWrapper", connections.PyhiveConnectionWrapper)
    poll_quickly()
    poll_quickly()  # a second call wraps nothing twice
    assert connections.PyhiveConnectionWrapper.__bases__[0].__name__ == "PyhiveConnectionWrapper"
    cursor = Cursor([8, 1])
    wrapper = connections.PyhiveConnectionWrapper(
        SimpleNamespace(cursor=lambda: cursor), poll_interval=1
    )
    wrapper.cursor()
    wrapper.execute("select 1")
    assert waits == [0.05, 0.1, 0.2, 0.4, 0.8, 1, 1, 1]
    waits.clear()
    wrapper.execute("select 2")  # the next statement starts short again
    assert waits == [0.05]


def test_the_version_dagster_asks_for_before_each_dbt_step_is_the_installed_one(tmp_path):
    """Dagster's dbt resource runs ``tidemark-dbt --version`` before every dbt step: answered
    from the packages' metadata, without importing dbt or asking the package index."""
    import subprocess
    from importlib.metadata import version

    from dagster_dbt import DbtCliResource
    from orchestration.recon.project import dbt_executable

    env = {**os.environ, "TIDEMARK_DATA_ROOT": str(tmp_path / "root")}
    out = subprocess.run(
        [dbt_executable(), "--version"], env=env, capture_output=True, text=True, check=True
    ).stdout
    assert f"installed: {version('dbt-core')}\n" in out
    assert f"spark: {version('dbt-spark')}\n" in out
    assert not (tmp_path / "root").exists()  # the project was not synced: dbt was not run
    # and the resource reads from it the version dbt itself would report
    resource = DbtCliResource(project_dir=str(DBT_PROJECT_DIR), dbt_executable=dbt_executable())
    assert str(resource._cli_version) == version("dbt-core")
