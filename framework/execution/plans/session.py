"""The plan of KIP-94 session windows (``SessionWindows``).

The fold (``fold.Sessions``) decides, record by record in arrival order, which session each
record joins, extends or merges, from the open sessions its key holds. A session is named by
both bounds (``SessionWindows.bounds``): an extension or a merge makes a new session, and the
ones it replaced are deleted from state (``GONE``)."""

from __future__ import annotations

from functools import partial

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from ...definition.columns import (
    ARRIVAL_POS,
    BUCKET,
    CLOSE,
    GONE,
    INTERVAL,
    MAX_TS,
    POS,
    STEP,
    STREAM_AFTER,
    STREAM_BEFORE,
    TS,
    UPDATED_AT,
)
from ...definition.windows import SessionWindows
from .. import fold
from ..batch import Batch, Effect, counters, finished, late_rows, merges, partial_names, partials, wants_updates


def plan(b: Batch, w: SessionWindows) -> Effect:
    p = b.pipeline
    keys, ident = list(p.keys), p.identity
    stored = b.open_state(b.record_windows(w, b.records))
    touched_keys = b.records.select(*keys).distinct()
    old = b.keep_stored(stored.join(touched_keys, keys, "left_semi"))  # read by the fold, the merge, the gone sessions
    held = old.select(
        *keys,
        F.col("window_start").alias(fold.ID),
        F.col("window_start").alias(fold.A),
        F.col("window_end").alias(fold.B),
    )
    forwards = wants_updates(p)
    folded = fold.run(held, b.records, keys, partial(fold.Sessions, w, updates=forwards))
    assigned = folded.filter(F.col("_at").isNull()).drop("_at", "_step")

    recs = b.records.withColumn("_id", F.col(ARRIVAL_POS))
    # each record with the session it landed in (none: late), joined once: the partials, the
    # counters, the late records and a chunk's count of open sessions read it (a join each was a chunk's
    # costliest work: a sort of every record, three times), on the record's position alone,
    # which is unique (sorting by key first compared most pairs of rows column by column)
    assignments = assigned.filter(f"_member = {fold.RECORD}").select("_id", "_start", "_end", "_opens")
    landed = b.keep(recs.join(assignments, "_id", "left"))
    late = F.col("_start").isNull()
    rec_assign = landed.filter(~late)
    rec_partials = rec_assign.groupBy(*keys, "_start", "_end").agg(*partials(p), F.max(TS).alias(MAX_TS))
    old_assign = (
        old.withColumn("_id", F.col("window_start"))
        .join(assigned.filter(f"_member = {fold.HELD}").drop("_member"), [*keys, "_id"])
        .select(*keys, "_start", "_end", *partial_names(p), MAX_TS)
    )
    merged = (
        rec_partials.unionByName(old_assign)
        .groupBy(*keys, "_start", "_end")
        .agg(*merges(p), F.max(MAX_TS).alias(MAX_TS))
        .withColumnRenamed("_start", "window_start")
        .withColumnRenamed("_end", "window_end")
        .withColumn(CLOSE, w.close(F.col("window_end")))
    )
    merged = b.keep(merged.withColumn(BUCKET, b.bucket()).select(*stored.columns))
    gone = old.join(merged.select(*ident), ident, "left_anti")  # merged away, or extended
    closing = stored.filter(F.col(CLOSE) <= b.time_after).join(touched_keys, keys, "left_anti")
    changes = b.keep(  # read by the results, the closed and open windows and the state's MERGE
        merged.withColumn(GONE, F.lit(False))
        .unionByName(gone.withColumn(GONE, F.lit(True)))
        .unionByName(closing.withColumn(GONE, F.lit(False)))
    )
    kept_as_is = stored.join(changes.select(*ident), ident, "left_anti").filter(F.col(CLOSE) > b.time_after)
    still_open = kept_as_is.select(*ident).unionByName(
        changes.filter(~F.col(GONE) & (F.col(CLOSE) > b.time_after)).select(*ident)
    )
    return Effect(
        state_changes=changes,
        state_rewrite=None,
        results=_results(b, changes, merged),
        late=late_rows(b, landed.filter(late)),
        closed=changes.filter(~F.col(GONE) & (F.col(CLOSE) <= b.time_after)),
        counted=landed,
        counters=counters(F.when(late, 1).otherwise(0), late),
        open_windows=still_open,
        # what the open sessions' count changes by, from the touched keys' sessions alone
        # (counting ``still_open`` reads every open session)
        opened=merged.select(*ident).join(old.select(*ident), ident, "left_anti"),
        replaced=gone.select(*ident),
        updates=_updates(b, folded, recs, old) if forwards else None,
        opens=landed if INTERVAL in recs.columns else None,
    )


def _results(b: Batch, changes: DataFrame, touched: DataFrame) -> DataFrame:
    """Rows for the sink: closed sessions (final results), or every touched session and a
    deletion (``GONE``) of each one it replaced (updates)."""
    p = b.pipeline
    cols: list[str | Column] = [*p.keys, "window_start", "window_end", *finished(p), GONE]
    closed = changes.filter(~F.col(GONE) & (F.col(CLOSE) <= b.time_after))
    changed = touched.withColumn(GONE, F.lit(False)).unionByName(changes.filter(F.col(GONE)))
    return p.emission.pick(closed, changed).select(*cols)


def _updates(b: Batch, folded: DataFrame, recs: DataFrame, old: DataFrame) -> DataFrame:
    """Kafka's forwards (``fold.Sessions``) as updates, one row each at position ``POS`` in
    order ``STEP``: a merged-away or extended session's tombstone (``GONE``, no partials), or
    the record's session with its partials then (the stored partials of the sessions it holds
    merged with its records'), stamped with the session's end."""
    p = b.pipeline
    keys = list(p.keys)
    forwards = folded.filter(F.col("_at").isNotNull()).select(
        *keys,
        F.col("_start").alias("window_start"),
        F.col("_end").alias("window_end"),
        F.col("_at").alias(POS),
        F.col("_step").alias(STEP),
        "_member",
        "_id",
    )
    entry = [*keys, "window_start", "window_end", POS, STEP]
    member = F.col("_member")
    from_records = forwards.filter(member == fold.RECORD).join(recs, [*keys, "_id"]).groupBy(*entry).agg(*partials(p))
    from_held = (
        forwards.filter(member == fold.HELD)
        .join(old.select(*keys, F.col("window_start").alias("_id"), *partial_names(p)), [*keys, "_id"])
        .select(*entry, *partial_names(p))
    )
    puts = from_records.unionByName(from_held).groupBy(*entry).agg(*merges(p))
    tombstones = forwards.filter(member == fold.TOMBSTONE).select(
        *entry, *[F.lit(None).cast(puts.schema[c].dataType).alias(c) for c in partial_names(p)]
    )
    stream_times = b.records.select(
        F.col(ARRIVAL_POS).alias(POS), STREAM_BEFORE, F.greatest(STREAM_BEFORE, TS).alias(STREAM_AFTER)
    )
    return (
        puts.withColumn(GONE, F.lit(False))
        .unionByName(tombstones.withColumn(GONE, F.lit(True)))
        .join(stream_times, POS)
        .select(*entry, STREAM_BEFORE, STREAM_AFTER, F.col("window_end").alias(UPDATED_AT), GONE, *partial_names(p))
    )
