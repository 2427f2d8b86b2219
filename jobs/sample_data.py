"""Deterministic sample landing data for the three jobs, with out-of-order and late records.

Each landing table has ``seq`` (arrival sequence), ``ingest_time`` (when the record arrived) and
``ts`` (event time) plus its own columns. A record arrives ``ts + delay`` with delays drawn so
that about 85 % arrive within 30 s, 11 % are 1-8 min out of order (within every job's grace
except the sliding one's) and 4 % are 12-60 min late (beyond every grace: dropped and counted).

The sample stream begins at ``ORIGIN`` (the DAGs' default start date). Events are drawn hour by
hour from a generator seeded with (seed, table, hour), so the data of a range does not depend on
how it is split: filling [a, b) then [b, c) equals filling [a, c), and filling a range again
replaces it with the same rows (Delta ``replaceWhere`` on ``ingest_time``).

    python jobs/sample_data.py --from 2026-01-01T00:00 --to 2026-01-01T03:00 --landing var/landing
"""

from __future__ import annotations

import argparse
import datetime as dt
import math
import os
import random
import sys
from collections.abc import Callable, Iterator

HOUR = dt.timedelta(hours=1)
ORIGIN = dt.datetime(2026, 1, 1)
LOOKBACK = dt.timedelta(hours=3)  # an hour's events arrive within 3 h (sessions run 1 h, delays 1 h)
SCHEMAS = {
    "user_events": "seq long, ingest_time timestamp, ts timestamp, user_id string, action string",
    "page_views": "seq long, ingest_time timestamp, ts timestamp, user_id string, page string",
    "sensor_readings": "seq long, ingest_time timestamp, ts timestamp, sensor string, value double",
}
USER_RATES = {"u01": 12, "u02": 10, "u03": 8, "u04": 6, "u05": 5, "u06": 4, "u07": 3, "u08": 2, "u09": 1, "u10": 1}
PAGES = ["/", "/search", "/product", "/cart", "/checkout", "/help"]
SENSORS = {"s1": 20.0, "s2": 35.0, "s3": 50.0, "s4": 65.0}

Event = tuple  # (event time, *columns)


def _at(hour: dt.datetime, rng: random.Random, span: dt.timedelta = HOUR) -> dt.datetime:
    return hour + dt.timedelta(milliseconds=rng.randrange(span // dt.timedelta(milliseconds=1)))


def _user_events(rng: random.Random, hour: dt.datetime) -> Iterator[Event]:
    """Ten users with hourly activity from 12 to 1 events: the quiet ones trigger alerts."""
    for user, rate in USER_RATES.items():
        for _ in range(sum(rng.random() < rate / 20 for _ in range(20))):
            yield _at(hour, rng), user, rng.choice(["view", "click", "buy"])


def _page_views(rng: random.Random, hour: dt.datetime) -> Iterator[Event]:
    """Six users who each start a session in 60 % of hours: 2-6 views, 1-12 min apart."""
    for user in ("u01", "u02", "u03", "u04", "u05", "u06"):
        if rng.random() < 0.6:
            ts = _at(hour, rng)
            for _ in range(rng.randint(2, 6)):
                yield ts, user, rng.choice(PAGES)
                ts += dt.timedelta(milliseconds=rng.randrange(60_000, 720_000))


def _sensor_readings(rng: random.Random, hour: dt.datetime) -> Iterator[Event]:
    """Four sensors reading every 5 min (+-1 min jitter); s4 is silent in about a third of hours."""
    for sensor, base in SENSORS.items():
        if sensor == "s4" and rng.random() < 0.3:
            continue
        for k in range(12):
            ts = hour + dt.timedelta(minutes=5 * k, milliseconds=rng.randrange(-60_000, 60_000))
            yield ts, sensor, round(base + 3 * math.sin(ts.timestamp() / 3600) + rng.gauss(0, 1), 2)


MAKERS: dict[str, Callable[[random.Random, dt.datetime], Iterator[Event]]] = {
    "user_events": _user_events,
    "page_views": _page_views,
    "sensor_readings": _sensor_readings,
}


def _delay(rng: random.Random) -> dt.timedelta:
    r = rng.random()
    low, high = (0, 30_000) if r < 0.85 else (60_000, 480_000) if r < 0.96 else (720_000, 3_600_000)
    return dt.timedelta(milliseconds=rng.randrange(low, high))


def records(table: str, start: dt.datetime, end: dt.datetime, seed: int = 7) -> list[tuple]:
    """The rows of landing ``table`` that arrive in ``[start, end)`` (naive UTC), in arrival order.

    ``seq`` is the arrival time in microseconds, made unique, so it keeps increasing across ranges.
    """
    hour = max(ORIGIN, (start - LOOKBACK).replace(minute=0, second=0, microsecond=0))
    arrived = []
    while hour < end:
        rng = random.Random(f"{seed}/{table}/{hour.isoformat()}")
        for ts, *columns in list(MAKERS[table](rng, hour)):
            ingest = ts + _delay(rng)
            if start <= ingest < end and ts >= ORIGIN:
                arrived.append((ingest, ts, *columns))
        hour += HOUR
    arrived.sort()
    rows, last = [], None
    for ingest, *rest in arrived:
        seq = (ingest - dt.datetime(1970, 1, 1)) // dt.timedelta(microseconds=1)
        seq = max(seq, last + 1) if last is not None else seq
        rows.append((seq, ingest, *rest))
        last = seq
    return rows


def generate(
    spark, landing: str, start: dt.datetime, end: dt.datetime, seed: int = 7, tables: tuple[str, ...] = tuple(SCHEMAS)
) -> dict[str, int]:
    """Fill (or refill) ``[start, end)`` of each landing table under ``landing``; rows per table."""
    utc = dt.timezone.utc
    counts = {}
    for table in tables:
        rows = [
            tuple(v.replace(tzinfo=utc) if isinstance(v, dt.datetime) else v for v in row)
            for row in records(table, start, end, seed)
        ]
        where = f"ingest_time >= '{start:%Y-%m-%d %H:%M:%S.%f}' AND ingest_time < '{end:%Y-%m-%d %H:%M:%S.%f}'"
        (
            spark.createDataFrame(rows, SCHEMAS[table])
            .write.format("delta")
            .mode("overwrite")
            .option("replaceWhere", where)
            .save(os.path.join(landing, table))
        )
        counts[table] = len(rows)
    return counts


def main(argv: list[str] | None = None) -> int:
    """Command line: fill the landing tables for a date range."""
    from framework import spark_session
    from framework.batchjob import parse_time
    from framework.errors import FrameworkError

    parser = argparse.ArgumentParser(prog="sample_data.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--from", dest="start", required=True, help="first arrival time, ISO (UTC if naive)")
    parser.add_argument("--to", dest="end", required=True, help="end of the range (exclusive), ISO")
    parser.add_argument(
        "--landing",
        default=os.environ.get("FINALRESULTS_LANDING", "var/landing"),
        help="folder of the landing Delta tables (default: $FINALRESULTS_LANDING or var/landing)",
    )
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--table", action="append", choices=sorted(SCHEMAS), help="only these tables (repeatable)")
    args = parser.parse_args(argv)
    try:
        start, end = parse_time(args.start, "--from"), parse_time(args.end, "--to")
    except FrameworkError as e:
        parser.error(str(e))
    if not start < end:
        parser.error("--from must be before --to")
    counts = generate(spark_session("sample-data"), args.landing, start, end, args.seed, tuple(args.table or SCHEMAS))
    for table, n in counts.items():
        print(f"{os.path.join(args.landing, table)}: {n} records arrived in [{start}, {end})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
