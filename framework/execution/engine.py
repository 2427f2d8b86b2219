"""Execution: turn one batch plus the previous state into state changes and results.

Pure DataFrame plans, no writes (writes belong to ``runtime``). Three strategies:

- time windows and plain tables: records are assigned to windows with SQL array functions,
  aggregated into partial columns and merged with the stored partials;
- session windows: one pass over each key's rows in arrival order (``mapInArrow``: sessions
  merge, closed sessions never merge again) assigns records to sessions; aggregation stays in SQL;
- sliding windows: recent records are kept; windows a record defines are derived in SQL and
  aggregated from the records they hold.

A record joins window w only while ``close_time(w) > stream time before the record`` (docs/design.md#lateness);
each window type says when its windows close (``Windows.close``). The plan's value types live in
``plan``; ``Batch`` and ``Outcome`` are named here too, as callers plan batches through this module.
"""

from __future__ import annotations

from typing import Iterator

import pyarrow as pa
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import IntegerType, LongType, StructField, StructType

from ..definition.columns import (
    ARRIVAL_POS,
    BUCKET,
    CLOSE,
    GONE,
    MAX_TS,
    N_OPEN_STARTS,
    N_STARTS,
    NEW,
    OPEN_STARTS,
    STARTS,
    STREAM_BEFORE,
    TS,
)
from ..definition.pipeline import Pipeline
from ..definition.windows import SessionWindows, SlidingWindows, TimeWindows
from .plan import Batch, Outcome, finished, merges, partial_names, partials
from .streamtime import NO_TIME

__all__ = ["NO_TIME", "Batch", "Outcome", "assign", "needs_order", "plan", "recent_records"]

NEVER = 2**62  # close time of a plain (non-windowed) table's rows: they never close
FOLD_BATCH_ROWS = 10_000  # rows of session assignments per Arrow batch a fold returns


def _bucket(b: Batch) -> Column:
    return F.floor(F.col(CLOSE) / b.bucket_ms).cast("long")


def _window_cols(p: Pipeline) -> list[str]:
    return ["window_start", "window_end"] if p.windows is not None else []


def _lateness(b: Batch) -> dict[str, Column]:
    late_by = F.when(F.col(STREAM_BEFORE) > F.col(TS), F.col(STREAM_BEFORE) - F.col(TS)).otherwise(0)
    return {"record_lateness_avg": F.avg(late_by).cast("double"), "record_lateness_max": F.max(late_by).cast("double")}


def needs_order(p: Pipeline) -> bool:
    """Whether a plan needs each record's arrival position and the stream time just before it
    (a scan over the batch in arrival order): per-record lateness, sessions, sliding windows,
    rate limiting and order-sensitive aggregates do; time windows judged per batch do not."""
    ordered = any(a.ordered for a in p.aggregates)
    return p.lateness == "record" or ordered or p.rate_limited or not isinstance(p.windows, (TimeWindows, type(None)))


def plan(b: Batch) -> Outcome:
    """The outcome of batch ``b`` for its pipeline's window type."""
    w = b.pipeline.windows
    if isinstance(w, SessionWindows):
        return _sessions(b, w)
    if isinstance(w, SlidingWindows):
        return _sliding(b, w)
    return _time_windows(b, w)


# ---- time windows ----------------------------------------------------------------------------
def _time_windows(b: Batch, w: TimeWindows | None) -> Outcome:
    """Windowed state is a log of partial rows (one per window and batch that touched it),
    merged when the window closes: a batch appends its partials and rewrites only the buckets
    that are due, so it never rewrites open windows it did not touch."""
    if w is None:
        return _plain_table(b)
    p = b.pipeline
    ident = [*p.keys, "window_start"]
    assigned = assign(b.records, w)
    batch_partials = b.cache(
        assigned.withColumn("window_start", F.explode(OPEN_STARTS))
        .groupBy(*ident)
        .agg(*partials(p), F.max(TS).alias(MAX_TS))
        .withColumn("window_end", F.col("window_start") + w.size_ms)
        .withColumn(CLOSE, w.close(F.col("window_end")))
        .withColumn(BUCKET, _bucket(b))
    )
    due_bucket = b.sta // b.bucket_ms
    stored = _stored(b, batch_partials)
    rows = stored.filter(F.col(BUCKET) <= due_bucket).unionByName(batch_partials)
    due = F.col(CLOSE) <= b.sta
    keep = rows.filter(~due)
    if p.suppressed_final:
        results = _merge_windows(p, rows.filter(due), ident)
    else:
        touched = batch_partials.select(*ident)
        results = _merge_windows(p, stored.join(touched, ident, "left_semi").unionByName(batch_partials), ident)
    results = results.select(*p.keys, "window_start", "window_end", *finished(p), F.lit(False).alias(GONE))
    counters = {
        "late_record_drop_total": F.sum(F.col(N_STARTS) - F.col(N_OPEN_STARTS)),
        "late_records": F.sum(F.when(F.col(N_OPEN_STARTS) == 0, 1).otherwise(0)),
        **_lateness(b),
    }
    still_open = stored.filter(~due).unionByName(batch_partials.filter(~due)).select(*ident).distinct()
    closed = results if p.suppressed_final else rows.filter(due).select(*ident).distinct()

    def opened() -> int:
        """Windows of the batch not in state before: a lookup in the buckets the batch touched
        and, by Delta's file statistics, the files whose range of the first key overlaps the
        batch's (counting every open window would read all state)."""
        first = F.col(p.keys[0])
        per_bucket = (
            batch_partials.groupBy(BUCKET)
            .agg(F.count(F.lit(1)).alias("n"), F.min(first).alias("lo"), F.max(first).alias("hi"))
            .collect()
        )
        windows = sum(r["n"] for r in per_bucket)
        if b.state is None or not windows:
            return windows
        near = F.col(BUCKET).isin([r[BUCKET] for r in per_bucket]) & first.between(
            F.lit(min(r["lo"] for r in per_bucket)), F.lit(max(r["hi"] for r in per_bucket))
        )
        known = (
            b.state.filter(near)
            .select(*ident)
            .join(F.broadcast(batch_partials.select(*ident)), ident, "left_semi")
            .distinct()
            .count()
        )
        return windows - known

    return Outcome(
        None,
        (keep, f"{BUCKET} <= {due_bucket}"),
        None,
        None,
        results,
        assigned.filter(F.col(N_OPEN_STARTS) == 0),
        closed,
        assigned,
        counters,
        still_open,
        opened=opened,
    )


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
    low = b.stb // b.bucket_ms if b.stb != NO_TIME else NO_TIME
    return b.state.filter(F.col(BUCKET) >= F.lit(low)).select(*like.columns)


# ---- plain (non-windowed) tables -------------------------------------------------------------
def _plain_table(b: Batch) -> Outcome:
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
    return Outcome(
        changes,
        None,
        None,
        None,
        merged.select(*keys, *finished(p), F.lit(False).alias(GONE)),
        counted.limit(0),
        merged.limit(0),
        counted,
        counters,
        still_open,
    )


def _results(b: Batch, changes: DataFrame, touched: DataFrame) -> DataFrame:
    """Rows for the sink: closed windows (final results) or every touched window (updates)."""
    p = b.pipeline
    cols: list[str | Column] = [*p.keys, *_window_cols(p), *finished(p), GONE]
    if p.suppressed_final:
        return changes.filter(~F.col(GONE) & (F.col(CLOSE) <= b.sta)).select(*cols)
    return touched.withColumn(GONE, F.lit(False)).unionByName(changes.filter(F.col(GONE))).select(*cols)


# ---- session windows -----------------------------------------------------------------------
def _sessions(b: Batch, w: SessionWindows) -> Outcome:
    p = b.pipeline
    keys = list(p.keys)
    shape = (
        b.records.groupBy(*keys, F.col(TS).alias("window_start"), F.col(TS).alias("window_end"))
        .agg(*partials(p), F.max(TS).alias(MAX_TS))
        .withColumn(CLOSE, w.close(F.col("window_end")))
        .withColumn(BUCKET, _bucket(b))
    )
    stored = _open_state(b, shape)
    state_cols = stored.columns
    touched_keys = b.records.select(*keys).distinct()
    old = stored.join(touched_keys, keys, "left_semi")
    members = old.select(
        *keys,
        F.lit(0).alias("_kind"),
        F.col("window_start").alias("_id"),
        F.col("window_start").alias("_a"),
        F.col("window_end").alias("_b"),
        F.lit(None).cast("long").alias(STREAM_BEFORE),
    ).unionByName(
        b.records.select(
            *keys,
            F.lit(1).alias("_kind"),
            F.col(ARRIVAL_POS).alias("_id"),
            F.col(TS).alias("_a"),
            F.col(TS).alias("_b"),
            STREAM_BEFORE,
        )
    )
    schema = StructType(
        [
            *(b.records.schema[k] for k in keys),
            StructField("_kind", IntegerType()),
            *(StructField(c, LongType()) for c in ("_id", "_start", "_end")),
        ]
    )
    ordered = members.repartition(*keys).sortWithinPartitions(*keys, "_kind", "_id")
    assigned = ordered.mapInArrow(
        _session_fold(keys, w.gap_ms, w.close_after_end_ms(), schema), schema
    ).localCheckpoint(eager=True)

    recs = b.records.withColumn("_id", F.col(ARRIVAL_POS))
    rec_assign = recs.join(assigned.filter("_kind = 1").drop("_kind"), [*keys, "_id"])
    rec_partials = rec_assign.groupBy(*keys, "_start", "_end").agg(*partials(p), F.max(TS).alias(MAX_TS))
    old_assign = (
        old.withColumn("_id", F.col("window_start"))
        .join(assigned.filter("_kind = 0").drop("_kind"), [*keys, "_id"])
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
    merged = merged.withColumn(BUCKET, _bucket(b)).select(*state_cols)
    gone = old.join(merged.select(*keys, "window_start"), [*keys, "window_start"], "left_anti")
    closing = stored.filter(F.col(CLOSE) <= b.sta).join(touched_keys, keys, "left_anti")
    changes = (
        merged.withColumn(GONE, F.lit(False))
        .unionByName(gone.withColumn(GONE, F.lit(True)))
        .unionByName(closing.withColumn(GONE, F.lit(False)))
    )
    landed = assigned.filter("_kind = 1").select(*keys, "_id", F.lit(True).alias("_landed"))
    counted = recs.join(landed, [*keys, "_id"], "left")
    n_late = F.sum(F.when(F.col("_landed").isNull(), 1).otherwise(0))
    counters = {"late_record_drop_total": n_late, "late_records": n_late, **_lateness(b)}
    ident = [*keys, "window_start"]
    kept_as_is = stored.join(changes.select(*ident), ident, "left_anti").filter(F.col(CLOSE) > b.sta)
    still_open = kept_as_is.select(*ident).unionByName(
        changes.filter(~F.col(GONE) & (F.col(CLOSE) > b.sta)).select(*ident)
    )
    return Outcome(
        changes,
        None,
        None,
        None,
        _results(b, changes, merged),
        counted.filter(F.col("_landed").isNull()),
        changes.filter(~F.col(GONE) & (F.col(CLOSE) <= b.sta)),
        counted,
        counters,
        still_open,
    )


def _session_fold(keys: list[str], gap: int, close_after_end: int, schema: StructType):
    """A ``mapInArrow`` function: assign open sessions and new records to sessions, key by key.

    Its input is partitioned by key and sorted by key, kind (open sessions first) and arrival,
    so one pass over the rows, in Arrow batches, sees each key's rows together. Records are
    taken in arrival order. A record joins every *open* session within ``gap`` (merging them); a
    session closed before the record arrived is left as it was emitted. A record with no open
    neighbour whose own session is already closed is late (left out). A session ending at ``end``
    closes at ``end + close_after_end`` (``SessionWindows.close``: plain ints, as the function
    runs in Python workers).
    """
    names = [*keys, "_kind", "_id", "_start", "_end"]
    arrow = to_arrow_schema(schema)

    def sessions_of(active: list, done: list, key: tuple, out: list) -> None:
        out.extend((*key, kind, ident, s[0], s[1]) for s in active + done for kind, ident in s[2])

    def to_batch(out: list) -> pa.RecordBatch:
        columns: list = list(zip(*out)) if out else [[] for _ in names]
        return pa.RecordBatch.from_arrays(
            [pa.array(c, type=arrow.field(n).type) for n, c in zip(names, columns)], schema=arrow
        )

    def fold(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        key: tuple | None = None
        active: list = []
        done: list = []
        out: list = []
        for batch in batches:
            column = {name: batch.column(name).to_pylist() for name in batch.schema.names}
            rows = zip(
                zip(*(column[k] for k in keys)), *(column[c] for c in ("_kind", "_id", "_a", "_b", STREAM_BEFORE))
            )
            for row_key, kind, ident, ts, end, sb in rows:
                if row_key != key:
                    if key is not None:
                        sessions_of(active, done, key, out)
                    key, active, done = row_key, [], []
                if kind == 0:  # an open session: [start, end, members]
                    active.append([ts, end, [(0, ident)]])
                    continue
                done += [s for s in active if s[1] + close_after_end <= sb]
                active = [s for s in active if s[1] + close_after_end > sb]
                hit = [s for s in active if s[0] - gap <= ts <= s[1] + gap]
                if not hit and ts + close_after_end <= sb:
                    continue
                joined = [
                    min([ts] + [s[0] for s in hit]),
                    max([ts] + [s[1] for s in hit]),
                    [m for s in hit for m in s[2]] + [(1, ident)],
                ]
                active = [s for s in active if all(s is not h for h in hit)] + [joined]
            if len(out) >= FOLD_BATCH_ROWS:
                yield to_batch(out)
                out = []
        if key is not None:
            sessions_of(active, done, key, out)
        yield to_batch(out)

    return fold


# ---- sliding windows -----------------------------------------------------------------------
def recent_records(b: Batch, w: SlidingWindows) -> DataFrame:
    """The kept records that may still matter (``NEW`` false, earlier in arrival order) and the
    batch's records (``NEW`` true)."""
    new = b.records.withColumn(NEW, F.lit(True))
    if b.kept_records is None:
        return new
    kept = (
        b.kept_records.filter(F.col(TS) >= F.lit(b.stb - w.retention_ms()))
        .withColumn(NEW, F.lit(False))
        .select(*new.columns)
    )
    return kept.unionByName(new)


def _sliding(b: Batch, w: SlidingWindows) -> Outcome:
    p = b.pipeline
    keys = list(p.keys)
    size = w.size_ms
    every = recent_records(b, w)

    left_start = F.greatest(F.col(TS) - size, F.lit(0))
    lefts = every.select(
        *keys, left_start.alias("window_start"), (left_start + size).alias("window_end"), STREAM_BEFORE, NEW
    )
    rights = every.select(
        *keys, (F.col(TS) + 1).alias("window_start"), (F.col(TS) + 1 + size).alias("window_end"), STREAM_BEFORE, NEW
    )
    windows = (
        lefts.unionByName(rights)
        .withColumn(CLOSE, w.close(F.col("window_end")))
        .filter(F.col(CLOSE) > F.col(STREAM_BEFORE))
        .groupBy(*keys, "window_start", "window_end", CLOSE)
        .agg(F.max(NEW).alias("_defined_new"))
    )
    if p.suppressed_final:
        due = windows.filter((F.col(CLOSE) > b.stb) & (F.col(CLOSE) <= b.sta))
    else:
        due = windows.filter(F.col(CLOSE) > b.stb)
    r = every.alias("r")
    content = due.alias("w").join(
        r,
        [F.col(f"w.{k}") == F.col(f"r.{k}") for k in keys]
        + [
            F.col(f"r.{TS}").between(F.col("w.window_start"), F.col("w.window_end")),
            F.col(f"w.{CLOSE}") > F.col(f"r.{STREAM_BEFORE}"),
        ],
    )
    grouped = (
        content.select("w.*", *[F.col(f"r.{c}") for c in every.columns if c not in keys])
        .groupBy(*keys, "window_start", "window_end", CLOSE)
        .agg(*partials(p), F.max(NEW).alias("_has_new"), F.max("_defined_new").alias("_defined_new"))
    )
    if not p.suppressed_final:
        grouped = grouped.filter(F.col("_has_new") | F.col("_defined_new"))
    results = grouped.select(*keys, "window_start", "window_end", *finished(p), F.lit(False).alias(GONE))

    left_close = w.close(left_start + size)
    is_late = w.last_close(F.col(TS)) <= F.col(STREAM_BEFORE)
    counters = {
        "late_record_drop_total": F.sum(F.when(left_close <= F.col(STREAM_BEFORE), 1).otherwise(0)),
        "late_records": F.sum(F.when(is_late, 1).otherwise(0)),
        **_lateness(b),
    }
    late = b.records.filter(is_late)
    open_windows = windows.filter(F.col(CLOSE) > b.sta)
    closed = windows.filter((F.col(CLOSE) > b.stb) & (F.col(CLOSE) <= b.sta))
    cutoff = None if b.stream_time is None else b.stream_time - w.retention_ms()
    return Outcome(None, None, b.records, cutoff, results, late, closed, b.records, counters, open_windows)
