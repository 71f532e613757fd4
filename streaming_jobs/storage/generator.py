"""Deterministic event generator for the landing zone: transactions, rides, orders, payments
(which pay the orders of the same seed) and clicks (in per-user sessions).

Events are produced in arrival order. Each event has a nominal time that advances at
``rate`` events per second of event time; its ``event_time`` is the nominal time minus a
random out-of-order jitter (below the jobs' watermarks), except for a ``late_share`` of events
whose time lies ``late_by`` behind, far enough to fall behind any watermark. Keys follow a Zipf
law (a few hot users). A ``duplicate_share`` of events is written twice, the copy right after the
original (same file), and a ``malformed_share`` of lines is broken in one of four ways.

Files are JSON lines, written under a temporary name and renamed into place, so a streaming
reader never sees half a file. The same seed gives the same files, byte for byte. A stream whose
source is Kafka (`streaming_jobs.storage.kafka`) gets the same lines as records of its topic instead
(`deliver`): one record per line, keyed by the stream's key, in file order.

    python -m streaming_jobs.storage.generator --events 20000 --files 8 --seed 7
"""

from __future__ import annotations

import argparse
import bisect
import heapq
import itertools
import json
import os
import random
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from streaming_jobs.core import locations
from streaming_jobs.core.locations import Location, Where
from streaming_jobs.core.config import TidemarkConfig
from streaming_jobs.storage.registry import stream_schema

EPOCH = datetime(2026, 1, 1, tzinfo=timezone.utc)
MALFORMED_KINDS = ("not_json", "missing_field", "bad_number", "bad_timestamp")


@dataclass(frozen=True)
class GeneratorConfig:
    stream: str = "transactions"
    events: int = 20_000
    files: int = 8
    seed: int = 7
    rate: float = 2.0  # events per second of event time
    users: int = 400
    zipf_s: float = 1.1
    jitter_seconds: float = 120.0
    late_share: float = 0.02
    late_by_seconds: tuple[float, float] = (1_800.0, 5_400.0)
    duplicate_share: float = 0.01
    malformed_share: float = 0.005
    failed_share: float = 0.12
    payment_delay_seconds: float = 900.0  # payments: delay after the order
    unpaid_share: float = 0.1  # payments: orders never paid
    unknown_order_share: float = 0.02  # payments: payments for no known order
    click_gap_seconds: float = 240.0  # clicks: longest pause inside a session
    start: datetime = EPOCH
    file_prefix: str = "part"

    def validate(self) -> None:
        for name in ("late_share", "duplicate_share", "malformed_share", "failed_share"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"generator: {name}={value} must be between 0 and 1")
        if self.events < 0 or self.files < 1 or self.rate <= 0 or self.users < 1:
            raise ValueError(
                "generator: events >= 0, files >= 1, rate > 0 and users >= 1 are required "
                f"(got events={self.events}, files={self.files}, rate={self.rate}, users={self.users})"
            )


def _zipf_cum_weights(n: int, s: float) -> list[float]:
    return list(itertools.accumulate(1.0 / (k**s) for k in range(1, n + 1)))


def _pick(rng: random.Random, cum: list[float]) -> int:
    return bisect.bisect_left(cum, rng.random() * cum[-1])


def _iso(ts: datetime) -> str:
    return ts.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ts.microsecond // 1000:03d}Z"


def _sequence(start: datetime, rate: float):
    """Nominal times of evenly spaced arrivals at ``rate`` per second."""
    for index in itertools.count():
        yield start + timedelta(seconds=index / rate)


class _Transactions:
    MERCHANTS = [f"merchant_{i:03d}" for i in range(60)]
    CURRENCIES = ["USD", "USD", "USD", "EUR", "EUR", "GBP"]

    def __init__(self, cfg: GeneratorConfig) -> None:
        self.cfg = cfg
        self.user_cum = _zipf_cum_weights(cfg.users, cfg.zipf_s)
        self.merchant_cum = _zipf_cum_weights(len(self.MERCHANTS), 1.0)

    def events(self, rng: random.Random):
        cfg = self.cfg
        for nominal in _sequence(cfg.start, cfg.rate):
            user = _pick(rng, self.user_cum)
            roll = rng.random()
            status = (
                "FAILED"
                if roll < cfg.failed_share
                else ("DECLINED" if roll < cfg.failed_share + 0.05 else "APPROVED")
            )
            yield (
                nominal,
                {
                    "user_id": f"u{user:05d}",
                    "card_id": f"c{user:05d}-{rng.randrange(3)}",
                    "merchant": self.MERCHANTS[_pick(rng, self.merchant_cum)],
                    "amount": round(rng.lognormvariate(3.5, 1.0), 2),
                    "currency": rng.choice(self.CURRENCIES),
                    "status": status,
                },
            )


class _Rides:
    ZONES = [f"Z{i:03d}" for i in range(1, 61)]

    def __init__(self, cfg: GeneratorConfig) -> None:
        self.cfg = cfg
        self.zone_cum = _zipf_cum_weights(len(self.ZONES), cfg.zipf_s)

    def events(self, rng: random.Random):
        for index, nominal in enumerate(_sequence(self.cfg.start, self.cfg.rate)):
            fare = round(rng.lognormvariate(2.5, 0.6), 2)
            extras = fare * rng.uniform(0.0, 0.25) + rng.choice((0.0, 0.0, 2.5, 6.94))
            yield (
                nominal,
                {
                    "ride_id": f"r-{self.cfg.seed}-{index:08d}",
                    "pickup_zone": self.ZONES[_pick(rng, self.zone_cum)],
                    "dropoff_zone": rng.choice(self.ZONES),
                    "passengers": rng.choices((1, 2, 3, 4), weights=(70, 18, 7, 5))[0],
                    "fare": fare,
                    "total_amount": round(fare + extras, 2),
                },
            )


class _Orders:
    def __init__(self, cfg: GeneratorConfig) -> None:
        self.cfg = cfg
        self.user_cum = _zipf_cum_weights(cfg.users, cfg.zipf_s)

    def events(self, rng: random.Random):
        for index, nominal in enumerate(_sequence(self.cfg.start, self.cfg.rate)):
            yield (
                nominal,
                {
                    "order_id": f"o-{self.cfg.seed}-{index:08d}",
                    "user_id": f"u{_pick(rng, self.user_cum):05d}",
                    "amount": round(rng.lognormvariate(3.0, 0.8), 2),
                },
            )


class _Payments:
    """Payments for the orders of the same seed: most within ``payment_delay_seconds`` of their
    order, ``unpaid_share`` of orders never paid, ``unknown_order_share`` for no known order."""

    def __init__(self, cfg: GeneratorConfig) -> None:
        self.cfg = cfg

    def events(self, rng: random.Random):
        cfg = self.cfg
        orders = _Orders(cfg).events(_content_rng(cfg, "orders"))
        pending: list = []  # heap of (nominal, tiebreak, fields)
        for index, (order_time, order) in enumerate(orders):
            if rng.random() >= cfg.unpaid_share:
                delay = rng.uniform(1.0, cfg.payment_delay_seconds)
                heapq.heappush(
                    pending,
                    (
                        order_time + timedelta(seconds=delay),
                        index,
                        {
                            "payment_id": f"p-{cfg.seed}-{index:08d}",
                            "order_id": order["order_id"],
                            "amount": order["amount"],
                        },
                    ),
                )
            if rng.random() < cfg.unknown_order_share:
                heapq.heappush(
                    pending,
                    (
                        order_time,
                        -index - 1,
                        {
                            "payment_id": f"p-{cfg.seed}-x{index:08d}",
                            "order_id": f"o-unknown-{cfg.seed}-{index:08d}",
                            "amount": round(rng.lognormvariate(3.0, 0.8), 2),
                        },
                    ),
                )
            # later orders cannot produce a payment earlier than order_time: emit what is due
            while pending and pending[0][0] <= order_time:
                due, _, fields = heapq.heappop(pending)
                yield due, fields


class _Clicks:
    """Per-user sessions: bursts of clicks a few seconds to minutes apart, separated by idle
    periods longer than the usual session gap."""

    PAGES = ["/", "/search", "/product", "/cart", "/checkout", "/help"]
    ACTIONS = (("view", 70), ("click", 20), ("add_to_cart", 7), ("purchase", 3))

    def __init__(self, cfg: GeneratorConfig) -> None:
        self.cfg = cfg
        self.user_cum = _zipf_cum_weights(cfg.users, cfg.zipf_s)

    def events(self, rng: random.Random):
        cfg = self.cfg
        pending, session_start = [], cfg.start
        mean_clicks = 8.0
        tiebreak = itertools.count()
        actions, weights = zip(*self.ACTIONS)
        while True:
            user = f"u{_pick(rng, self.user_cum):05d}"
            t = session_start
            for _ in range(1 + int(rng.expovariate(1.0 / (mean_clicks - 1)))):
                action = rng.choices(actions, weights=weights)[0]
                heapq.heappush(
                    pending,
                    (
                        t,
                        next(tiebreak),
                        {
                            "user_id": user,
                            "page": rng.choice(self.PAGES),
                            "action": action,
                            "amount": round(rng.lognormvariate(3.0, 0.7), 2)
                            if action == "purchase"
                            else 0.0,
                        },
                    ),
                )
                t += timedelta(seconds=rng.uniform(2.0, cfg.click_gap_seconds))
            session_start += timedelta(seconds=rng.expovariate(cfg.rate / mean_clicks))
            # sessions start in order; clicks before the next start can no longer be preceded
            while pending and pending[0][0] <= session_start:
                due, _, fields = heapq.heappop(pending)
                yield due, fields


EVENT_MAKERS = {
    "transactions": _Transactions,
    "rides": _Rides,
    "orders": _Orders,
    "payments": _Payments,
    "clicks": _Clicks,
}
ID_PREFIX = {"transactions": "tx", "rides": "rd", "orders": "or", "payments": "pm", "clicks": "ck"}


def _content_rng(cfg: GeneratorConfig, stream: str) -> random.Random:
    # What events say comes from its own stream of randomness, how they arrive from another:
    # payments can then re-derive exactly the orders that the orders stream wrote.
    return random.Random(f"{cfg.seed}:{stream}:content")


def _malform(rng: random.Random, event: dict, time_field: str) -> str:
    kind = MALFORMED_KINDS[rng.randrange(len(MALFORMED_KINDS))]
    broken = dict(event)
    if kind == "not_json":
        line = json.dumps(broken, separators=(",", ":"))
        return line[: max(1, len(line) // 2)]
    if kind == "missing_field":
        broken.pop(rng.choice([k for k in broken if k != "event_id"]))
    elif kind == "bad_number":
        numeric = [k for k, v in broken.items() if isinstance(v, (int, float))]
        broken[numeric[0] if numeric else time_field] = "not-a-number"
    else:
        broken[time_field] = "yesterday at noon"
    return json.dumps(broken, separators=(",", ":"))


def _arrivals(cfg: GeneratorConfig):
    """Every event in arrival order, without end: its nominal time and the lines it lands as
    (one, two for a duplicate, or one malformed). Nominal times never decrease."""
    schema = stream_schema(cfg.stream)
    arrival = random.Random(f"{cfg.seed}:{cfg.stream}:arrival")
    contents = EVENT_MAKERS[cfg.stream](cfg).events(_content_rng(cfg, cfg.stream))
    for index, (nominal, fields) in enumerate(contents):
        if arrival.random() < cfg.late_share:
            event_time = nominal - timedelta(seconds=arrival.uniform(*cfg.late_by_seconds))
        else:
            event_time = nominal - timedelta(seconds=arrival.uniform(0, cfg.jitter_seconds))
        values = {
            "event_id": f"{ID_PREFIX[cfg.stream]}-{cfg.seed}-{index:08d}",
            **fields,
            schema.event_time: _iso(event_time),
        }
        event = {name: values[name] for name in schema.field_names}
        if arrival.random() < cfg.malformed_share:
            yield nominal, [_malform(arrival, event, schema.event_time)]
            continue
        line = json.dumps(event, separators=(",", ":"))
        yield nominal, ([line, line] if arrival.random() < cfg.duplicate_share else [line])


def generate(cfg: GeneratorConfig) -> list[list[str]]:
    """``cfg.events`` events' lines, split into ``cfg.files`` files in arrival order."""
    cfg.validate()
    lines = [line for _, event in itertools.islice(_arrivals(cfg), cfg.events) for line in event]
    per_file = -(-len(lines) // cfg.files) if lines else 0
    return [lines[i * per_file : (i + 1) * per_file] for i in range(cfg.files)]


def generate_by_time(cfg: GeneratorConfig, seconds: float) -> list[list[str]]:
    """``cfg.files`` files, file k holding the lines of the events whose nominal time falls in
    the k-th ``seconds`` of event time from ``cfg.start`` (``cfg.events`` is not used).

    Streams landed this way advance in event time at the same pace whatever their density:
    payments are fewer than their orders (unpaid orders), and split by count they would run
    ahead of the orders in event time, further every file, and a job joining the two would hold
    state for the whole gap (its watermark follows the slower stream)."""
    cfg.validate()
    if seconds <= 0:
        raise ValueError(f"generator: seconds per file must be positive (got {seconds})")
    files: list[list[str]] = [[] for _ in range(cfg.files)]
    for nominal, event in _arrivals(cfg):
        number = int((nominal - cfg.start).total_seconds() // seconds)
        if number >= cfg.files:
            break
        files[number].extend(event)
    return files


def file_name(cfg: GeneratorConfig, number: int) -> str:
    return f"{cfg.file_prefix}-{cfg.seed}-{number:05d}.jsonl"


def write_files(
    target: Where, cfg: GeneratorConfig, files: list[list[str]], only: range | None = None
) -> list[Where]:
    """Write files ``only`` (default all) into ``target`` atomically; returns their places."""
    numbers = only if only is not None else range(len(files))
    if Location.of(target).on_store:  # one put per file: whole or absent, no rename needed
        written = []
        for number in numbers:
            final = Location.of(target) / file_name(cfg, number)
            locations.write_bytes(final, "".join(line + "\n" for line in files[number]).encode())
            written.append(final)
        return written
    target = Location.of(target).path
    target.mkdir(parents=True, exist_ok=True)
    staging = target.parent / f".{target.name}.staging"
    staging.mkdir(parents=True, exist_ok=True)
    written = []
    for number in numbers:
        final = target / file_name(cfg, number)
        tmp = staging / final.name
        tmp.write_text("".join(line + "\n" for line in files[number]))
        os.replace(tmp, final)  # same file system: atomic, readers see all or nothing
        written.append(final)
    return written


def record_key(line: str, key: tuple[str, ...] | None) -> bytes | None:
    """The Kafka key of a line: its key columns joined by ``|`` (None for a malformed line or a
    stream without a key: the producer spreads those over the partitions)."""
    if not key:
        return None
    try:
        event = json.loads(line)
        return "|".join(str(event[k]) for k in key).encode()
    except (ValueError, KeyError, TypeError):
        return None


def publish_files(
    tcfg: TidemarkConfig, cfg: GeneratorConfig, files: list[list[str]], only: range | None = None
) -> int:
    """Publish files ``only`` (default all) to the stream's topic, a record per line; returns
    the number of records."""
    from streaming_jobs.storage.kafka import ensure_topic, publish, topic_of

    schema = stream_schema(cfg.stream)
    topic = topic_of(tcfg, schema)
    ensure_topic(tcfg, topic)
    lines = [
        line
        for number in (only if only is not None else range(len(files)))
        for line in files[number]
    ]
    return publish(tcfg, topic, ((record_key(line, schema.key), line.encode()) for line in lines))


def deliver(
    tcfg: TidemarkConfig, cfg: GeneratorConfig, files: list[list[str]], only: range | None = None
) -> str:
    """Files ``only`` to the stream's source: the landing folder or its Kafka topic; returns
    where they went."""
    from streaming_jobs.storage.kafka import source_of, topic_of

    schema = stream_schema(cfg.stream)
    if source_of(tcfg, schema) == "kafka":
        count = publish_files(tcfg, cfg, files, only)
        return f"{count} records to Kafka topic {topic_of(tcfg, schema)}"
    written = write_files(tcfg.paths.landing_dir(cfg.stream), cfg, files, only)
    return f"{len(written)} files to {tcfg.paths.landing_dir(cfg.stream)}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    d = GeneratorConfig()
    parser.add_argument("--stream", default=d.stream, choices=sorted(EVENT_MAKERS))
    parser.add_argument("--events", type=int, default=d.events)
    parser.add_argument("--files", type=int, default=d.files)
    parser.add_argument("--seed", type=int, default=d.seed)
    parser.add_argument(
        "--rate", type=float, default=d.rate, help="events per second of event time"
    )
    parser.add_argument("--users", type=int, default=d.users, help="key cardinality")
    parser.add_argument("--zipf", type=float, default=d.zipf_s, help="Zipf exponent of key skew")
    parser.add_argument(
        "--jitter", type=float, default=d.jitter_seconds, help="max out-of-order seconds"
    )
    parser.add_argument("--late-share", type=float, default=d.late_share)
    parser.add_argument("--duplicate-share", type=float, default=d.duplicate_share)
    parser.add_argument("--malformed-share", type=float, default=d.malformed_share)
    parser.add_argument("--only", help="write only files FROM:TO (0-based, TO exclusive)")
    parser.add_argument("--data-root", help="defaults to TIDEMARK_DATA_ROOT")
    args = parser.parse_args(argv)
    cfg = GeneratorConfig(
        stream=args.stream,
        events=args.events,
        files=args.files,
        seed=args.seed,
        rate=args.rate,
        users=args.users,
        zipf_s=args.zipf,
        jitter_seconds=args.jitter,
        late_share=args.late_share,
        duplicate_share=args.duplicate_share,
        malformed_share=args.malformed_share,
    )
    tcfg = TidemarkConfig.from_env()
    if args.data_root:
        tcfg = tcfg.with_data_root(args.data_root)
    only = None
    if args.only:
        start, _, stop = args.only.partition(":")
        only = range(int(start), int(stop))
    print(f"wrote {deliver(tcfg, cfg, generate(cfg), only)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
