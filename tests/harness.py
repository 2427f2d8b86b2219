"""Test helpers: streams as Python lists in, final results as Python dicts out."""

from __future__ import annotations

import functools
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta as td

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from framework import BufferConfig, Pipeline, Runtime, Suppressed, TimeWindows, agg
from framework.definition.names import quoted
from framework.operations.settings import LOCAL_FOLD_RECORDS

AGGREGATES = (
    agg.count("n"),
    agg.sum("v", "total"),
    agg.min("v", "lo"),
    agg.max("v", "hi"),
    agg.latest("v", "last"),
    agg.earliest("v", "first"),
    agg.collect_list("v", "vs"),
)


def frame(spark, batch, first_seq=0, value_type="long"):
    """A batch ``[(key, ts_ms, value), ...]`` (arrival order) as an input DataFrame."""
    rows = [(first_seq + i, k, ts, v) for i, (k, ts, v) in enumerate(batch)]
    df = spark.createDataFrame(rows, f"seq long, k string, ts_ms long, v {value_type}")
    return df.withColumn("ts", F.timestamp_millis("ts_ms")).drop("ts_ms")


def run_stream(rt: Runtime, pipeline, batches, ids=None, value_type="long"):
    """Run ``batches`` in order; batch ids sort in order (b0000, b0001, ...)."""
    out, seq = [], 0
    for i, batch in enumerate(batches):
        out.append(rt.run_batch(pipeline, (ids or _ids(len(batches)))[i], frame(rt.spark, batch, seq, value_type)))
        seq += len(batch)
    return out


def _ids(n):
    return [f"b{i:04d}" for i in range(n)]


def results(rt: Runtime, pipeline):
    """The final table as sorted dicts with window bounds and emission time in ms."""
    df = rt.read_output(pipeline)
    cols = [c for c in df.columns if c not in ("window_start", "window_end", "emitted_stream_time")]
    df = df.select(
        *cols,
        *[F.unix_millis(c).alias(c) for c in ("window_start", "window_end", "emitted_stream_time") if c in df.columns],
    )
    return sorted((r.asDict() for r in df.collect()), key=lambda r: (r["k"], r.get("window_start", 0)))


def rows_of(frames):
    """The rows of each frame (by name) as JSON strings, duplicates kept, read in one Spark query:
    a test that compares a pipeline's every table reads them in one job, not a job a table."""
    tagged = [
        df.select(
            F.lit(name).alias("_frame"),
            F.to_json(F.struct(*[F.col(quoted(c)) for c in df.columns]), {"ignoreNullFields": "false"}).alias("_row"),
        )
        for name, df in frames.items()
    ]
    found = {name: [] for name in frames}
    if tagged:
        for r in functools.reduce(DataFrame.unionByName, tagged).collect():
            found[r["_frame"]].append(r["_row"])
    return found


def expected(model_rows, batch_ids=None):
    """The reference model's output in the shape of ``results`` (AGGREGATES computed in Python)."""
    out = []
    for r in model_rows:
        vs = r["values"]
        present = [v for v in vs if v is not None]
        ids = batch_ids or _ids(r["batch"] + 1)
        out.append(
            {
                "k": r["key"],
                "window_start": r["start"],
                "window_end": r["end"],
                "n": len(vs),
                "total": sum(present) if present else None,
                "lo": min(present, default=None),
                "hi": max(present, default=None),
                "last": vs[-1],
                "first": vs[0],
                "vs": vs,
                "emitted_batch_id": ids[r["batch"]],
                "emitted_stream_time": r["stream_time"],
            }
        )
    return sorted(out, key=lambda r: (r["k"], r["window_start"]))


def in_parallel(jobs, workers=None):
    """Run independent callables at once (separate pipelines, separate Spark sessions)."""
    with ThreadPoolExecutor(max_workers=workers or len(jobs)) as pool:
        return [f.result() for f in [pool.submit(j) for j in jobs]]


def hourly(name="user_alerts"):
    """The blog's alert: hourly windows per user with 10 minutes of grace, final results only."""
    return (
        Pipeline(name, timestamp="ts", arrival="seq")
        .group_by("user_id")
        .windowed_by(TimeWindows.of_size_and_grace(td(hours=1), td(minutes=10)))
        .aggregate(agg.count("events"))
        .suppress(Suppressed.until_window_closes(BufferConfig.unbounded()))
        .to("user_alert_windows")
    )


def unsunk(name, suppressed=None, **options):
    """The test pipeline up to, not including, ``.to(...)`` (``options``: more ``Pipeline`` arguments)."""
    return (
        Pipeline(name, timestamp="ts", arrival="seq", **options)
        .group_by("k")
        .windowed_by(TimeWindows.of_size_and_grace(10, 2))
        .aggregate(agg.count("n"), agg.sum("v", "total"))
        .suppress(suppressed or Suppressed.until_window_closes(BufferConfig.unbounded()))
    )


def distributed(spark):
    """A session whose rate-limited batches fold their buffer in Spark tasks, however small (a
    small batch folds on the driver): tests run each rate-limiting case both ways."""
    session = spark.newSession()
    session.conf.set(LOCAL_FOLD_RECORDS, "0")
    return session
