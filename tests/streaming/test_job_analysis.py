"""`tidemark check`: every job analysed against its sources' schemas before anything runs."""

from __future__ import annotations

import tempfile

import pytest
from dagster import AssetKey

from streaming_jobs.runtime.analysis import analyze, checked
from streaming_jobs.storage.registry import load_problems, registry

ORDERS_PAYMENTS = "-- source: orders\n-- joins: payments\n"

JOBS = {
    # a join with no time bound: both sides' state grows forever
    "unbounded_join.sql": (
        "-- unbounded_join: payments of each order, no time bound.\n"
        + ORDERS_PAYMENTS
        + "-- keys: order_id, payment_id\n-- measures: paid\n-- watermark: 10 minutes\n"
        "select o.order_id, p.payment_id, p.amount as paid\n"
        "from orders o join payments p on o.order_id = p.order_id\n"
    ),
    # the same join, bounded by a time range: accepted
    "bounded_join.sql": (
        "-- bounded_join: payments within an hour of their order.\n"
        + ORDERS_PAYMENTS
        + "-- keys: order_id, payment_id\n-- measures: paid\n-- watermark: 10 minutes\n"
        "select o.order_id, p.payment_id, p.amount as paid\n"
        "from orders o join payments p on o.order_id = p.order_id\n"
        "  and p.payment_time between o.order_time and o.order_time + interval 1 hour\n"
    ),
    # an aggregation over an aggregation without a window: the engine refuses it
    "counts_of_counts.sql": (
        "-- counts_of_counts: how many users clicked n times.\n-- source: clicks\n"
        "-- keys: n\n-- measures: users\n-- watermark: 10 minutes\n"
        "select n, count(*) as users\n"
        "from (select user_id, count(*) as n from events group by user_id)\n"
        "group by n\n"
    ),
    # accepted by the analyzer and the streaming checker, refused by the engine when it plans
    # its first batch: the deduplication reads both sides' event times
    "two_event_times.sql": (
        "-- two_event_times: each order with the time of its payment, once.\n"
        + ORDERS_PAYMENTS
        + "-- keys: order_id, order_time, payment_time\n-- watermark: 10 minutes\n"
        "select distinct o.order_id, o.order_time, p.payment_time\n"
        "from orders o join payments p on o.order_id = p.order_id\n"
        "  and p.payment_time between o.order_time and o.order_time + interval 1 hour\n"
    ),
    # a typo on the query's third line (the file's eighth)
    "typo.sql": (
        "-- typo: clicks per page.\n-- source: clicks\n-- keys: page\n-- measures: n\n"
        "-- watermark: 10 minutes\nselect page, count(*) as n\nfrom events\ngroup by pagee\n"
    ),
    # a measure the query does not produce
    "missing_measure.sql": (
        "-- missing_measure: clicks per page and window.\n-- source: clicks\n"
        "-- keys: page, window_start, window_end\n-- measures: clicks\n-- watermark: 1 minute\n"
        "select page, window.start as window_start, window.end as window_end, count(*) as n\n"
        "from events group by page, window(event_time, '5 minutes')\n"
    ),
}


@pytest.fixture
def folder(tmp_path, monkeypatch):
    path = tmp_path / "jobs"
    path.mkdir()
    monkeypatch.setenv("TIDEMARK_JOBS_PATH", str(path))
    return path


def by_job(findings):
    out = {}
    for f in findings:
        out.setdefault(f.job, []).append(f)
    return out


def test_the_built_in_jobs_pass_and_leave_no_scratch_folder(spark, tmp_path, monkeypatch):
    # the analysis reads each source from an empty folder of its own; none outlives it
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    assert analyze(spark, registry(), policy="refuse") == []
    assert list(scratch.iterdir()) == []


def test_each_refusal_names_the_file_the_line_and_the_fix(spark, folder):
    for name, text in JOBS.items():
        (folder / name).write_text(text)
    jobs = {n: s for n, s in registry().items() if s.origin and str(folder) in s.origin}
    found = by_job(analyze(spark, jobs, policy="refuse"))
    assert set(found) == {
        "unbounded_join",
        "counts_of_counts",
        "typo",
        "missing_measure",
        "two_event_times",
    }

    join = found["unbounded_join"]
    assert [f.level for f in join] == ["error", "error"]
    assert {f.where for f in join} == {f"{folder / 'unbounded_join.sql'}:7"}
    assert "never evicts its left side's state" in join[0].message
    assert "never evicts its right side's state" in join[1].message
    assert "add a time bound between the two event times" in join[0].message

    (refused,) = found["counts_of_counts"]
    assert refused.where == f"{folder / 'counts_of_counts.sql'}:6"
    assert "refuses the query in append mode" in refused.message
    # Spark's words, then which aggregations and what to do
    assert "The aggregation by (user_id), (n) has no window of the event time" in refused.message

    (typo,) = found["typo"]
    assert typo.where == f"{folder / 'typo.sql'}:8"  # `group by pagee`
    assert "pagee" in typo.message and "JVM" not in typo.message

    (planned,) = found["two_event_times"]
    assert planned.level == "error" and planned.where == f"{folder / 'two_event_times.sql'}:6"
    assert "when it plans its first micro-batch: More than one event time columns" in (
        planned.message
    )
    assert "keep one of them as the event time" in planned.message

    (missing,) = found["missing_measure"]
    assert missing.where == f"{folder / 'missing_measure.sql'}:4"  # the measures header
    assert "measures clicks not in the query's output columns" in missing.message


def test_unbounded_state_can_be_a_warning_per_job_or_for_all(spark, folder):
    (folder / "unbounded_join.sql").write_text(JOBS["unbounded_join.sql"])
    jobs = {"unbounded_join": registry()["unbounded_join"]}
    assert {f.level for f in analyze(spark, jobs, policy="warn")} == {"warning"}
    (folder / "unbounded_join.sql").write_text(
        JOBS["unbounded_join.sql"].replace("-- keys:", "-- unbounded_state: warn\n-- keys:")
    )
    jobs = {"unbounded_join": registry()["unbounded_join"]}
    assert {f.level for f in analyze(spark, jobs, policy="refuse")} == {"warning"}


def test_an_unbounded_join_is_left_out_of_the_code_location_and_the_rest_loads(spark, cfg, folder):
    (folder / "unbounded_join.sql").write_text(JOBS["unbounded_join.sql"])
    from orchestration.definitions import build_definitions

    graph = build_definitions().resolve_asset_graph()
    assert not graph.has(AssetKey(["gold", "unbounded_join"]))
    assert graph.has(AssetKey(["gold", "failed_txn_velocity"]))
    problems = load_problems()  # one per side of the join that is never evicted
    assert {p.job for p in problems} == {"unbounded_join"} and len(problems) == 2
    problem = problems[0]
    assert "unbounded state" in problem.message
    assert str(problem).startswith(f"{folder / 'unbounded_join.sql'}:7: error: job unbounded_join")
    assert "unbounded_join" not in registry()
    assert not cfg.paths.checkpoints.exists() or not any(cfg.paths.checkpoints.iterdir())
    # the result is cached per content of the job files: the same files, the same answer
    assert {f.job for f in checked(cfg) if f.level == "error"} == {"unbounded_join"}
    # fixed: the job loads
    (folder / "unbounded_join.sql").write_text(JOBS["bounded_join.sql"])
    assert checked(cfg) == [] and load_problems() == ()
    graph = build_definitions().resolve_asset_graph()
    assert graph.has(AssetKey(["gold", "unbounded_join"]))  # the file's name: now bounded
