"""Throughput of rate-limiting suppression (``until_time_limit``): the per-key buffer (unbounded)
side by side with the eager size-bounded one, which evicts across keys in arrival order in one task.

    .venv/bin/python bench/rate_limit.py --records 200000 --batches 3

Per-batch seconds and records/s for each buffer over the same batches, and the ratio
eager / per-key; a plain un-suppressed table over the same input is the floor. No timing is
asserted anywhere.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from datetime import timedelta as td

from batch_size import batch

from framework import BufferConfig, Pipeline, Runtime, Suppressed, agg, spark_session

BUFFERS = {
    "none": None,
    "per_key": BufferConfig.unbounded(),
    "eager": BufferConfig.max_records(500).emit_early_when_full(),
}


def pipeline(label: str) -> Pipeline:
    p = (
        Pipeline(f"rate_{label}", timestamp="ts", arrival="seq")
        .group_by("user_id")
        .aggregate(agg.latest("amount", "amount"), agg.count("events"))
    )
    if BUFFERS[label] is not None:
        p = p.suppress(Suppressed.until_time_limit(td(minutes=5), BUFFERS[label]))
    return p.to("updates")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--keys", type=int, default=1_000)
    ap.add_argument("--batches", type=int, default=3)
    args = ap.parse_args()
    spark = spark_session("bench-rate-limit")
    lake = tempfile.mkdtemp(prefix="bench-rate-")
    seconds: dict[str, list[float]] = {label: [] for label in BUFFERS}
    for i in range(args.batches):
        df = batch(spark, i, args.records, args.keys, 3_600_000).localCheckpoint()
        for label in BUFFERS:
            rt = Runtime(spark, lake, quality=False)
            start = time.monotonic()
            r = rt.run_batch(pipeline(label), f"b{i:04d}", df)
            seconds[label].append(time.monotonic() - start)
            print(
                f"batch {i} {label}: {seconds[label][-1]:.1f}s emitted={r.emitted} "
                f"buffered={r.metrics.get('suppression_buffer_count_current')}",
                flush=True,
            )
    median = {label: sorted(s)[len(s) // 2] for label, s in seconds.items()}
    print(
        json.dumps(
            {
                "records_per_batch": args.records,
                "keys": args.keys,
                "median_s": {k: round(v, 2) for k, v in median.items()},
                "records_per_s": {k: round(args.records / v) for k, v in median.items()},
                "eager_over_per_key": round(median["eager"] / median["per_key"], 2),
                "per_key_over_none": round(median["per_key"] / median["none"], 2),
            }
        )
    )


if __name__ == "__main__":
    main()
