"""Execution: turn one batch plus the previous state into state changes and results.

Pure DataFrame plans, no writes (``storage.state`` and ``storage.sinks`` write what an
attempt, ``operations.attempt``, planned). Two strategies:

- time windows and plain tables: records are assigned to windows with SQL array functions,
  aggregated into partial columns and merged with the stored partials;
- session and sliding windows: a fold over each key's rows in arrival order (``fold``) decides
  which sessions a record joins or merges, or which sliding windows it updates and creates (as
  Kafka Streams does, from the windows the key holds); aggregation stays in SQL.

A record joins window w only while ``close_time(w) > stream time before the record`` (docs/design.md#lateness);
each window type says when its windows close (``Windows.close``). Rate limiting comes after, on
the ``Effect`` (``ratelimit``). The plan's value types live in ``batch``; ``Batch`` and
``Effect`` are named here too, as callers plan batches through this module.
"""

from __future__ import annotations

from functools import partial
from typing import Any, Callable

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from ..definition.columns import (
    ARRIVAL,
    ARRIVAL_POS,
    BUCKET,
    CLOSE,
    GONE,
    MAX_TS,
    N_OPEN_STARTS,
    N_STARTS,
    OPEN_STARTS,
    POS,
    STARTS,
    STEP,
    STREAM_AFTER,
    STREAM_BEFORE,
    TOUCH,
    TS,
)
from ..definition.pipeline import Pipeline
from ..definition.windows import SessionWindows, SlidingWindows, TimeWindows
from . import fold
from .batch import Batch, Effect, finished, merges, partial_names, partials
from .streamtime import NO_TIME

__all__ = ["NO_TIME", "Batch", "Effect", "assign", "effect_of", "needs_order"]

NEVER = 2**62  # close time of a plain (non-windowed) table's rows: they never close


def _bucket(b: Batch) -> Column:
    return F.floor(F.col(CLOSE) / b.bucket_ms).cast("long")


def _window_cols(p: Pipeline) -> list[str]:
    return ["window_start", "window_end"] if p.windows is not None else []


def _lateness(b: Batch) -> dict[str, Column]:
    late_by = F.when(F.col(STREAM_BEFORE) > F.col(TS), F.col(STREAM_BEFORE) - F.col(TS)).otherwise(0)
    return {"record_lateness_avg": F.avg(late_by).cast("double"), "record_lateness_max": F.max(late_by).cast("double")}


def _counters(b: Batch, dropped: Column, late: Column) -> dict[str, Column]:
    """A windowed plan's counters over its per-record frame: the windows each record was too
    late for (Kafka's drop metric counts each), the records too late for every window, lateness."""
    return {
        "late_record_drop_total": F.sum(dropped),
        "late_records": F.sum(F.when(late, 1).otherwise(0)),
        **_lateness(b),
    }


def _one_record_windows(b: Batch, w: SessionWindows | SlidingWindows, recs: DataFrame) -> DataFrame:
    """A window per key and event time holding its records: the stored windows' shape, which
    reading them (``_stored``, ``_open_state``) takes."""
    return (
        recs.groupBy(*b.pipeline.keys, F.col(TS).alias("window_start"), F.col(TS).alias("window_end"))
        .agg(*partials(b.pipeline), F.max(TS).alias(MAX_TS))
        .withColumn(CLOSE, w.close(F.col("window_end")))
        .withColumn(BUCKET, _bucket(b))
    )


def needs_order(p: Pipeline) -> bool:
    """Whether a plan needs each record's arrival position and the stream time just before it
    (a scan over the batch in arrival order): per-record lateness, sessions, sliding windows,
    rate limiting and order-sensitive aggregates do; time windows judged per batch do not."""
    ordered = any(a.ordered for a in p.aggregates)
    in_order = p.windows is not None and p.windows.scans_in_order
    return p.lateness == "record" or ordered or p.rate_limited or in_order


def effect_of(b: Batch) -> Effect:
    """The effect of batch ``b`` for its pipeline's window type."""
    w = b.pipeline.windows
    return _plain_table(b) if w is None else PLANS[w.kind](b, w)


# ---- time windows ----------------------------------------------------------------------------
def _time_windows(b: Batch, w: TimeWindows) -> Effect:
    """Windowed state is a log of partial rows (one per window and batch that touched it),
    merged when the window closes: a batch appends its partials and rewrites only the buckets
    that are due, so it never rewrites open windows it did not touch."""
    p = b.pipeline
    ident = [*p.keys, "window_start"]
    assigned = assign(b.records, w)
    batch_partials = b.keep(
        assigned.withColumn("window_start", F.explode(OPEN_STARTS))
        .groupBy(*ident)
        .agg(*partials(p), F.max(TS).alias(MAX_TS))
        .withColumn("window_end", F.col("window_start") + w.size_ms)
        .withColumn(CLOSE, w.close(F.col("window_end")))
        .withColumn(BUCKET, _bucket(b))
    )
    due_bucket = b.time_after // b.bucket_ms
    stored = _stored(b, batch_partials)
    rows = stored.filter(F.col(BUCKET) <= due_bucket).unionByName(batch_partials)
    due = F.col(CLOSE) <= b.time_after
    keep = rows.filter(~due)
    if p.suppressed_final:
        results = _merge_windows(p, rows.filter(due), ident)
    else:
        touched = batch_partials.select(*ident)
        results = _merge_windows(p, stored.join(touched, ident, "left_semi").unionByName(batch_partials), ident)
    results = results.select(*p.keys, "window_start", "window_end", *finished(p), F.lit(False).alias(GONE))
    counters = _counters(b, F.col(N_STARTS) - F.col(N_OPEN_STARTS), F.col(N_OPEN_STARTS) == 0)
    still_open = stored.filter(~due).unionByName(batch_partials.filter(~due)).select(*ident).distinct()
    closed = results if p.suppressed_final else rows.filter(due).select(*ident).distinct()

    return Effect(
        state_changes=None,
        state_rewrite=(keep, f"{BUCKET} <= {due_bucket}"),
        results=results,
        late=assigned.filter(F.col(N_OPEN_STARTS) == 0),
        closed=closed,
        results_are_closed=p.suppressed_final,
        counted=assigned,
        counters=counters,
        open_windows=still_open,
        opened=_new_windows(b, w, batch_partials.select(*ident)),
    )


def _new_windows(b: Batch, w: TimeWindows, windows: DataFrame) -> DataFrame:
    """Of the batch's ``windows``, those not in state before: looked up in the buckets that
    can hold a window of the batch's event times still open before it (a late record's do
    not widen the range), a literal range Delta prunes the state's partitions by (counting
    every open window would read all state)."""
    if b.state is None or b.event_times is None:
        return windows
    first, last = b.event_times
    offset = w.close_offset_ms()  # a window of event time ts closes in (ts - size + offset, ts + offset]
    earliest = max(first - w.size_ms + offset, b.time_before + 1)  # a window the batch updates closes later
    low, high = earliest // b.bucket_ms, (last + offset) // b.bucket_ms
    near = b.state.filter(F.col(BUCKET).between(F.lit(low), F.lit(high))).select(*windows.columns)
    return windows.join(near, windows.columns, "left_anti")


def assign(records: DataFrame, w: TimeWindows) -> DataFrame:
    """Records with ``STARTS`` (starts of the windows holding them) and ``OPEN_STARTS`` (those
    still open when the record arrived), and their sizes (``N_STARTS``, ``N_OPEN_STARTS``)."""
    size, adv = w.size_ms, w.advance_ms
    back = (size // adv) * adv
    every = F.expr(
        f"filter(sequence({TS} - pmod({TS}, {adv}) - {back}, {TS} - pmod({TS}, {adv}), {adv}), "
        f"s -> s >= 0 AND s > {TS} - {size})"
    )
    return (
        records.withColumn(STARTS, every)
        .withColumn(OPEN_STARTS, F.expr(f"filter({STARTS}, s -> s + {w.close_offset_ms()} > {STREAM_BEFORE})"))
        .withColumn(N_STARTS, F.size(STARTS))
        .withColumn(N_OPEN_STARTS, F.size(OPEN_STARTS))
    )


def _merge_windows(p: Pipeline, rows: DataFrame, ident: list[str]) -> DataFrame:
    """One row per window: partial rows merged."""
    return rows.groupBy(*ident, "window_end", CLOSE).agg(*merges(p), F.max(MAX_TS).alias(MAX_TS))


def _stored(b: Batch, like: DataFrame) -> DataFrame:
    """Stored state shaped like ``like``; empty before the first commit."""
    return like.limit(0) if b.state is None else b.state.select(*like.columns)


def _open_state(b: Batch, like: DataFrame) -> DataFrame:
    """Stored windows (all open: closed ones are deleted), pruned to the buckets not yet due."""
    if b.state is None:
        return like.limit(0)
    low = b.time_before // b.bucket_ms if b.time_before != NO_TIME else NO_TIME
    return b.state.filter(F.col(BUCKET) >= F.lit(low)).select(*like.columns)


# ---- plain (non-windowed) tables -------------------------------------------------------------
def _plain_table(b: Batch) -> Effect:
    """One state row per key, merged in place; rows never close."""
    p = b.pipeline
    keys = list(p.keys)
    batch_partials = (
        b.records.groupBy(*keys)
        .agg(*partials(p), F.max(TS).alias(MAX_TS))
        .withColumn(CLOSE, F.lit(NEVER))
        .withColumn(BUCKET, F.lit(NEVER // b.bucket_ms))
    )
    stored = _stored(b, batch_partials)
    merged = (
        stored.join(batch_partials.select(*keys), keys, "left_semi")
        .unionByName(batch_partials)
        .groupBy(*keys, CLOSE, BUCKET)
        .agg(*merges(p), F.max(MAX_TS).alias(MAX_TS))
        .select(*batch_partials.columns)
    )
    changes = merged.withColumn(GONE, F.lit(False))
    counted = b.records.withColumn("_one", F.lit(1))
    counters = {"late_record_drop_total": F.lit(0).cast("long"), "late_records": F.lit(0).cast("long"), **_lateness(b)}
    still_open = stored.select(*keys).unionByName(batch_partials.select(*keys)).distinct()
    return Effect(
        state_changes=changes,
        state_rewrite=None,
        results=merged.select(*keys, *finished(p), F.lit(False).alias(GONE)),
        late=counted.limit(0),
        closed=merged.limit(0),
        counted=counted,
        counters=counters,
        open_windows=still_open,
    )


def _results(b: Batch, changes: DataFrame, touched: DataFrame) -> DataFrame:
    """Rows for the sink: closed windows (final results) or every touched window (updates)."""
    p = b.pipeline
    cols: list[str | Column] = [*p.keys, *_window_cols(p), *finished(p), GONE]
    if p.suppressed_final:
        return changes.filter(~F.col(GONE) & (F.col(CLOSE) <= b.time_after)).select(*cols)
    return touched.withColumn(GONE, F.lit(False)).unionByName(changes.filter(F.col(GONE))).select(*cols)


# ---- session windows -----------------------------------------------------------------------
def _sessions(b: Batch, w: SessionWindows) -> Effect:
    p = b.pipeline
    keys = list(p.keys)
    stored = _open_state(b, _one_record_windows(b, w, b.records))
    state_cols = stored.columns
    touched_keys = b.records.select(*keys).distinct()
    old = stored.join(touched_keys, keys, "left_semi")
    held = old.select(
        *keys,
        F.col("window_start").alias(fold.ID),
        F.col("window_start").alias(fold.A),
        F.col("window_end").alias(fold.B),
    )
    folded = fold.run(held, b.records, keys, partial(fold.Sessions, w, updates=_forwards(p)))
    assigned = folded.filter(F.col("_at").isNull()).drop("_at", "_step")

    recs = b.records.withColumn("_id", F.col(ARRIVAL_POS))
    rec_assign = recs.join(assigned.filter(f"_member = {fold.RECORD}").drop("_member"), [*keys, "_id"])
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
    merged = b.keep(merged.withColumn(BUCKET, _bucket(b)).select(*state_cols))
    gone = old.join(merged.select(*keys, "window_start"), [*keys, "window_start"], "left_anti")
    closing = stored.filter(F.col(CLOSE) <= b.time_after).join(touched_keys, keys, "left_anti")
    changes = b.keep(  # read by the results, the closed and open windows and the state's MERGE
        merged.withColumn(GONE, F.lit(False))
        .unionByName(gone.withColumn(GONE, F.lit(True)))
        .unionByName(closing.withColumn(GONE, F.lit(False)))
    )
    landed = assigned.filter(f"_member = {fold.RECORD}").select(*keys, "_id", F.lit(True).alias("_landed"))
    counted = recs.join(landed, [*keys, "_id"], "left")
    late = F.col("_landed").isNull()
    counters = _counters(b, F.when(late, 1).otherwise(0), late)
    ident = [*keys, "window_start"]
    kept_as_is = stored.join(changes.select(*ident), ident, "left_anti").filter(F.col(CLOSE) > b.time_after)
    still_open = kept_as_is.select(*ident).unionByName(
        changes.filter(~F.col(GONE) & (F.col(CLOSE) > b.time_after)).select(*ident)
    )
    return Effect(
        state_changes=changes,
        state_rewrite=None,
        results=_results(b, changes, merged),
        late=counted.filter(late),
        closed=changes.filter(~F.col(GONE) & (F.col(CLOSE) <= b.time_after)),
        counted=counted,
        counters=counters,
        open_windows=still_open,
        updates=_session_forwards(p, folded, recs, old) if _forwards(p) else None,
    )


def _forwards(p: Pipeline) -> bool:
    """Whether a session plan needs Kafka's forwards record by record: for a rate-limiting
    buffer, or a bounded one (checked after every record)."""
    buf = p.suppression.buffer if p.suppression is not None else None
    return p.rate_limited or (buf is not None and (buf.record_limit is not None or buf.byte_limit is not None))


def _session_forwards(p: Pipeline, folded: DataFrame, recs: DataFrame, old: DataFrame) -> DataFrame:
    """Kafka's forwards (``fold.Sessions``), one row each at position ``POS`` in order ``STEP``:
    a merged-away or extended session's tombstone (``GONE``, no partials), or the record's
    session with its partials then (the stored partials of the sessions it holds merged with
    its records')."""
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
    return puts.withColumn(GONE, F.lit(False)).unionByName(tombstones.withColumn(GONE, F.lit(True)))


# ---- sliding windows -----------------------------------------------------------------------
def _sliding(b: Batch, w: SlidingWindows) -> Effect:
    """Window state holds the windows Kafka's store would hold (closed ones too, while a later
    record may still find its previous record through them), each with its partials. The fold
    decides which windows the batch's records update and create (``fold.Sliding``); a changed
    window's partials are those of the stored window it starts from merged with the records it
    holds."""
    p = b.pipeline
    keys = list(p.keys)
    ident = [*keys, "window_start"]
    recs = b.records.withColumn(POS, F.col(ARRIVAL_POS))
    stored = _stored(b, _one_record_windows(b, w, recs))
    old = stored.join(recs.select(*keys).distinct(), keys, "left_semi")
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
        .withColumn(BUCKET, _bucket(b))
        .select(*stored.columns)
    )
    forget = F.col("window_start") < F.lit(b.time_after - w.held_ms())
    changes = changed.withColumn(GONE, forget).unionByName(
        stored.filter(forget).join(changed.select(*ident), ident, "left_anti").withColumn(GONE, F.lit(True))
    )
    unchanged = stored.filter(F.col(BUCKET) >= F.lit(b.time_before // b.bucket_ms))
    current = changed.unionByName(unchanged.join(changed.select(*ident), ident, "left_anti"))
    closed = current.filter((F.col(CLOSE) > b.time_before) & (F.col(CLOSE) <= b.time_after))
    results = (closed if p.suppressed_final else changed).select(
        *keys, "window_start", "window_end", *finished(p), F.lit(False).alias(GONE)
    )
    updated = members.filter("_n = 1").select(*keys, POS).distinct().withColumn("_landed", F.lit(True))
    drops = folded.filter(out == fold.LANDING).select(*keys, F.col("_id").alias(POS), F.col("_n").alias("_drops"))
    counted = recs.join(drops, [*keys, POS], "left").join(updated, [*keys, POS], "left")
    late = F.col("_landed").isNull()
    counters = _counters(b, F.col("_drops"), late)
    copies = folded.filter(out == fold.COPY).select(*keys, start, F.col("_id").alias(POS))
    updates = _sliding_updates(p, w, holding, copies.join(recs, [*keys, POS]), changed_at, old)
    return Effect(
        state_changes=changes,
        state_rewrite=None,
        results=results,
        late=counted.filter(late),
        closed=closed,
        counted=counted,
        counters=counters,
        open_windows=current.filter(F.col(CLOSE) > b.time_after).select(*ident),
        updates=updates,
    )


def _sliding_updates(
    p: Pipeline, w: SlidingWindows, holding: DataFrame, copies: DataFrame, changed_at: DataFrame, old: DataFrame
) -> DataFrame:
    """Per changed window, rows whose running merge in arrival order is the window's value
    after each update (for rate limiting): its stored base first, then one per record it holds
    (``TOUCH`` where the record updated it, not where it was copied in), and one without
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


PLANS: dict[str, Callable[[Batch, Any], Effect]] = {
    TimeWindows.kind: _time_windows,
    SlidingWindows.kind: _sliding,
    SessionWindows.kind: _sessions,
}
"""The plan of each window type (``WindowType.kind``); a pipeline without windows is a plain table."""
