"""Deterministic event generator for the landing zone.

Events are produced in arrival order. Each event has a nominal time that advances at
``rate`` events per second of event time; its ``event_time`` is the nominal time minus a
random out-of-order jitter (below the jobs' watermarks), except for a ``late_share`` of events
whose time lies ``late_by`` behind, far enough to fall behind any watermark. Keys follow a Zipf
law (a few hot users). A ``duplicate_share`` of events is written twice, the copy right after the
original (same file), and a ``malformed_share`` of lines is broken in one of four ways.

Files are JSON lines, written under a temporary name and renamed into place, so a streaming
reader never sees half a file. The same seed gives the same files, byte for byte.

    python -m streaming_jobs.generator --events 20000 --files 8 --seed 7
"""

from __future__ import annotations

import argparse
import bisect
import itertools
import json
import os
import random
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

from streaming_jobs.config import TidemarkConfig
from streaming_jobs.schemas import stream_schema

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
    return list(itertools.accumulate(1.0 / (k ** s) for k in range(1, n + 1)))


def _pick(rng: random.Random, cum: list[float]) -> int:
    return bisect.bisect_left(cum, rng.random() * cum[-1])


def _iso(ts: datetime) -> str:
    return ts.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ts.microsecond // 1000:03d}Z"


class _Transactions:
    MERCHANTS = [f"merchant_{i:03d}" for i in range(60)]
    CURRENCIES = ["USD", "USD", "USD", "EUR", "EUR", "GBP"]

    def __init__(self, cfg: GeneratorConfig, rng: random.Random) -> None:
        self.cfg, self.rng = cfg, rng
        self.user_cum = _zipf_cum_weights(cfg.users, cfg.zipf_s)
        self.merchant_cum = _zipf_cum_weights(len(self.MERCHANTS), 1.0)

    def event(self, index: int, event_time: datetime) -> dict:
        rng, cfg = self.rng, self.cfg
        user = _pick(rng, self.user_cum)
        roll = rng.random()
        status = "FAILED" if roll < cfg.failed_share else (
            "DECLINED" if roll < cfg.failed_share + 0.05 else "APPROVED")
        return {
            "event_id": f"tx-{cfg.seed}-{index:08d}",
            "user_id": f"u{user:05d}",
            "card_id": f"c{user:05d}-{rng.randrange(3)}",
            "merchant": self.MERCHANTS[_pick(rng, self.merchant_cum)],
            "amount": round(rng.lognormvariate(3.5, 1.0), 2),
            "currency": rng.choice(self.CURRENCIES),
            "status": status,
            "event_time": _iso(event_time),
        }


EVENT_MAKERS = {"transactions": _Transactions}


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


def generate(cfg: GeneratorConfig) -> list[list[str]]:
    """All lines, split into ``cfg.files`` files in arrival order."""
    cfg.validate()
    schema = stream_schema(cfg.stream)
    rng = random.Random(cfg.seed)
    maker = EVENT_MAKERS[cfg.stream](cfg, rng)
    lines: list[str] = []
    for index in range(cfg.events):
        nominal = cfg.start + timedelta(seconds=index / cfg.rate)
        if rng.random() < cfg.late_share:
            event_time = nominal - timedelta(seconds=rng.uniform(*cfg.late_by_seconds))
        else:
            event_time = nominal - timedelta(seconds=rng.uniform(0, cfg.jitter_seconds))
        event = maker.event(index, event_time)
        if rng.random() < cfg.malformed_share:
            lines.append(_malform(rng, event, schema.event_time))
            continue
        line = json.dumps(event, separators=(",", ":"))
        lines.append(line)
        if rng.random() < cfg.duplicate_share:
            lines.append(line)
    per_file = -(-len(lines) // cfg.files) if lines else 0
    return [lines[i * per_file:(i + 1) * per_file] for i in range(cfg.files)]


def file_name(cfg: GeneratorConfig, number: int) -> str:
    return f"{cfg.file_prefix}-{cfg.seed}-{number:05d}.jsonl"


def write_files(target: Path, cfg: GeneratorConfig, files: list[list[str]],
                only: range | None = None) -> list[Path]:
    """Write files ``only`` (default all) into ``target`` atomically; returns their paths."""
    target.mkdir(parents=True, exist_ok=True)
    staging = target.parent / f".{target.name}.staging"
    staging.mkdir(parents=True, exist_ok=True)
    written = []
    for number in (only if only is not None else range(len(files))):
        final = target / file_name(cfg, number)
        tmp = staging / final.name
        tmp.write_text("".join(line + "\n" for line in files[number]))
        os.replace(tmp, final)  # same file system: atomic, readers see all or nothing
        written.append(final)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    d = GeneratorConfig()
    parser.add_argument("--stream", default=d.stream)
    parser.add_argument("--events", type=int, default=d.events)
    parser.add_argument("--files", type=int, default=d.files)
    parser.add_argument("--seed", type=int, default=d.seed)
    parser.add_argument("--rate", type=float, default=d.rate, help="events per second of event time")
    parser.add_argument("--users", type=int, default=d.users, help="key cardinality")
    parser.add_argument("--zipf", type=float, default=d.zipf_s, help="Zipf exponent of key skew")
    parser.add_argument("--jitter", type=float, default=d.jitter_seconds, help="max out-of-order seconds")
    parser.add_argument("--late-share", type=float, default=d.late_share)
    parser.add_argument("--duplicate-share", type=float, default=d.duplicate_share)
    parser.add_argument("--malformed-share", type=float, default=d.malformed_share)
    parser.add_argument("--only", help="write only files FROM:TO (0-based, TO exclusive)")
    parser.add_argument("--data-root", help="defaults to TIDEMARK_DATA_ROOT")
    args = parser.parse_args(argv)
    cfg = GeneratorConfig(
        stream=args.stream, events=args.events, files=args.files, seed=args.seed, rate=args.rate,
        users=args.users, zipf_s=args.zipf, jitter_seconds=args.jitter, late_share=args.late_share,
        duplicate_share=args.duplicate_share, malformed_share=args.malformed_share,
    )
    tcfg = TidemarkConfig.from_env()
    if args.data_root:
        tcfg = tcfg.with_data_root(args.data_root)
    only = None
    if args.only:
        start, _, stop = args.only.partition(":")
        only = range(int(start), int(stop))
    written = write_files(tcfg.paths.landing_dir(cfg.stream), cfg, generate(cfg), only)
    print(f"wrote {len(written)} files to {tcfg.paths.landing_dir(cfg.stream)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
