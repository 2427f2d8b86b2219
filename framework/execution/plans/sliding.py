"""The plan of KIP-450 sliding windows (``SlidingWindows``).

Window state holds the windows Kafka's store would hold (closed ones too, while a later record
may still find its previous record through them), each with its partials. The fold decides which
windows the batch's records update and create (``fold.Sliding``); a changed window's partials are
those of the stored window it starts from merged with the records it holds."""

from __future__ import annotations

from functools import partial

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from ...definition.columns import (
    ARRIVAL,
    ARRIVAL_POS,
    BUCKET,
    CLOSE,
    GONE,
    INTERVAL,
    MAX_TS,
    POS,
    STREAM_AFTER,
    STREAM_BEFORE,
    TOUCH,
    TS,
)
from ...definition.pipeline import Pipeline
from ...definition.windows import SlidingWindows
from .. import fold
from ..batch import (
    Batch,
    Effect,
    counters,
    finished,
    late_rows,
    merges,
    partial_names,
    partials,
    running_updates,
    wants_updates,
)
from ..streamtime import NO_TIME


def plan(b: Batch, w: SlidingWindows) -> Effect:
    p = b.pipeline
    keys = list(p.keys)
    ident = p.identity
    recs = b.records.withColumn(POS, F.col(ARRIVAL_POS))
    stored = b.stored(b.record_windows(w, recs))
    old = b.keep_stored(stored.join(recs.select(*keys).distinct(), keys, "left_semi"))  # read by the fold and the bases
    held = old.select(*keys, F.col("window_start").alias(fold.ID), F.col(MAX_TS).alias(fold.A), F.lit(0).alias(fold.B))
    folded = fold.run(held, recs, keys, partial(fold.Sliding, w))
    out, start = F.col("_out"), F.col("_start").alias("window_start")
    changed_at = folded.filter(out == fold.WINDOW).select(*keys, start, "_base", F.col("_max_ts").alias(MAX_TS))
    members = folded.filter(out == fold.MEMBER).select(*keys, start, F.col("_id").alias(POS), "_n")
    holding = members.join(recs, [*keys, POS])
    bases = changed_at.join(
        old.select(*keys, F.col("window_start").alias("_base"), *partial_names(p)), [*keys, "_base"]
    ).select(*ident, *partial_names(p))
    # read by the state changes, the results, the open windows and the counts: computed once
    changed = b.keep(
        holding.groupBy(*ident)
        .agg(*partials(p))
        .unionByName(bases)
        .groupBy(*ident)
        .agg(*merges(p))
        .join(changed_at.select(*ident, MAX_TS), ident)
        .withColumn("window_end", F.col("window_start") + w.size_ms)
        .withColumn(CLOSE, w.close(F.col("window_end")))
        .withColumn(BUCKET, b.bucket())
        .select(*stored.columns)
    )
    forget = F.col("window_start") < F.lit(max(b.time_after - w.held_ms(), NO_TIME))  # a chunk of empty intervals: none
    changes = changed.withColumn(GONE, forget).unionByName(
        stored.filter(forget).join(changed.select(*ident), ident, "left_anti").withColumn(GONE, F.lit(True))
    )
    unchanged = stored.filter(F.col(BUCKET) >= F.lit(b.time_before // b.bucket_ms))
    current = changed.unionByName(unchanged.join(changed.select(*ident), ident, "left_anti"))
    closed = current.filter((F.col(CLOSE) > b.time_before) & (F.col(CLOSE) <= b.time_after))
    results = p.emission.pick(closed, changed).select(
        *keys, "window_start", "window_end", *finished(p), F.lit(False).alias(GONE)
    )
    updated = members.filter("_n = 1").select(*keys, POS).distinct().withColumn("_landed", F.lit(True))
    drops = folded.filter(out == fold.LANDING).select(*keys, F.col("_id").alias(POS), F.col("_n").alias("_drops"))
    counted = recs.join(drops, [*keys, POS], "left").join(updated, [*keys, POS], "left")
    late = F.col("_landed").isNull()
    updates = None
    if wants_updates(p):
        copies = folded.filter(out == fold.COPY).select(*keys, start, F.col("_id").alias(POS))
        updates = running_updates(p, _update_rows(p, w, holding, copies.join(recs, [*keys, POS]), changed_at, old))
    return Effect(
        state_changes=changes,
        state_rewrite=None,
        results=results,
        late=late_rows(b, counted.filter(late)),
        closed=closed,
        counted=counted,
        counters=counters(F.col("_drops"), late),
        open_windows=current.filter(F.col(CLOSE) > b.time_after).select(*ident),
        opened=_created(recs, folded, changed_at, old, ident) if INTERVAL in recs.columns else None,
        updates=updates,
    )


def _created(recs: DataFrame, folded: DataFrame, changed_at: DataFrame, old: DataFrame, ident: list[str]) -> DataFrame:
    """A chunk's new windows (not in state before it), each with the interval that created it:
    that of the first record that landed in it, or that created it as a copy of the window
    holding later records (its right window: it holds none of its own)."""
    keys = [c for c in ident if c != "window_start"]
    out = F.col("_out")
    by: list[str | Column] = [*keys, F.col("_start").alias("window_start"), F.col("_id").alias(POS)]
    creators = folded.filter(((out == fold.MEMBER) & (F.col("_n") == 1)) | (out == fold.COPY)).select(*by)
    at = creators.join(recs.select(*keys, POS, INTERVAL), [*keys, POS])
    new = changed_at.select(*ident).join(old.select(*ident), ident, "left_anti")
    return at.groupBy(*ident).agg(F.min(INTERVAL).alias(INTERVAL)).join(new, ident, "left_semi")


def _update_rows(
    p: Pipeline, w: SlidingWindows, holding: DataFrame, copies: DataFrame, changed_at: DataFrame, old: DataFrame
) -> DataFrame:
    """Per changed window, rows whose running merge in arrival order is the window's value
    after each update (``running_updates``): its stored base first, then one per record it
    holds (``TOUCH`` where the record updated it, not where it was copied in), and one without
    partials where a record created it as a copy (an update of its own)."""
    keys = list(p.keys)
    end = F.col("window_start") + w.size_ms
    carried: list[str | Column] = [*keys, "window_start", end.alias("window_end")]
    after = F.greatest(STREAM_BEFORE, TS).alias(STREAM_AFTER)
    per_record = holding.groupBy(*carried, ARRIVAL, STREAM_BEFORE, after, TS, (F.col("_n") == 1).alias(TOUCH)).agg(
        *partials(p)
    )
    base = changed_at.join(
        old.select(*keys, F.col("window_start").alias("_base"), *partial_names(p), F.col(MAX_TS).alias(TS)),
        [*keys, "_base"],
    ).select(
        *carried,
        F.lit(None).cast(holding.schema[ARRIVAL].dataType).alias(ARRIVAL),
        *[F.lit(None).cast("long").alias(c) for c in (STREAM_BEFORE, STREAM_AFTER)],
        TS,
        F.lit(False).alias(TOUCH),
        *partial_names(p),
    )
    created = copies.select(
        *carried,
        ARRIVAL,
        STREAM_BEFORE,
        after,
        F.lit(None).cast("long").alias(TS),
        F.lit(True).alias(TOUCH),
        *[F.lit(None).cast(per_record.schema[c].dataType).alias(c) for c in partial_names(p)],
    )
    return per_record.unionByName(base).unionByName(created)
