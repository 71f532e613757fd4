"""Apache Flink (PyFlink's Table API, its own runtime from the ``apache-flink`` wheel) for
`compare.py`: one query over the generated JSON lines, streaming mode, parallelism 2, RocksDB
state with incremental checkpoints every 10 s, answer written as JSON lines.

    python compare_flink.py --query tumbling --input DIR --out DIR --work DIR

Runs in the benchmark's own environment (no Spark). Prints one JSON object: the seconds from
submitting the job to its end (the parent measures the process's wall time and memory).

Flink's file source hands whole files to its parallel readers in no set order, and each reader
keeps one watermark. A reader that takes an older file after a newer one drops the older
file's events as late (at 1,000,000 events in 10 files, 20-50 % of the windows went missing).
So the lines are first regrouped, before the job's clock starts, into one file per reader:
line i of the stream (in arrival order) goes to file i mod parallelism. Every reader then reads
one file, in arrival order, and Flink reads the same lines as every other engine.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compare_queries import COLUMNS, EVENT_TIME, QUERIES, Query  # noqa: E402

FLINK_TYPES = {"VARCHAR": "STRING", "DOUBLE": "DOUBLE", "BIGINT": "BIGINT"}


def source_ddl(stream: str, folder: Path) -> str:
    columns = ", ".join(f"`{k}` {FLINK_TYPES[v]}" for k, v in COLUMNS[stream].items())
    time_col = EVENT_TIME[stream]
    return f"""create table {stream} ({columns},
        ts as to_timestamp(replace(replace(`{time_col}`, 'T', ' '), 'Z', ''),
                           'yyyy-MM-dd HH:mm:ss.SSS'),
        watermark for ts as ts - interval '10' minute)
      with ('connector' = 'filesystem', 'path' = 'file://{folder / stream}', 'format' = 'json')"""


FAILED = "status = 'FAILED'"


def dedup_view(stream: str, reads: str = "true") -> str:
    """First copy of each event id among the events ``reads`` keeps (ordered by processing
    time: an append-only stream that keeps ``ts`` as its event time)."""
    return f"""create temporary view {stream}_d as
        select * from (select *, row_number() over (partition by event_id order by proctime())
                                 as rn from (select *, proctime() as pt from {stream}
                                             where {reads}))
        where rn = 1"""


def one_file_per_reader(source: Path, target: Path, readers: int) -> None:
    """``source``'s files (named in arrival order), their lines dealt round-robin into
    ``readers`` files under ``target``, each in arrival order."""
    target.mkdir(parents=True)
    outs = [open(target / f"part-{k}.jsonl", "w") for k in range(readers)]
    try:
        number = 0
        for path in sorted(source.glob("*.jsonl")):
            with open(path) as lines:
                for line in lines:
                    outs[number % readers].write(line)
                    number += 1
    finally:
        for out in outs:
            out.close()


def query_sql(query: Query) -> tuple[str, str]:
    """The sink's columns and the SELECT that fills it."""
    if query.name == "tumbling":
        return (
            "pickup_zone string, window_start string, window_end string, trips bigint, "
            "revenue double, avg_fare double",
            """select pickup_zone, cast(window_start as string), cast(window_end as string),
                          count(*), sum(total_amount), avg(fare)
                   from table(tumble(table rides_d, descriptor(ts), interval '1' hour))
                   group by pickup_zone, window_start, window_end""",
        )
    if query.name == "sliding_60s":
        return (
            "user_id string, window_start string, window_end string, failed_count bigint",
            """select user_id, cast(window_start as string), cast(window_end as string),
                          count(*)
                   from table(hop(table transactions_f, descriptor(ts), interval '5' second,
                                  interval '60' second))
                   group by user_id, window_start, window_end""",
        )
    if query.name == "session":
        return (
            "user_id string, window_start string, window_end string, clicks bigint, spend double",
            """select user_id, cast(window_start as string), cast(window_end as string),
                          count(*), sum(amount)
                   from table(session(table clicks_d partition by user_id, descriptor(ts),
                                      interval '5' minute))
                   group by user_id, window_start, window_end""",
        )
    if query.name == "interval_join":
        return (
            "order_id string, payment_id string, status string, order_amount double, "
            "payment_amount double, anchor string",
            """select coalesce(o.order_id, p.order_id), p.payment_id,
                          case when o.order_id is null then 'unknown_order'
                               when p.payment_id is null then 'unpaid' else 'paid' end,
                          o.amount, p.amount, cast(coalesce(o.ts, p.ts) as string)
                   from orders_d o full outer join payments_d p
                     on o.order_id = p.order_id
                    and p.ts between o.ts - interval '20' minute and o.ts + interval '20' minute""",
        )
    raise SystemExit(
        f"compare_flink: query {query.name!r} is not run on Flink (see "
        "compare_queries.py: emitting every 24-hour window is 17,280 rows per event)"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--query", required=True, choices=sorted(QUERIES))
    parser.add_argument("--input", required=True, type=Path)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--work", required=True, type=Path)
    parser.add_argument("--parallelism", type=int, default=2)
    args = parser.parse_args(argv)
    query = QUERIES[args.query]

    from pyflink.table import EnvironmentSettings, TableEnvironment

    env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
    conf = env.get_config()
    for key, value in {
        "parallelism.default": str(args.parallelism),
        "table.local-time-zone": "UTC",
        "state.backend.type": "rocksdb",
        "execution.checkpointing.incremental": "true",
        "execution.checkpointing.interval": "10 s",
        "execution.checkpointing.dir": f"file://{args.work / 'checkpoints'}",
        # the dedup keeps an event id this long (processing time); windows and the join clean
        # up by the watermark
        "table.exec.state.ttl": "10 min",
    }.items():
        conf.set(key, value)
    readable = args.work / "input"
    for stream in query.streams:
        one_file_per_reader(args.input / stream, readable / stream, args.parallelism)
        env.execute_sql(source_ddl(stream, readable))
        # as tidemark's job does: only the FAILED transactions are deduplicated
        env.execute_sql(dedup_view(stream, FAILED if stream == "transactions" else "true"))
    if "transactions" in query.streams:
        env.execute_sql("create temporary view transactions_f as select * from transactions_d")
    columns, select = query_sql(query)
    env.execute_sql(
        f"create table answer ({columns}) with ('connector' = 'filesystem', "
        f"'path' = 'file://{args.out}', 'format' = 'json')"
    )
    started = time.monotonic()
    env.execute_sql(f"insert into answer {select}").wait()
    print(json.dumps({"processing_s": time.monotonic() - started}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
