"""Per-batch time of the engine on a synthetic stream (the issue-2 number: a 100k-record batch).

    .venv/bin/python bench/batch_size.py --records 100000 --batches 3

Prints one line per batch and a JSON summary; no timing is asserted anywhere.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from datetime import timedelta as td

from pyspark.sql import functions as F

from framework import BufferConfig, Pipeline, Runtime, Suppressed, TimeWindows, agg, spark_session


def batch(spark, index: int, records: int, keys: int, span_ms: int):
    """``records`` events over ``keys`` keys, event times spread over ``span_ms`` with jitter."""
    base = (index + 1) * span_ms
    return spark.range(records).select(
        (F.col("id") + index * records).alias("seq"),
        (F.col("id") % keys).cast("string").alias("user_id"),
        F.timestamp_millis(
            F.lit(base) + F.floor(F.col("id") * span_ms / records).cast("long") - (F.col("id") * 7919 % 600_000)
        ).alias("ts"),
        (F.col("id") % 100).alias("amount"),
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--keys", type=int, default=1_000)
    ap.add_argument("--batches", type=int, default=3)
    args = ap.parse_args()
    spark = spark_session("bench-batch")
    p = (
        Pipeline("bench", timestamp="ts", arrival="seq")
        .group_by("user_id")
        .windowed_by(TimeWindows.of_size_and_grace(td(hours=1), td(minutes=10)))
        .aggregate(agg.count("events"), agg.sum("amount", "total"))
        .suppress(Suppressed.until_window_closes(BufferConfig.unbounded()))
        .to("hourly")
    )
    rt = Runtime(spark, tempfile.mkdtemp(prefix="bench-"), quality=False)
    times = []
    for i in range(args.batches):
        df = batch(spark, i, args.records, args.keys, 3_600_000).localCheckpoint()
        start = time.monotonic()
        r = rt.run_batch(p, f"b{i:04d}", df)
        times.append(time.monotonic() - start)
        print(f"batch {i}: {times[-1]:.1f}s emitted={r.emitted} late={r.dropped_late} open={r.metrics['windows_open']}")
    print(
        json.dumps(
            {
                "records_per_batch": args.records,
                "keys": args.keys,
                "seconds": [round(t, 2) for t in times],
                "median_s": sorted(times)[len(times) // 2],
            }
        )
    )


if __name__ == "__main__":
    main()
