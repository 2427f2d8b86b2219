"""Results leaving the engine: shaping rows for the sink and publishing them once.

Final-results sinks are append-only (one row per key and window, ever), and so are rate-limited
ones (a log: a key appears once per emission); sinks without suppression are continuously
updated tables, MERGEd on key and window (Kafka's emit-on-update at batch granularity), whose
rows carry ``_gone`` (delete) until published.

A batch stages its sink rows before its commit point and publishes them after it (see
``framework.operations.attempt``): publishing is idempotent, so whoever finds a committed batch
unpublished can publish it again.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from ..definition.columns import EMITTED_AT, GONE, INTERVAL
from ..definition.names import EMITTED_COLUMNS, TOMBSTONE
from ..definition.pipeline import Pipeline
from . import tables, writes


def shape(p: Pipeline, results: DataFrame, batch_id: str | Column, stream_time: int | Column | None) -> DataFrame:
    """Sink rows: keys, window bounds as timestamps, aggregates, stateless steps, emission stamp
    (the batch and its stream time after it; columns, in a chunk of a range, whose rows each
    name the interval that emitted them and keep its ``INTERVAL``)."""
    df = results
    for c in ("window_start", "window_end"):
        if c in df.columns:
            df = df.withColumn(c, F.timestamp_millis(F.col(c)))
    gone = F.col(GONE)
    df = df.withColumn(GONE, gone)
    for step in p.steps:
        if step.op == "filter":
            df = df.filter(F.expr(step.args[0]))
        elif step.op == "with_column":
            df = df.withColumn(step.args[0], F.expr(step.args[1]))
        else:
            df = df.select(*step.args, GONE, *[c for c in (EMITTED_AT, INTERVAL) if c in df.columns])
    stamp = F.timestamp_millis(F.lit(stream_time)) if stream_time is not None else F.lit(None).cast("timestamp")
    if EMITTED_AT in df.columns:  # rate-limited updates leave record by record: each has its own stream time
        stamp = F.timestamp_millis(EMITTED_AT)
    batch_column, time_column = EMITTED_COLUMNS
    return df.withColumn(batch_column, F.lit(batch_id)).withColumn(time_column, stamp).drop(EMITTED_AT)


def staged(p: Pipeline, rows: DataFrame) -> DataFrame:
    """What a batch stages for its sink: the rows, with ``_gone`` for a MERGEd sink, or as
    ``tombstone`` in a rate-limited log of sessions (a merge or extension replaced that session)."""
    if not p.emission.appended:
        return rows
    if p.emission.buffered and p.windows is not None and p.windows.merges:
        return rows.withColumnRenamed(GONE, TOMBSTONE)
    return rows.drop(GONE)


def publish(p: Pipeline, rows: DataFrame, path: str, seq: int, tag: str, tombstones: bool = False) -> None:
    """Publish committed batch ``seq``'s staged rows to the sink at ``path``, once: Delta skips
    the write if batch ``seq`` (or a later one) was published already. ``tombstones`` keeps
    deleted windows as ``_gone`` rows (a replay's staged sink, published later in one MERGE)."""
    spark = rows.sparkSession
    if p.emission.appended:
        writes.save(rows, path, tag, txnAppId=writes.LEDGER_APP, txnVersion=str(seq))
        return
    writes.tagged(spark, path, tag, lambda: merge(p, rows, path, tombstones), txn_version=seq)


def merge(p: Pipeline, rows: DataFrame, path: str, tombstones: bool = False) -> None:
    """Upsert ``rows`` into a MERGEd sink: a ``_gone`` row deletes its window (or, with
    ``tombstones``, is kept as it is)."""
    spark = rows.sparkSession
    kept = rows if tombstones else rows.drop(GONE)
    tables.create(spark, path, kept.schema)
    update, insert = tables.update_all(kept.columns), tables.insert_all(kept.columns)
    if tombstones:
        clauses = [f"WHEN MATCHED THEN {update}", f"WHEN NOT MATCHED THEN {insert}"]
    else:
        clauses = [
            f"WHEN MATCHED AND s.{GONE} THEN DELETE",
            f"WHEN MATCHED THEN {update}",
            f"WHEN NOT MATCHED AND NOT s.{GONE} THEN {insert}",
        ]
    tables.merge(spark, path, rows, tables.matching(p.identity), clauses)


def replace_all(p: Pipeline, changes: DataFrame, path: str, base: int | None, tag: str, once: dict) -> None:
    """A MERGEd sink as of version ``base`` (None: empty) with ``changes`` (rows with ``_gone``)
    applied, written over the sink in one commit: a replay's publication."""
    spark = changes.sparkSession
    kept = changes.filter(~F.col(GONE)).drop(GONE)
    if base is not None:
        kept = (
            tables.read(spark, path, base).join(changes.select(*p.identity), p.identity, "left_anti").unionByName(kept)
        )
    tables.create(spark, path, kept.schema)
    writes.save(kept.localCheckpoint(), path, tag, "overwrite", **once)
