"""The generator: deterministic for a seed, and its knobs do what they say."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from streaming_jobs.storage.generator import GeneratorConfig, generate, write_files


def _parse(lines):
    good, bad = [], []
    for line in lines:
        try:
            event = json.loads(line)
        except ValueError:
            bad.append(line)
            continue
        good.append(event)
    return good, bad


@pytest.mark.parametrize("stream", ["transactions", "rides", "orders", "payments", "clicks"])
def test_same_seed_same_bytes_and_other_seed_differs(tmp_path, stream):
    cfg = GeneratorConfig(stream=stream, events=2000, files=4, seed=3)
    a = write_files(tmp_path / "a", cfg, generate(cfg))
    b = write_files(tmp_path / "b", cfg, generate(cfg))
    assert [p.read_bytes() for p in a] == [p.read_bytes() for p in b]
    other = GeneratorConfig(stream=stream, events=2000, files=4, seed=4)
    assert generate(other) != generate(cfg)


def test_shares_of_late_duplicate_malformed_and_failed_events():
    cfg = GeneratorConfig(
        events=20_000,
        files=2,
        seed=5,
        late_share=0.05,
        duplicate_share=0.02,
        malformed_share=0.01,
        failed_share=0.2,
        jitter_seconds=60,
        late_by_seconds=(3600, 7200),
    )
    lines = [line for f in generate(cfg) for line in f]
    events, bad_json = _parse(lines)
    required = {
        "event_id",
        "user_id",
        "card_id",
        "merchant",
        "amount",
        "currency",
        "status",
        "event_time",
    }
    broken = [
        e
        for e in events
        if set(e) != required
        or isinstance(e.get("amount"), str)
        or not str(e.get("event_time", "")).startswith("20")
    ]
    malformed = len(bad_json) + len(broken)
    assert 0.007 < malformed / cfg.events < 0.013

    counts = Counter(line for line in lines)
    duplicated = sum(1 for line, n in counts.items() if n == 2)
    assert 0.015 < duplicated / cfg.events < 0.025
    # a duplicate is written right after its original, so one file holds both
    for i, line in enumerate(lines[1:], start=1):
        if counts[line] == 2 and lines[i - 1] != line:
            assert lines[i + 1] == line

    from datetime import datetime

    valid = [e for e in events if e not in broken]
    times = [datetime.fromisoformat(e["event_time"].replace("Z", "+00:00")) for e in valid]
    running_max, late = times[0], 0
    for t in times:
        if (running_max - t).total_seconds() > 1800:  # far behind anything seen: late
            late += 1
        running_max = max(running_max, t)
    assert 0.04 < late / len(valid) < 0.06
    failed = sum(e["status"] == "FAILED" for e in valid) / len(valid)
    assert 0.18 < failed < 0.22


def test_keys_are_zipf_skewed():
    cfg = GeneratorConfig(
        events=20_000,
        files=1,
        seed=9,
        users=1000,
        zipf_s=1.2,
        malformed_share=0.0,
        duplicate_share=0.0,
    )
    users = Counter(json.loads(line)["user_id"] for line in generate(cfg)[0])
    top10 = sum(n for _, n in users.most_common(10)) / cfg.events
    assert top10 > 0.3  # uniform keys would give 1%
    assert len(users) > 300


def test_files_are_written_atomically_and_complete(tmp_path):
    cfg = GeneratorConfig(events=500, files=5, seed=1)
    files = generate(cfg)
    written = write_files(tmp_path / "landing", cfg, files, range(1, 3))
    assert [p.name for p in written] == ["part-1-00001.jsonl", "part-1-00002.jsonl"]
    assert sorted(p.name for p in (tmp_path / "landing").iterdir()) == [p.name for p in written]
    assert not list((tmp_path / ".landing.staging").iterdir())  # nothing half-written left
    assert written[0].read_text().splitlines() == files[1]


@pytest.mark.parametrize("bad", [{"late_share": 1.5}, {"files": 0}, {"rate": 0}])
def test_bad_settings_are_refused_with_the_setting_named(bad):
    cfg = GeneratorConfig(**bad)
    with pytest.raises(ValueError, match=next(iter(bad))):
        generate(cfg)


def _clean(stream: str, events: int, **kw):
    cfg = GeneratorConfig(
        stream=stream,
        events=events,
        files=1,
        seed=21,
        late_share=0.0,
        duplicate_share=0.0,
        malformed_share=0.0,
        jitter_seconds=0.0,
        **kw,
    )
    return [json.loads(line) for line in generate(cfg)[0]]


def test_payments_pay_the_orders_of_the_same_seed_within_the_delay():
    from datetime import datetime

    orders = {o["order_id"]: o for o in _clean("orders", 6000)}
    payments = _clean("payments", 5000, payment_delay_seconds=600.0)
    ts = lambda v: datetime.fromisoformat(v.replace("Z", "+00:00"))
    known = [p for p in payments if p["order_id"] in orders]
    unknown = [p for p in payments if p["order_id"] not in orders]
    assert all(p["order_id"].startswith("o-unknown-") for p in unknown)
    assert 0.01 < len(unknown) / len(payments) < 0.04
    for p in known:
        order = orders[p["order_id"]]
        delay = (ts(p["payment_time"]) - ts(order["order_time"])).total_seconds()
        assert 0 < delay <= 600.0 and p["amount"] == order["amount"]
    paid = {p["order_id"] for p in known}
    last_paid = max(int(o.rsplit("-", 1)[1]) for o in paid)
    considered = [o for o in orders if int(o.rsplit("-", 1)[1]) <= last_paid - 1000]
    unpaid = sum(o not in paid for o in considered) / len(considered)
    assert 0.07 < unpaid < 0.13
    times = [ts(p["payment_time"]) for p in payments]
    assert times == sorted(times)  # arrival order follows time when there is no jitter


def test_clicks_come_in_sessions_with_idle_gaps():
    from collections import defaultdict
    from datetime import datetime

    clicks = _clean("clicks", 4000, rate=0.2, users=2000, click_gap_seconds=120.0)
    by_user = defaultdict(list)
    for c in clicks:
        by_user[c["user_id"]].append(datetime.fromisoformat(c["event_time"].replace("Z", "+00:00")))
    gaps = [(b - a).total_seconds() for ts in by_user.values() for a, b in zip(ts, ts[1:])]
    assert sum(g <= 120 for g in gaps) > 0.5 * len(gaps)  # clicks inside sessions
    assert sum(g > 1800 for g in gaps) > 40  # and sessions separated by idle time
    purchases = [c for c in clicks if c["action"] == "purchase"]
    assert purchases and all(c["amount"] > 0 for c in purchases)
    assert all(c["amount"] == 0.0 for c in clicks if c["action"] != "purchase")


def _latest(lines, column):
    """The latest event time among ``lines`` (malformed ones skipped), as a datetime."""
    import datetime as dt

    times = []
    for event in _parse(lines)[0]:
        try:
            times.append(dt.datetime.fromisoformat(event[column].replace("Z", "+00:00")))
        except (KeyError, AttributeError, TypeError, ValueError):
            pass  # a malformed line (no time, or not one)
    return max(times)


def test_files_by_event_time_keep_orders_and_payments_in_step():
    import datetime as dt

    from streaming_jobs.storage.generator import generate_by_time

    span, files = 25.0, 200  # 50 orders a file at 2 a second: `tidemark live`'s lander
    orders = GeneratorConfig(stream="orders", events=50 * files, files=files, seed=5)
    payments = GeneratorConfig(stream="payments", events=50 * files, files=files, seed=5)
    by_time = {g.stream: generate_by_time(g, span) for g in (orders, payments)}
    column = {"orders": "order_time", "payments": "payment_time"}
    jitter = dt.timedelta(seconds=orders.jitter_seconds)
    for stream, content in by_time.items():
        # file k: events of the k-th 25 s of nominal time (event time = nominal - jitter,
        # or far behind for a late one); every line in arrival order, none lost
        for k in (files // 10, files // 2, files - 1):  # (payments start 1 s to 15 min late)
            end = orders.start + dt.timedelta(seconds=(k + 1) * span)
            latest = _latest(content[k], column[stream])
            assert end - dt.timedelta(seconds=span) - jitter <= latest < end, (stream, k)
        lines = [line for file in content for line in file]
        more = GeneratorConfig(stream=stream, events=2 * 50 * files, files=1, seed=5)
        assert lines == generate(more)[0][: len(lines)]
    total = {stream: sum(map(len, content)) for stream, content in by_time.items()}
    assert total["payments"] < total["orders"] * 0.95  # fewer: unpaid orders

    # split by count, as before, payments run ahead of their orders further every file
    def gap(content):
        last = {
            stream: _latest([line for file in files for line in file], column[stream])
            for stream, files in content.items()
        }
        return last["payments"] - last["orders"]

    assert gap({g.stream: generate(g) for g in (orders, payments)}) > dt.timedelta(minutes=5)
    assert abs(gap(by_time)) < jitter + dt.timedelta(seconds=span)


def test_live_lander_lands_every_stream_in_step(cfg):
    from orchestration.cli.live import Landing

    landing = Landing(cfg, rate=10, minutes=15, every=5)  # 180 files of 50 events a stream
    latest = {
        gen.stream: _latest(
            files[-1],
            {"orders": "order_time", "payments": "payment_time"}.get(gen.stream, "event_time"),
        )
        for gen, files in landing.samples
        if gen.stream in ("orders", "payments")
    }
    assert abs(latest["payments"] - latest["orders"]).total_seconds() < 120 + 25
