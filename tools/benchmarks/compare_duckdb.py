"""DuckDB for `compare.py`: the batch answer of each query (the floor for this machine and the
reference every engine is checked against), and the check itself.

    python compare_duckdb.py answer --query tumbling --input DIR --out ref.parquet
    python compare_duckdb.py check --query tumbling --input DIR --reference ref.parquet \
        --answer ANSWER_PATH

Runs in the benchmark's own environment (duckdb, no Spark). Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import duckdb

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compare_queries import (
    COLUMNS,
    EVENT_TIME,
    QUERIES,
    SESSION_GAP_MS,  # noqa: E402
    WATERMARK_MS,
    Query,
)

TOLERANCE = 1e-6


def source(stream: str, folder: Path) -> str:
    """The stream's lines with ``t``: event time in epoch milliseconds, first copy per event."""
    columns = "{" + ", ".join(f"'{k}': '{v}'" for k, v in COLUMNS[stream].items()) + "}"
    time_col = EVENT_TIME[stream]
    return f"""(select * exclude (rn) from (
        select *, row_number() over (partition by event_id order by t) as rn from (
            select *, epoch_ms(cast(replace(replace({time_col}, 'T', ' '), 'Z', '') as timestamp))
                   as t
            from read_json('{folder / stream}/*', format = 'newline_delimited',
                           columns = {columns}))) where rn = 1)"""


def reference_sql(query: Query, folder: Path) -> str:
    d = {s: source(s, folder) for s in query.streams}
    if query.name == "tumbling":
        return f"""select pickup_zone, (t // 3600000) * 3600000 as window_start,
                          (t // 3600000) * 3600000 + 3600000 as window_end,
                          count(*) as trips, sum(total_amount) as revenue, avg(fare) as avg_fare
                   from {d["rides"]} group by all"""
    if query.name == "sliding_60s":
        return f"""select user_id, s as window_start, s + 60000 as window_end,
                          count(*) as failed_count
                   from (select user_id,
                                unnest(range((t // 5000) * 5000 - 55000, (t // 5000) * 5000 + 1,
                                             5000)) as s
                         from {d["transactions"]} where status = 'FAILED')
                   group by all"""
    if query.name == "session":
        return f"""with o as (
                     select user_id, t, amount,
                            case when t - lag(t) over (partition by user_id order by t)
                                      <= {SESSION_GAP_MS} then 0 else 1 end as starts
                     from {d["clicks"]}),
                   s as (select *, sum(starts) over (partition by user_id order by t
                                                     rows unbounded preceding) as sid from o)
                   select user_id, min(t) as window_start, max(t) + {SESSION_GAP_MS} as window_end,
                          count(*) as clicks, sum(amount) as spend
                   from s group by user_id, sid"""
    if query.name == "interval_join":
        return f"""select coalesce(o.order_id, p.order_id) as order_id,
                          coalesce(p.payment_id, '') as payment_id,
                          case when o.order_id is null then 'unknown_order'
                               when p.payment_id is null then 'unpaid' else 'paid' end as status,
                          o.amount as order_amount, p.amount as payment_amount,
                          coalesce(o.t, p.t) as anchor
                   from {d["orders"]} o full outer join {d["payments"]} p
                     on o.order_id = p.order_id
                    and p.t between o.t - 1200000 and o.t + 1200000"""
    if query.name == "sliding_24h":
        panes = 24 * 3600 // 5
        return f"""with panes as (select user_id, t // 5000 as p, count(*) as c
                                  from {d["transactions"]} where status = 'FAILED' group by all),
                   candidates as (select user_id, p, sum(c) as c from (
                                    select user_id, p, c from panes
                                    union all select user_id, p + {panes}, 0 from panes)
                                  group by all),
                   windows as (select user_id, p, sum(c) over (
                                 partition by user_id order by p
                                 range between {panes - 1} preceding and current row) as n
                               from candidates),
                   changes as (select *, lag(n) over (partition by user_id order by p) as prev
                               from windows)
                   select user_id, (p + 1) * 5000 as window_end, n as failed_count
                   from changes where prev is null or n <> prev"""
    raise SystemExit(f"compare_duckdb: no reference for query {query.name!r}")


def final_watermark(con, query: Query, folder: Path) -> int:
    """The least, over the query's streams, of the latest event time less the watermark delay."""
    latest = []
    for stream in query.streams:
        time_col = EVENT_TIME[stream]
        columns = "{" + ", ".join(f"'{k}': '{v}'" for k, v in COLUMNS[stream].items()) + "}"
        latest.append(
            con.execute(
                f"select max(epoch_ms(cast(replace(replace({time_col}, 'T', ' '), 'Z', '') "
                f"as timestamp))) from read_json('{folder / stream}/*', "
                f"format = 'newline_delimited', columns = {columns})"
            ).fetchone()[0]
        )
    return min(latest) - WATERMARK_MS


def read_answer(path: Path) -> str:
    """A relation over an engine's answer: Parquet (Spark) or JSON lines (Flink) files."""
    files = (
        [p for p in path.rglob("*") if p.is_file() and not p.name.startswith((".", "_"))]
        if path.is_dir()
        else [path]
    )
    if any(p.suffix == ".parquet" for p in files):
        return (
            f"read_parquet('{path}/**/*.parquet')" if path.is_dir() else f"read_parquet('{path}')"
        )
    return (
        f"read_json('{path}/**/*' , format = 'newline_delimited')"
        if path.is_dir()
        else f"read_json('{path}', format = 'newline_delimited')"
    )


def normalized(con, relation: str, query: Query) -> str:
    described = con.execute(f"describe select * from {relation}").fetchall()
    types = {row[0]: row[1].upper() for row in described}
    cols = []
    for col in (
        *query.keys,
        *query.measures,
        *([query.closed_by] if query.closed_by not in query.keys else []),
    ):
        kind = types.get(col)
        if kind is None:
            raise SystemExit(
                f"compare_duckdb: the answer of {query.name} has no column {col!r} "
                f"(it has {sorted(types)})"
            )
        if col in ("window_start", "window_end", "anchor") and kind.startswith("TIMESTAMP"):
            cols.append(f"epoch_ms({col}) as {col}")
        elif col in ("window_start", "window_end", "anchor") and kind == "VARCHAR":
            cols.append(f"epoch_ms(cast({col} as timestamp)) as {col}")
        elif col == "payment_id":
            cols.append("coalesce(payment_id, '') as payment_id")
        else:
            cols.append(col)
    return f"(select {', '.join(cols)} from {relation})"


def check(query: Query, folder: Path, reference: Path, answer: Path) -> dict:
    con = duckdb.connect()
    con.execute("set TimeZone = 'UTC'")
    limit = final_watermark(con, query, folder) - query.margin_ms
    ref = f"(select * from read_parquet('{reference}') where {query.closed_by} <= {limit})"
    got = (
        f"(select * from {normalized(con, read_answer(answer), query)} "
        f"where {query.closed_by} <= {limit})"
    )
    on = " and ".join(f"r.{k} is not distinct from a.{k}" for k in query.keys)
    close = " or ".join(
        f"abs(coalesce(r.{m}, 0) - coalesce(a.{m}, 0)) > {TOLERANCE} * greatest(1, abs(r.{m}))"
        f" or ((r.{m} is null) <> (a.{m} is null))"
        for m in query.measures
    )
    compared = con.execute(f"select count(*) from {ref}").fetchone()[0]
    answered = con.execute(f"select count(*) from {got}").fetchone()[0]
    keys = ", ".join(query.keys)
    repeated = con.execute(f"select count(*) - count(distinct ({keys})) from {got}").fetchone()[0]
    missing = con.execute(f"select count(*) from {ref} r anti join {got} a on {on}").fetchone()[0]
    extra = con.execute(f"select count(*) from {got} a anti join {ref} r on {on}").fetchone()[0]
    differing = con.execute(
        f"select count(*) from {ref} r join {got} a on {on} where {close}"
    ).fetchone()[0]
    return {
        "compared": compared,
        "answered": answered,
        "missing": missing,
        "extra": extra,
        "differing": differing,
        "repeated": repeated,
        "final_watermark_ms": limit,
        "equal": compared > 0 and missing == extra == differing == repeated == 0,
    }


def answer(query: Query, folder: Path, out: Path) -> dict:
    con = duckdb.connect()
    con.execute("set TimeZone = 'UTC'")
    con.execute("set threads = 2")
    started = time.monotonic()
    con.execute(f"copy ({reference_sql(query, folder)}) to '{out}' (format parquet)")
    seconds = time.monotonic() - started
    rows = con.execute(f"select count(*) from read_parquet('{out}')").fetchone()[0]
    return {"processing_s": seconds, "output_rows": rows}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=("answer", "check"))
    parser.add_argument("--query", required=True, choices=sorted(QUERIES))
    parser.add_argument("--input", required=True, type=Path)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--reference", type=Path)
    parser.add_argument("--answer", type=Path)
    args = parser.parse_args(argv)
    query = QUERIES[args.query]
    if args.command == "answer":
        result = answer(query, args.input, args.out)
    else:
        result = check(query, args.input, args.reference, args.answer)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
