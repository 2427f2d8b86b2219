"""State retention over many batches: does a pipeline's state, or its batch time, grow with the
number of batches it has run? (issue: no unbounded growth across 1,000 batches)

    .venv/bin/python bench/retention.py --batches 1000

Each batch brings ``--keys`` records, one per key, one window size later in event time than the
last, so every batch opens a window per key and closes the previous batch's, and one late
record. After every batch it records the batch's seconds, the open windows it reported and
the tables Delta checkpointed in it; every ``--sizes-every`` batches also the rows and live
files of window state, its Delta log's commit files, and the live files of the ledger, metrics
and late-records tables (compacted every ``framework.storage.compaction.EVERY`` batches) and of
the results table. It writes JSON lines (``--out``), prints a progress line every 10 batches,
and at the end the median batch time of batches 100-199 and of the last 100. With ``--gate``
the batches run with the quality gate on (each batch's rows audited) and after each one the
results table is validated as a DAG's job does for its quality-gate task
(``validation.after_run``), timed on its own (``gate_seconds``). Nothing is asserted;
``tests/test_retention.py`` checks the invariant (state rows = open windows) on a few batches.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from delta.tables import DeltaTable
from pyspark.sql import functions as F

from framework import BufferConfig, Pipeline, Runtime, Suppressed, TimeWindows, agg, spark_session
from framework.definition.columns import BUCKET, LATE_BUCKET, LEDGER_BUCKET
from framework.operations import validation

SIZE_MS, GRACE_MS = 10_000, 2_000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", type=int, default=1000)
    ap.add_argument("--keys", type=int, default=100)
    ap.add_argument("--sizes-every", type=int, default=10, help="measure table sizes every N batches")
    ap.add_argument("--gate", action="store_true", help="the quality gate on, and the table validated after each batch")
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "retention.jsonl")
    args = ap.parse_args()
    spark = spark_session("bench-retention")
    warehouse = tempfile.mkdtemp(prefix="retention-")
    rt = Runtime(spark, warehouse, quality=args.gate)
    p = (
        Pipeline("retention", timestamp="ts", arrival="seq")
        .group_by("k")
        .windowed_by(TimeWindows.of_size_and_grace(SIZE_MS, GRACE_MS))
        .aggregate(agg.count("n"))
        .suppress(Suppressed.until_window_closes(BufferConfig.unbounded()))
        .to("out")
    )
    tables = rt.tables(p)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    seconds_of: list[float] = []
    gate_of: list[float] = []
    with args.out.open("w") as out:
        for i in range(args.batches):
            rows = spark.range(args.keys + 1).select(
                (F.col("id") + i * (args.keys + 1)).alias("seq"),
                F.col("id").cast("string").alias("k"),
                # the last record is late (event time 0) from the third batch on
                F.timestamp_millis(F.when(F.col("id") < args.keys, F.lit(i * SIZE_MS + 1)).otherwise(0)).alias("ts"),
            )
            before = _checkpoints(tables)
            start = time.monotonic()
            result = rt.run_batch(p, f"b{i:06d}", rows)
            seconds = time.monotonic() - start
            line = {
                "batch": i,
                "seconds": round(seconds, 3),
                **({"gate_seconds": _gate(spark, p, warehouse, result, gate_of)} if args.gate else {}),
                "open": result.metrics["windows_open"],
                "emitted": result.emitted,
                "checkpointed": sorted(name for name, n in _checkpoints(tables).items() if n > before.get(name, 0)),
            }
            if i % args.sizes_every == 0 or i == args.batches - 1:
                line.update(_sizes(spark, tables))
            seconds_of.append(seconds)
            out.write(json.dumps(line) + "\n")
            out.flush()
            if i % 10 == 0 or i == args.batches - 1:
                print(json.dumps(line), flush=True)
    if len(seconds_of) >= 300:
        early, late = statistics.median(seconds_of[100:200]), statistics.median(seconds_of[-100:])
        print(f"median batch: batches 100-199 {early:.2f} s, last 100 {late:.2f} s ({late / early - 1:+.1%})")
    if len(gate_of) >= 300:
        early, late = statistics.median(gate_of[100:200]), statistics.median(gate_of[-100:])
        print(f"median gate: batches 100-199 {early:.2f} s, last 100 {late:.2f} s ({late / early - 1:+.1%})")


def _gate(spark, p, warehouse: str, result, seconds_of: list[float]) -> float:
    """Validate the results table after ``result`` as a DAG's job does; its seconds."""
    start = time.monotonic()
    validation.after_run(spark, p, warehouse, result)
    seconds_of.append(round(time.monotonic() - start, 3))
    return seconds_of[-1]


def _sizes(spark, tables) -> dict:
    """Window rows of ``_state`` and the live files of each of its partitions (window state,
    ledger, late records), its bytes and Delta log's commit files, and the results table's live
    files (measured outside the batch's time: each is a Spark job)."""
    state = spark.read.format("delta").load(tables.state)
    windows = state.filter(F.col(BUCKET) >= 0)

    def files(rows) -> int:
        return len(rows.inputFiles())

    return {
        "state_rows": windows.count(),
        "state_files": files(windows),
        "ledger_files": files(state.filter(F.col(BUCKET) == LEDGER_BUCKET)),
        "late_files": files(state.filter(F.col(BUCKET) == LATE_BUCKET)),
        "state_bytes": DeltaTable.forPath(spark, tables.state).detail().first().sizeInBytes,
        "state_commits": len(list(Path(tables.state, "_delta_log").glob("*.json"))),
        "out_files": DeltaTable.forPath(spark, tables.output).detail().first().numFiles
        if DeltaTable.isDeltaTable(spark, tables.output)
        else 0,
    }


def _named(tables) -> dict[str, str]:
    return {"state": tables.state, "out": tables.output}


def _checkpoints(tables) -> dict[str, int]:
    """Checkpoint files in each table's Delta log."""
    return {
        name: len(list(Path(path, "_delta_log").glob("*.checkpoint*.parquet"))) for name, path in _named(tables).items()
    }


if __name__ == "__main__":
    main()
