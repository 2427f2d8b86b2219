"""Sliding windows' cost per batch: the framework's sliding-window pipeline over out-of-order
batches, seconds per batch. Run it on two checkouts to compare them (the numbers in
``bench/results/sliding.md`` compare the engine that derived windows from kept records with the
one that holds Kafka's windows and decides them in a per-key fold)::

    .venv/bin/python bench/sliding.py --label after
    PYTHONPATH=<other checkout> .venv/bin/python bench/sliding.py --label before

Each batch brings ``--events`` records over ``--keys`` keys, one ``--step`` of event time later
than the last, each record up to ``--disorder`` out of order; windows of 1 minute with 30 s grace,
count and sum, final results only. The first two batches warm up and are not counted. Prints and
appends to ``--out`` one JSON line: label, median and each batch's seconds, windows emitted.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from pyspark.sql import functions as F

import framework
from framework import BufferConfig, Pipeline, Runtime, SlidingWindows, Suppressed, agg, spark_session

MINUTE = 60_000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--label", required=True)
    ap.add_argument("--batches", type=int, default=8)
    ap.add_argument("--events", type=int, default=50_000)
    ap.add_argument("--keys", type=int, default=1_000)
    ap.add_argument("--step", type=int, default=MINUTE, help="event time each batch covers (ms)")
    ap.add_argument("--disorder", type=int, default=20_000, help="how far a record may be out of order (ms)")
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "sliding.jsonl")
    args = ap.parse_args()
    spark = spark_session("bench-sliding")
    rt = Runtime(spark, tempfile.mkdtemp(prefix="sliding-"), quality=False)
    p = (
        Pipeline("sliding", timestamp="ts", arrival="seq")
        .group_by("k")
        .windowed_by(SlidingWindows.of_time_difference_and_grace(MINUTE, 30_000))
        .aggregate(agg.count("n"), agg.sum("v", "total"))
        .suppress(Suppressed.until_window_closes(BufferConfig.unbounded()))
        .to("out")
    )
    seconds, emitted = [], 0
    for i in range(args.batches):
        ids = spark.range(args.events).select((F.col("id") + i * args.events).alias("seq"))
        offset = (F.col("seq") * 7919) % args.step - (F.col("seq") * 104729) % args.disorder
        rows = ids.select(
            "seq",
            (F.col("seq") % args.keys).cast("string").alias("k"),
            (F.col("seq") % 100).alias("v"),
            F.timestamp_millis(F.greatest(F.lit(0), F.lit(i * args.step) + offset)).alias("ts"),
        )
        start = time.monotonic()
        result = rt.run_batch(p, f"b{i:04d}", rows)
        seconds.append(round(time.monotonic() - start, 2))
        emitted += result.emitted
        print(f"batch {i}: {seconds[-1]} s, {result.emitted} windows", flush=True)
    line = {
        "label": args.label,
        "framework": str(Path(framework.__file__).parent),
        "events": args.events,
        "keys": args.keys,
        "median_s": statistics.median(seconds[2:]),
        "seconds": seconds,
        "emitted": emitted,
    }
    print(json.dumps(line))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("a") as out:
        out.write(json.dumps(line) + "\n")


if __name__ == "__main__":
    main()
