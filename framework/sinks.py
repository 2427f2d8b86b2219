"""Results leaving the engine: shaping rows for the sink and writing them once.

Final-results sinks are append-only (one row per key and window, ever), and so are rate-limited
ones (a log: a key appears once per emission); sinks without
suppression are continuously updated tables, MERGEd on key and window (Kafka's
emit-on-update at batch granularity).
"""
from __future__ import annotations

from delta.tables import DeltaTable
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from . import state
from .topology import Pipeline

EMITTED = ["emitted_batch_id", "emitted_stream_time"]


def shape(p: Pipeline, results: DataFrame, batch_id: str, stream_time: int | None) -> DataFrame:
    """Sink rows: keys, window bounds as timestamps, aggregates, stateless steps, emission stamp."""
    df = results
    for c in ("window_start", "window_end"):
        if c in df.columns:
            df = df.withColumn(c, F.timestamp_millis(F.col(c)))
    gone = F.col("_gone")
    df = df.withColumn("_gone", gone)
    for step in p.steps:
        if step.op == "filter":
            df = df.filter(F.expr(step.args[0]))
        elif step.op == "with_column":
            df = df.withColumn(step.args[0], F.expr(step.args[1]))
        else:
            df = df.select(*step.args, "_gone", *(["_est"] if "_est" in df.columns else []))
    stamp = F.timestamp_millis(F.lit(stream_time)) if stream_time is not None else F.lit(None).cast("timestamp")
    if "_est" in df.columns:  # rate-limited updates leave record by record: each has its own stream time
        stamp = F.timestamp_millis("_est")
    return (df.withColumn("emitted_batch_id", F.lit(batch_id)).withColumn("emitted_stream_time", stamp)
            .drop("_est"))


def publish(p: Pipeline, rows: DataFrame, path: str, wid: state.WriteId) -> None:
    """Write a batch's sink rows exactly once (idempotent under re-runs)."""
    spark = rows.sparkSession
    if p.suppression is not None:  # final results, or a log of rate-limited updates
        state.append(rows.drop("_gone"), path, wid)
        return
    if not state.exists(spark, path):
        state.create(spark, path, rows.drop("_gone").schema)
    ident = p.identity
    on = " AND ".join(f"t.`{c}` = s.`{c}`" for c in ident)
    columns = {f"`{c}`": f"s.`{c}`" for c in rows.columns if c != "_gone"}
    state.once(spark, path, wid, lambda: (
        DeltaTable.forPath(spark, path).alias("t").merge(rows.alias("s"), on)
        .whenMatchedDelete("s._gone")
        .whenMatchedUpdate(set=columns)
        .whenNotMatchedInsert(condition="NOT s._gone", values=columns)
        .execute()))
