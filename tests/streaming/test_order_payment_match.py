"""order_payment_match (stream-stream full outer join) against a plain-Python matcher."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from helpers import dbt, land
from streaming_jobs.operations.health import structural_findings
from streaming_jobs.operations.state import JOIN_STORES, inspect
from streaming_jobs.storage.registry import get_job
from streaming_jobs.storage.lake import read_table
from streaming_jobs.runtime.runner import run_bronze, run_job

T0 = datetime(2026, 1, 1)
WITHIN = timedelta(minutes=20)


def _ts(minute: float) -> str:
    return (T0 + timedelta(minutes=minute)).strftime("%Y-%m-%dT%H:%M:%S.000Z")


def order(order_id: str, user: str, minute: float, amount: float) -> dict:
    return {
        "event_id": f"e-{order_id}",
        "order_id": order_id,
        "user_id": user,
        "amount": amount,
        "order_time": _ts(minute),
    }


def payment(payment_id: str, order_id: str, minute: float, amount: float) -> dict:
    return {
        "event_id": f"e-{payment_id}",
        "payment_id": payment_id,
        "order_id": order_id,
        "amount": amount,
        "payment_time": _ts(minute),
    }


def _t(event: dict, field: str) -> datetime:
    return datetime.fromisoformat(event[field][:-1])


def matches(orders, payments) -> dict:
    """{(order_id, payment_id): (status, order_amount, payment_amount, closes_at)}."""
    orders = list({o["event_id"]: o for o in orders}.values())
    payments = list({p["event_id"]: p for p in payments}.values())
    out, paid_payments = {}, set()
    for o in orders:
        mine = [
            p
            for p in payments
            if p["order_id"] == o["order_id"]
            and abs(_t(p, "payment_time") - _t(o, "order_time")) <= WITHIN
        ]
        for p in mine:
            paid_payments.add(p["payment_id"])
            out[(o["order_id"], p["payment_id"])] = ("paid", o["amount"], p["amount"], None)
        if not mine:
            out[(o["order_id"], None)] = ("unpaid", o["amount"], None, _t(o, "order_time") + WITHIN)
    for p in payments:
        if p["payment_id"] not in paid_payments:
            out[(p["order_id"], p["payment_id"])] = (
                "unknown_order",
                None,
                p["amount"],
                _t(p, "payment_time") + WITHIN,
            )
    return out


def _got(rows) -> dict:
    return {(r.order_id, r.payment_id): (r.status, r.order_amount, r.payment_amount) for r in rows}


def test_build_on_static_events_equals_plain_python(spark):
    orders = [
        order("o1", "u1", 0, 10.0),
        order("o1", "u1", 0, 10.0),
        order("o2", "u2", 5, 20.0),
        order("o3", "u3", 10, 30.0),
        order("o4", "u1", 50, 40.0),
    ]
    payments = [
        payment("p1", "o1", 3, 10.0),
        payment("p2", "o2", 4, 20.0),  # before its order
        payment("p2b", "o2", 24, 1.0),
        payment("p3", "o3", 31, 30.0),  # 21 min: too late
        payment("px", "o-x", 12, 7.0),
    ]
    o = spark.createDataFrame(
        [
            (e["event_id"], e["order_id"], e["user_id"], e["amount"], _t(e, "order_time"))
            for e in orders
        ],
        "event_id string, order_id string, user_id string, amount double, order_time timestamp",
    )
    p = spark.createDataFrame(
        [
            (e["event_id"], e["payment_id"], e["order_id"], e["amount"], _t(e, "payment_time"))
            for e in payments
        ],
        "event_id string, payment_id string, order_id string, "
        "amount double, payment_time timestamp",
    )
    expected = {k: v[:3] for k, v in matches(orders, payments).items()}
    assert _got(get_job("order_payment_match").apply(o, p).collect()) == expected
    assert {v[0] for v in expected.values()} == {"paid", "unpaid", "unknown_order"}


# wave 1: watermark min(50, 55) - 10 = 40: o3 (unpaid since minute 30) is final.
# wave 2: order o6 at 35 and payment p3 at 25 are behind 40: dropped as late. p6 (on time) pays
#   the late o6, so the stream calls it unknown_order (final at 65). p5 comes 30 min after o5:
#   o5 unpaid and p5 unknown, both still open at the final watermark min(100, 130) - 10 = 90.
WAVE_1 = (
    [
        order("o1", "u1", 0, 10.0),
        order("o2", "u2", 5, 20.0),
        order("o3", "u3", 10, 30.0),
        order("o4", "u1", 50, 40.0),
        order("o4", "u1", 50, 40.0),
    ],
    [
        payment("p1", "o1", 3, 10.0),
        payment("p2", "o2", 4, 20.0),
        payment("px", "o-x", 12, 7.0),
        payment("p4", "o4", 55, 40.0),
    ],
)
WAVE_2 = (
    [order("o5", "u2", 100, 50.0), order("o6", "u3", 35, 6.0)],
    [payment("p6", "o6", 45, 6.0), payment("p3", "o3", 25, 30.0), payment("p5", "o5", 130, 50.0)],
)
LATE = {"e-o6", "e-p3"}
FINAL_WATERMARK = T0 + timedelta(minutes=90)


JOIN_FORMAT = "spark.sql.streaming.join.stateFormatVersion"
JOIN = "symmetricHashJoin"  # the join's operator in Spark's state metadata


def stream_both_waves(spark, cfg, first_join_format: str | None = None):
    """Both waves through bronze and the job; ``first_join_format``: the session's join state
    format for the first wave only (the checkpoint is created then)."""
    spec, late = get_job("order_payment_match"), 0
    for wave, (orders, payments) in enumerate((WAVE_1, WAVE_2), start=1):
        land(cfg, f"w{wave}.jsonl", orders, stream="orders")
        land(cfg, f"w{wave}.jsonl", payments, stream="payments")
        run_bronze(spark, cfg, "orders")
        run_bronze(spark, cfg, "payments")
        shipped = spark.conf.get(JOIN_FORMAT)
        if wave == 1 and first_join_format:
            spark.conf.set(JOIN_FORMAT, first_join_format)
        try:
            late += run_job(spark, cfg, spec).late_rows_dropped
        finally:
            spark.conf.set(JOIN_FORMAT, shipped)
    return spec, late


def store_folders(cfg, spec) -> dict[str, set[str]]:
    """Per state partition of the job's checkpoint (``<operator>/<partition>``), the store
    folders in it: none where the partition is one store (RocksDB's ``SSTs`` and Spark's
    ``_metadata`` are not stores)."""
    state = cfg.paths.checkpoint(spec.name) / "state"
    return {
        f"{part.parent.name}/{part.name}": {
            p.name for p in part.iterdir() if p.is_dir() and p.name != "SSTs" and p.name[0] != "_"
        }
        for part in state.glob("*/*")
        if part.name.isdigit()
    }


def assert_join_state_holds_the_open_pair(state) -> None:
    """At the final watermark only o5 and p5 are open (see the waves above): each side of the
    join holds one key, o5, and one row; each dedup holds its one event; ``state``: the job's
    state as `tidemark state` reads it (`inspect`)."""
    held = {(op.operator_id, op.operator, op.store): (op.rows, op.largest) for op in state}
    joined = {k: v for k, v in held.items() if k[1] == JOIN}
    assert sorted(store for _, _, store in joined) == sorted(JOIN_STORES)
    for rows, largest in joined.values():
        assert rows == 1 and '"o5"' in largest[0][0]
    dedup = sorted(v[1][0][0] for k, v in held.items() if k[1] == "dedupeWithinWatermark")
    assert dedup == ['{"key":{"event_id":"e-o5"}}', '{"key":{"event_id":"e-p5"}}']


def _on_time():
    orders = [e for e in WAVE_1[0] + WAVE_2[0] if e["event_id"] not in LATE]
    payments = [e for e in WAVE_1[1] + WAVE_2[1] if e["event_id"] not in LATE]
    return orders, payments


def test_stream_emits_pairs_at_once_and_unmatched_rows_once_the_bound_passes(spark, cfg):
    spec, late = stream_both_waves(spark, cfg)
    expected = {
        k: v[:3] for k, v in matches(*_on_time()).items() if v[3] is None or v[3] < FINAL_WATERMARK
    }
    got = _got(read_table(spark, cfg.paths.table("gold", spec.name)).collect())
    assert got == expected
    assert got[("o3", None)][0] == "unpaid" and got[("o6", "p6")][0] == "unknown_order"
    assert ("o5", None) not in got  # still open: a payment may come until minute 120
    assert late == len(LATE)
    # the join keeps four stores per partition (Spark's state format 2, its default)
    assert spark.conf.get(JOIN_FORMAT) == "2"
    state = inspect(spark, cfg, spec.name)
    assert_committed_through_the_last_batch(cfg, spec, state, JOIN_STORES)
    assert_join_state_holds_the_open_pair(state)
    assert structural_findings(cfg.paths.checkpoint(spec.name)) == []


def assert_committed_through_the_last_batch(cfg, spec, state, stores: tuple[str, ...]) -> None:
    """Each join partition holds ``stores`` (none: it is one store itself), each with its
    changelog at the checkpoint's last committed batch: the second wave committed them too.
    ``state``: `inspect`'s reading, for the join's operator id."""
    checkpoint = cfg.paths.checkpoint(spec.name)
    batches = len(list((checkpoint / "commits").glob("[0-9]*")))
    folders = store_folders(cfg, spec)
    [join] = {op.operator_id for op in state if op.operator == JOIN}
    join_parts = [w for w in folders if w.split("/")[0] == str(join)]
    assert len(join_parts) == cfg.spark.shuffle_partitions
    for where in join_parts:
        assert folders[where] == set(stores)
        for store in [checkpoint / "state" / where / s for s in stores] or [
            checkpoint / "state" / where
        ]:
            last = max(int(f.name.split(".")[0]) for f in store.glob("*.changelog"))
            assert last == batches, (where, store.name)


def test_a_join_begun_on_state_format_3_goes_on_with_it_with_the_same_results(spark, cfg):
    """A checkpoint begun on Spark's join state format 3 (tidemark's default for a day, or a
    user's setting) keeps it (Spark reads it from the checkpoint's offsets): each partition one
    store, the same rows out and the same state read back."""
    spec, late = stream_both_waves(spark, cfg, first_join_format="3")
    expected = {
        k: v[:3] for k, v in matches(*_on_time()).items() if v[3] is None or v[3] < FINAL_WATERMARK
    }
    assert _got(read_table(spark, cfg.paths.table("gold", spec.name)).collect()) == expected
    assert late == len(LATE)
    state = inspect(spark, cfg, spec.name)
    assert_committed_through_the_last_batch(cfg, spec, state, ())
    assert_join_state_holds_the_open_pair(state)
    assert structural_findings(cfg.paths.checkpoint(spec.name)) == []


@pytest.mark.slow
@pytest.mark.long  # CI: test_recon's classes; make test-long
def test_recon_explains_late_orders_and_payments(spark, cfg):
    stream_both_waves(spark, cfg)
    result = dbt("build", "--select", "+recon_order_payment_match", "+int_late_events")
    assert result.returncode == 0, result.stdout[-3000:]
    truth = matches(WAVE_1[0] + WAVE_2[0], WAVE_1[1] + WAVE_2[1])
    on_time = matches(*_on_time())
    expected = {}
    for key in set(truth) | set(on_time):
        row = on_time.get(key) or truth[key]
        streamed = key in on_time and (row[3] is None or row[3] < FINAL_WATERMARK)
        if streamed:
            expected[key] = (
                "match" if truth.get(key, ())[:3] == on_time[key][:3] else "late_dropped"
            )
        elif row[3] is not None and row[3] >= FINAL_WATERMARK:
            expected[key] = "window_open"
        else:
            expected[key] = "late_dropped"
    recon = read_table(spark, cfg.paths.dbt_table("recon", "recon_order_payment_match"))
    assert {(r.order_id, r.payment_id): r.recon_class for r in recon.collect()} == expected
    assert {"match", "late_dropped", "window_open"} <= set(expected.values())
    late = (
        read_table(spark, cfg.paths.dbt_table("batch", "int_late_events"))
        .where("job = 'order_payment_match'")
        .collect()[0]
    )
    assert late.late_events_replayed == late.late_events_reported == len(LATE)
