"""Jobs for streams without an id, written from the scaffold, run through Dagster by selection
and reconciled: a sliding top-N per window (an array measure), a join of two windowed streams
(a set: no measures) and a session job; each checked against answers computed here from the
events."""

from __future__ import annotations

import random
from collections import defaultdict
from datetime import datetime, timedelta

import pytest

from helpers import land
from streaming_jobs.storage.lake import read_table
from streaming_jobs.storage.registry import registry

from orchestration.cli import main as cli
from orchestration.cli.scaffold import scaffold

SENSORS = """
from pyspark.sql import types as T
from streaming_jobs.schemas import Field, StreamSchema

STREAMS = [
    # no id column: a reading is identified by its sensor and time
    StreamSchema(name="readings", key=("sensor_id", "read_at"), event_time="read_at", fields=(
        Field("sensor_id", T.StringType(), "the sensor"),
        Field("site", T.StringType(), "where the sensor is"),
        Field("celsius", T.DoubleType(), "the reading"),
        Field("read_at", T.TimestampType(), "when it was read (UTC)"))),
    # no key at all: only exact duplicate lines are one alarm
    StreamSchema(name="alarms", key=None, event_time="raised_at", fields=(
        Field("site", T.StringType(), "where"),
        Field("level", T.StringType(), "how bad"),
        Field("raised_at", T.TimestampType(), "when (UTC)"))),
]
"""

TOP_SITES = """-- hot_sites_top2: the two sites with the most readings per sliding 10-minute window.
-- source: readings
-- keys: window_start, window_end
-- measures: top_sites
-- watermark: 5 minutes
with per_site as (
    select site, window(read_at, '10 minutes', '5 minutes') as w, count(*) as readings
    from events
    group by site, window(read_at, '10 minutes', '5 minutes')
)
select w.start as window_start, w.end as window_end,
       slice(sort_array(collect_list(struct(readings, site)), false), 1, 2) as top_sites
from per_site
group by w
"""

PAIRS = """-- hot_alarmed_windows: sites with a hot reading and an alarm in the same 5 minutes.
-- source: readings
-- joins: alarms
-- keys: site, window_start, window_end
-- watermark: 5 minutes
with hot as (
    select site, window(read_at, '5 minutes') as w
    from readings
    where celsius > 30
    group by site, window(read_at, '5 minutes')
),
raised as (
    select site, window(raised_at, '5 minutes') as w
    from alarms
    group by site, window(raised_at, '5 minutes')
)
select hot.site, hot.w.start as window_start, hot.w.end as window_end
from hot
join raised on hot.site = raised.site and hot.w = raised.w
"""

START = datetime(2026, 3, 1)
SITES = ("north", "south", "east")
SENSOR_SITE = {"s1": "north", "s2": "north", "s3": "south", "s4": "east"}
GAP = timedelta(minutes=3)


def iso(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"


def make_waves(seed: int = 5, waves: int = 3, minutes: int = 15):
    """Readings and alarms in time order per wave; some lines sent twice (exact copies)."""
    rnd = random.Random(seed)
    out = []
    for wave in range(waves):
        readings, alarms = [], []
        for sensor, site in SENSOR_SITE.items():
            t = START + timedelta(minutes=wave * minutes, seconds=rnd.randint(0, 50))
            while t < START + timedelta(minutes=(wave + 1) * minutes):
                readings.append(
                    {
                        "sensor_id": sensor,
                        "site": site,
                        "celsius": round(rnd.uniform(20, 40), 1),
                        "read_at": iso(t),
                    }
                )
                # bursts with pauses longer than the session gap
                t += timedelta(seconds=rnd.choice([20, 40, 70, 200, 250]))
        for _ in range(6):
            at = START + timedelta(minutes=wave * minutes, seconds=rnd.randint(0, minutes * 60 - 1))
            alarms.append(
                {
                    "site": rnd.choice(SITES),
                    "level": rnd.choice(["warn", "crit"]),
                    "raised_at": iso(at.replace(microsecond=0)),
                }
            )
        readings += rnd.sample(readings, 5)  # resent copies
        alarms += alarms[:2]
        out.append((readings, alarms))
    return out


def ts(text: str) -> datetime:
    return datetime.fromisoformat(text[:-1])


def floor(t: datetime, minutes: int) -> datetime:
    return START + timedelta(minutes=(t - START) // timedelta(minutes=minutes) * minutes)


def expected_top(readings) -> dict:
    counts = defaultdict(lambda: defaultdict(int))
    for r in readings:
        t = ts(r["read_at"])
        first = floor(t, 5)
        for start in (first - timedelta(minutes=5), first):  # 10-minute windows every 5
            counts[(start, start + timedelta(minutes=10))][r["site"]] += 1
    return {
        w: tuple(sorted(((n, s) for s, n in per.items()), reverse=True)[:2])
        for w, per in counts.items()
    }


def expected_pairs(readings, alarms) -> set:
    """(site, window start, window end) of every 5 minutes with a hot reading and an alarm."""
    hot = {(r["site"], floor(ts(r["read_at"]), 5)) for r in readings if r["celsius"] > 30}
    raised = {(a["site"], floor(ts(a["raised_at"]), 5)) for a in alarms}
    return {(site, w, w + timedelta(minutes=5)) for site, w in hot & raised}


def expected_sessions(readings) -> dict:
    by_sensor = defaultdict(list)
    for r in readings:
        by_sensor[r["sensor_id"]].append((ts(r["read_at"]), r["celsius"]))
    out = {}
    for sensor, points in by_sensor.items():
        points.sort()
        session = [points[0]]
        for point in points[1:]:
            if point[0] - session[-1][0] < GAP:
                session.append(point)
            else:
                out[(sensor, session[0][0], session[-1][0] + GAP)] = (
                    len(session),
                    max(c for _, c in session),
                )
                session = [point]
        out[(sensor, session[0][0], session[-1][0] + GAP)] = (
            len(session),
            max(c for _, c in session),
        )
    return out


def distinct(rows, key) -> list:
    seen, out = set(), []
    for r in rows:
        k = tuple(r[c] for c in key)
        if k not in seen:
            seen.add(k)
            out.append(r)
    return out


@pytest.fixture
def sensors_folder(tmp_path, monkeypatch):
    folder = tmp_path / "sensor_jobs"
    folder.mkdir()
    monkeypatch.setenv("TIDEMARK_JOBS_PATH", str(folder))
    (folder / "sensors.py").write_text(SENSORS)
    (folder / "hot_sites_top2.sql").write_text(TOP_SITES)
    (folder / "hot_alarmed_windows.sql").write_text(PAIRS)
    # the session job starts from the scaffold, edited as a user would
    path = scaffold("job", "sensor_sessions", folder=str(folder), source="readings")
    text = path.read_text()
    text = text.replace(
        "-- sensor_sessions: events of readings per 5-minute window",
        "-- sensor_sessions: readings per sensor session (3-minute gap)",
    )
    text = text.replace(
        "-- keys: window_start, window_end\n-- measures: events\n",
        "-- keys: sensor_id, session_start, session_end\n-- measures: readings, peak\n",
    )
    body = text.index("select")
    path.write_text(
        text[:body]
        + (
            "select sensor_id, session_window.start as session_start,\n"
            "       session_window.end as session_end, count(*) as readings, max(celsius) as peak\n"
            "from events\n"
            "group by sensor_id, session_window(read_at, '3 minutes')\n"
        )
    )
    return folder


JOBS = ("hot_sites_top2", "hot_alarmed_windows", "sensor_sessions")


def select(*assets: str) -> str:
    return " or ".join(f'key:"{a}"' for a in assets)


@pytest.mark.slow
@pytest.mark.long  # CI: test_add_a_job's new stream and keyed scaffold; make test-long
def test_streams_without_ids_through_dagster_reconcile_against_independent_answers(
    spark, cfg, sensors_folder
):
    jobs = registry()
    assert jobs["sensor_sessions"].recon_open_when.startswith("coalesce(t.session_end")
    assert jobs["hot_alarmed_windows"].measures == ()
    assert cli.main(["check"]) == 0

    waves = make_waves()
    streaming = select("bronze/readings", "bronze/alarms", *(f"gold/{j}" for j in JOBS))
    for number, (readings, alarms) in enumerate(waves):
        land(cfg, f"r{number}.jsonl", readings, stream="readings")
        land(cfg, f"a{number}.json", alarms, stream="alarms")  # any extension is admitted
        assert cli.main(["materialize", "--select", streaming]) == 0

    readings = distinct([r for w in waves for r in w[0]], ("sensor_id", "read_at"))
    alarms = distinct([a for w in waves for a in w[1]], ("site", "level", "raised_at"))
    assert read_table(spark, cfg.paths.table("bronze", "readings")).count() == sum(
        len(w[0]) for w in waves
    )  # bronze keeps every copy; the jobs drop them

    from streaming_jobs.storage import ops_tables

    progress = ops_tables.read(cfg, "stream_progress", columns=["job", "watermark"])
    watermark = {
        j: max(r["watermark"] for r in progress if r["job"] == j and r["watermark"]) for j in JOBS
    }
    watermark = {j: w.replace(tzinfo=None) for j, w in watermark.items()}

    def rows(job):
        return read_table(spark, cfg.paths.table("gold", job)).collect()

    top = {
        (r.window_start, r.window_end): tuple((s.readings, s.site) for s in r.top_sites)
        for r in rows("hot_sites_top2")
    }
    want_top = expected_top(readings)
    assert top and top == {w: v for w, v in want_top.items() if w[1] <= watermark["hot_sites_top2"]}

    pairs = {(r.site, r.window_start, r.window_end) for r in rows("hot_alarmed_windows")}
    want_pairs = expected_pairs(readings, alarms)
    assert pairs and pairs == {p for p in want_pairs if p[2] <= watermark["hot_alarmed_windows"]}

    sessions = {
        (r.sensor_id, r.session_start, r.session_end): (r.readings, r.peak)
        for r in rows("sensor_sessions")
    }
    want_sessions = expected_sessions(readings)
    closed = {k: v for k, v in want_sessions.items() if k[2] <= watermark["sensor_sessions"]}
    assert sessions and sessions == closed

    # reconciliation through Dagster: the three jobs' dbt models (staging, batch, recon) and
    # their dbt tests, no_unexplained_rows__<job> among them (blocking)
    recon = " or ".join(f'+key:"recon/recon_{j}"' for j in JOBS)
    assert cli.main(["materialize", "--select", f"({recon}) and kind:dbt"]) == 0
    from orchestration.recon.recon_report import UNEXPLAINED

    for job in JOBS:
        classes = [
            r.recon_class
            for r in read_table(spark, cfg.paths.dbt_table("recon", f"recon_{job}")).collect()
        ]
        assert classes and not set(classes) & set(UNEXPLAINED), (job, sorted(set(classes)))
    top_classes = {
        (r.window_start, r.window_end): r.recon_class
        for r in read_table(spark, cfg.paths.dbt_table("recon", "recon_hot_sites_top2")).collect()
    }
    assert top_classes == {
        w: "match" if w[1] <= watermark["hot_sites_top2"] else "window_open" for w in want_top
    }
    session_classes = {
        (r.sensor_id, r.session_start): r.recon_class
        for r in read_table(spark, cfg.paths.dbt_table("recon", "recon_sensor_sessions")).collect()
    }
    assert session_classes == {
        (k[0], k[1]): "match" if k in closed else "window_open" for k in want_sessions
    }
