"""The plan of a plain (non-windowed) table: one state row per key, merged in place; rows never close."""

from __future__ import annotations

from pyspark.sql import functions as F

from ...definition.columns import BUCKET, CLOSE, GONE, MAX_TS, TS
from ..batch import Batch, Effect, finished, late_rows, lateness, merges, partial_updates, partials, wants_updates

NEVER = 2**62  # close time of a plain table's rows: they never close


def plan(b: Batch) -> Effect:
    p = b.pipeline
    keys = list(p.keys)
    batch_partials = (
        b.records.groupBy(*keys)
        .agg(*partials(p), F.max(TS).alias(MAX_TS))
        .withColumn(CLOSE, F.lit(NEVER))
        .withColumn(BUCKET, F.lit(NEVER // b.bucket_ms))
    )
    stored = b.stored(batch_partials)
    touched = b.keep_stored(stored.join(batch_partials.select(*keys), keys, "left_semi"))  # read once
    merged = (
        touched.unionByName(batch_partials)
        .groupBy(*keys, CLOSE, BUCKET)
        .agg(*merges(p), F.max(MAX_TS).alias(MAX_TS))
        .select(*batch_partials.columns)
    )
    changes = merged.withColumn(GONE, F.lit(False))
    counted = b.records.withColumn("_one", F.lit(1))
    counters = {"late_record_drop_total": F.lit(0).cast("long"), "late_records": F.lit(0).cast("long"), **lateness()}
    still_open = stored.select(*keys).unionByName(batch_partials.select(*keys)).distinct()
    return Effect(
        state_changes=changes,
        state_rewrite=None,
        results=merged.select(*keys, *finished(p), F.lit(False).alias(GONE)),
        late=late_rows(b, counted.limit(0)),
        closed=merged.limit(0),
        counted=counted,
        counters=counters,
        open_windows=still_open,
        opened=batch_partials.select(*keys).join(touched, keys, "left_anti"),
        updates=partial_updates(b, b.records, touched) if wants_updates(p) else None,
    )
