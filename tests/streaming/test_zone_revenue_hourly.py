"""zone_revenue_hourly against expectations built by hand and in plain Python."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta

from pyspark.testing import assertDataFrameEqual

from helpers import land
from streaming_jobs.storage.registry import get_job
from streaming_jobs.storage.lake import read_table
from streaming_jobs.runtime.runner import run_bronze, run_job

T0 = datetime(2026, 1, 1)


def ride(event_id: str, zone: str, minute: float, fare: float, total: float) -> dict:
    t = T0 + timedelta(minutes=minute)
    return {
        "event_id": event_id,
        "ride_id": f"r{event_id}",
        "pickup_zone": zone,
        "dropoff_zone": "Z999",
        "passengers": 1,
        "fare": fare,
        "total_amount": total,
        "pickup_time": t.strftime("%Y-%m-%dT%H:%M:%S.000Z"),
    }


def test_build_aggregates_distinct_rides_per_zone_hour(spark):
    spec = get_job("zone_revenue_hourly")
    rows = [
        ("a", "Z1", T0 + timedelta(minutes=5), 10.0, 12.0),
        ("a", "Z1", T0 + timedelta(minutes=5), 10.0, 12.0),  # exact duplicate
        ("b", "Z1", T0 + timedelta(minutes=59), 20.0, 25.0),
        ("c", "Z1", T0 + timedelta(minutes=60), 30.0, 31.0),
        ("d", "Z2", T0 + timedelta(minutes=1), 7.0, 7.0),
    ]
    rides = spark.createDataFrame(
        rows,
        "event_id string, pickup_zone string, pickup_time timestamp, "
        "fare double, total_amount double",
    )
    expected = spark.createDataFrame(
        [
            ("Z1", T0, T0 + timedelta(hours=1), 2, 37.0, 15.0),
            ("Z1", T0 + timedelta(hours=1), T0 + timedelta(hours=2), 1, 31.0, 30.0),
            ("Z2", T0, T0 + timedelta(hours=1), 1, 7.0, 7.0),
        ],
        "pickup_zone string, window_start timestamp, window_end timestamp, trips long, "
        "revenue double, avg_fare double",
    )
    assertDataFrameEqual(spec.apply(rides), expected)


def test_stream_emits_final_hours_and_drops_late_rides(spark, cfg):
    spec = get_job("zone_revenue_hourly")
    wave_1 = [
        ride("1", "Z1", 10, 10.0, 11.0),
        ride("2", "Z1", 50, 20.0, 22.0),
        ride("3", "Z2", 70, 5.0, 5.5),
        ride("4", "Z1", 130, 8.0, 8.0),
    ]
    wave_2 = [
        ride("5", "Z1", 40, 99.0, 99.0),  # watermark is 120: late, dropped
        ride("6", "Z2", 125, 6.0, 6.0),
        ride("7", "Z1", 200, 9.0, 9.0),
    ]
    late = 0
    for name, events in (("w1.jsonl", wave_1), ("w2.jsonl", wave_2)):
        land(cfg, name, events, stream="rides")
        run_bronze(spark, cfg, "rides")
        late += run_job(spark, cfg, spec).late_rows_dropped

    # plain Python: hours closed at the final watermark 190 min, rides not dropped as late
    groups = defaultdict(list)
    for r in [r for r in wave_1 + wave_2 if r["event_id"] != "5"]:
        t = datetime.fromisoformat(r["pickup_time"][:-1])
        start = t.replace(minute=0, second=0, microsecond=0)
        if start + timedelta(hours=1) <= T0 + timedelta(minutes=190):
            groups[(r["pickup_zone"], start, start + timedelta(hours=1))].append(r)
    expected = {
        k: (len(v), sum(r["total_amount"] for r in v), sum(r["fare"] for r in v) / len(v))
        for k, v in groups.items()
    }
    gold = read_table(spark, cfg.paths.table("gold", spec.name)).collect()
    got = {
        (r.pickup_zone, r.window_start, r.window_end): (r.trips, r.revenue, r.avg_fare)
        for r in gold
    }
    assert got == expected
    assert late == 1
