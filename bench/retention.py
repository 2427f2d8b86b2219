"""State retention over many batches: does a pipeline's state, or its batch time, grow with the
number of batches it has run? (issue: no unbounded growth across 1,000 batches)

    .venv/bin/python bench/retention.py --batches 1000

Each batch brings ``--keys`` records, one per key, one window size later in event time than the
last, so every batch opens a window per key and closes the previous batch's. After every batch
it records the open windows the batch reported, the rows and live files of window state, the
Delta log's commit files, the live files of the ledger and metrics tables (compacted every
``framework.storage.compaction.EVERY`` batches) and the batch's seconds, as JSON lines
(``--out``), and prints a progress line every 10 batches. Nothing is asserted; ``tests/test_retention.py`` checks the
invariant (state rows = open windows) on a few batches.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from delta.tables import DeltaTable
from pyspark.sql import functions as F

from framework import BufferConfig, Pipeline, Runtime, Suppressed, TimeWindows, agg, spark_session

SIZE_MS, GRACE_MS = 10_000, 2_000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", type=int, default=1000)
    ap.add_argument("--keys", type=int, default=100)
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "retention.jsonl")
    args = ap.parse_args()
    spark = spark_session("bench-retention")
    rt = Runtime(spark, tempfile.mkdtemp(prefix="retention-"), quality=False)
    p = (
        Pipeline("retention", timestamp="ts", arrival="seq")
        .group_by("k")
        .windowed_by(TimeWindows.of_size_and_grace(SIZE_MS, GRACE_MS))
        .aggregate(agg.count("n"))
        .suppress(Suppressed.until_window_closes(BufferConfig.unbounded()))
        .to("out")
    )
    tables = rt.tables(p)
    state = tables.state
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w") as out:
        for i in range(args.batches):
            rows = spark.range(args.keys).select(
                (F.col("id") + i * args.keys).alias("seq"),
                F.col("id").cast("string").alias("k"),
                F.timestamp_millis(F.lit(i * SIZE_MS + 1)).alias("ts"),
            )
            start = time.monotonic()
            result = rt.run_batch(p, f"b{i:06d}", rows)
            seconds = time.monotonic() - start
            detail = DeltaTable.forPath(spark, state).detail().first()
            line = {
                "batch": i,
                "seconds": round(seconds, 3),
                "open": result.metrics["windows_open"],
                "emitted": result.emitted,
                "state_rows": spark.read.format("delta").load(state).count(),
                "state_files": detail.numFiles,
                "state_bytes": detail.sizeInBytes,
                "state_commits": len(list(Path(state, "_delta_log").glob("*.json"))),
                **{
                    f"{name}_files": DeltaTable.forPath(spark, path).detail().first().numFiles
                    for name, path in (("ledger", tables.ledger), ("metrics", tables.metrics))
                },
            }
            out.write(json.dumps(line) + "\n")
            out.flush()
            if i % 10 == 0 or i == args.batches - 1:
                print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
