"""Execution: turn one batch plus the previous state into state changes and results.

Pure DataFrame plans, no writes (writes belong to ``runtime``). Three strategies:

- time windows and plain tables: records are assigned to windows with SQL array functions,
  aggregated into partial columns and merged with the stored partials;
- session windows: one pass over each key's rows in arrival order (``mapInArrow``: sessions
  merge, closed sessions never merge again) assigns records to sessions; aggregation stays in SQL;
- sliding windows: recent records are kept; windows a record defines are derived in SQL and
  aggregated from the records they hold.

A record joins window w only while ``close_time(w) > stream time before the record`` (SPEC 3.1).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterator

import pyarrow as pa
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import IntegerType, LongType, StructField, StructType

from ..definition.aggregations import ARRIVAL
from ..definition.pipeline import Pipeline
from ..definition.windows import SessionWindows, SlidingWindows, TimeWindows
from .streamtime import NO_TIME

if TYPE_CHECKING:
    from .ratelimit import Limited

NEVER = 2 ** 62  # close time of a plain (non-windowed) table's rows: they never close
FOLD_BATCH_ROWS = 10_000  # rows of session assignments per Arrow batch a fold returns


@dataclass
class Batch:
    """What one batch works from: its records (with ``_ts``, ``_sb``, ``_ord``) and state."""

    pipeline: Pipeline
    seq: int
    records: DataFrame
    stream_time_before: int | None
    stream_time: int | None
    state: DataFrame | None        # window_state as of the last committed batch
    kept_records: DataFrame | None  # sliding windows: records as of the last committed batch
    bucket_ms: int
    buffer: DataFrame | None = None  # until_time_limit: the suppression buffer as of the last committed batch
    cache: Callable[[DataFrame], DataFrame] = lambda df: df  # keeps a frame the plan reads more than once

    @property
    def stb(self) -> int:
        return NO_TIME if self.stream_time_before is None else self.stream_time_before

    @property
    def sta(self) -> int:
        return NO_TIME if self.stream_time is None else self.stream_time


@dataclass
class Outcome:
    """A batch's effect: state rows to upsert/delete, results, late records, counters."""

    state_changes: DataFrame | None   # window_state rows + ``_gone``, MERGEd: closed/gone rows deleted
    state_rewrite: tuple[DataFrame, str] | None  # or: rows written replacing the state matching a predicate
    new_records: DataFrame | None     # sliding windows: records to keep
    records_cutoff: int | None        # sliding windows: kept records older than this are dropped
    results: DataFrame                # keys, window bounds (ms), finished aggregates, ``_gone``
    late: DataFrame                   # records that landed in no window
    closed: DataFrame                 # the windows that closed in this batch
    counted: DataFrame                # per-record frame the counters aggregate over
    counters: dict[str, Column]       # aggregate expressions over ``counted`` for metrics
    open_windows: DataFrame           # windows (or keys) held in state after the batch
    limited: Limited | None = None    # until_time_limit: what the suppression buffer did (``ratelimit``)
    opened: Callable[[], int] | None = None  # time windows: how many windows the batch added to state


def partials(p: Pipeline) -> list[Column]:
    return [F.expr(x.partial).alias(x.column) for a in p.aggregates for x in a.partials]


def merges(p: Pipeline) -> list[Column]:
    return [F.expr(x.merge).alias(x.column) for a in p.aggregates for x in a.partials]


def finished(p: Pipeline) -> list[Column]:
    return [F.expr(a.finish).alias(a.name) for a in p.aggregates]


def _bucket(b: Batch) -> Column:
    return F.floor(F.col("_close") / b.bucket_ms).cast("long")


def _window_cols(p: Pipeline) -> list[str]:
    return ["window_start", "window_end"] if p.windows is not None else []


def _lateness(b: Batch) -> dict[str, Column]:
    late_by = F.when(F.col("_sb") > F.col("_ts"), F.col("_sb") - F.col("_ts")).otherwise(0)
    return {"record_lateness_avg": F.avg(late_by).cast("double"), "record_lateness_max": F.max(late_by).cast("double")}


def needs_order(p: Pipeline) -> bool:
    """Whether a plan needs each record's arrival position and the stream time just before it
    (a scan over the batch in arrival order): per-record lateness, sessions, sliding windows,
    rate limiting and order-sensitive aggregates do; time windows judged per batch do not."""
    ordered = any(ARRIVAL in x.partial for a in p.aggregates for x in a.partials)
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
    size, grace = w.size_ms, w.grace_ms
    ident = [*p.keys, "window_start"]
    assigned = assign(b.records, w)
    batch_partials = b.cache(assigned.withColumn("window_start", F.explode("_acc"))
                             .groupBy(*ident).agg(*partials(p), F.max("_ts").alias("_max_ts"))
                             .withColumn("window_end", F.col("window_start") + size)
                             .withColumn("_close", F.col("window_start") + size + grace)
                             .withColumn("_bucket", _bucket(b)))
    due_bucket = b.sta // b.bucket_ms
    stored = _stored(b, batch_partials)
    rows = stored.filter(F.col("_bucket") <= due_bucket).unionByName(batch_partials)
    due = F.col("_close") <= b.sta
    keep = rows.filter(~due)
    if p.suppressed_final:
        results = _merge_windows(p, rows.filter(due), ident)
    else:
        touched = batch_partials.select(*ident)
        results = _merge_windows(p, stored.join(touched, ident, "left_semi").unionByName(batch_partials), ident)
    results = results.select(*p.keys, "window_start", "window_end", *finished(p), F.lit(False).alias("_gone"))
    counters = {"late_record_drop_total": F.sum(F.col("_n_all") - F.col("_n_acc")),
                "late_records": F.sum(F.when(F.col("_n_acc") == 0, 1).otherwise(0)), **_lateness(b)}
    still_open = stored.filter(~due).unionByName(batch_partials.filter(~due)).select(*ident).distinct()
    closed = results if p.suppressed_final else rows.filter(due).select(*ident).distinct()

    def opened() -> int:
        """Windows of the batch not in state before: a lookup in the buckets the batch touched
        and, by Delta's file statistics, the files whose range of the first key overlaps the
        batch's (counting every open window would read all state)."""
        first = F.col(p.keys[0])
        per_bucket = batch_partials.groupBy("_bucket").agg(F.count(F.lit(1)).alias("n"), F.min(first).alias("lo"),
                                                           F.max(first).alias("hi")).collect()
        windows = sum(r["n"] for r in per_bucket)
        if b.state is None or not windows:
            return windows
        near = F.col("_bucket").isin([r["_bucket"] for r in per_bucket]) & first.between(
            F.lit(min(r["lo"] for r in per_bucket)), F.lit(max(r["hi"] for r in per_bucket)))
        known = (b.state.filter(near).select(*ident)
                 .join(F.broadcast(batch_partials.select(*ident)), ident, "left_semi").distinct().count())
        return windows - known

    return Outcome(None, (keep, f"_bucket <= {due_bucket}"), None, None, results,
                   assigned.filter(F.col("_n_acc") == 0), closed, assigned, counters, still_open, opened=opened)


def assign(records: DataFrame, w: TimeWindows) -> DataFrame:
    """Records with ``_all`` (starts of the windows holding them) and ``_acc`` (those still
    open when the record arrived), and their sizes."""
    size, adv, grace = w.size_ms, w.advance_ms, w.grace_ms
    back = (size // adv) * adv
    every = F.expr(f"filter(sequence(_ts - pmod(_ts, {adv}) - {back}, _ts - pmod(_ts, {adv}), {adv}), "
                   f"s -> s >= 0 AND s > _ts - {size})")
    return (records.withColumn("_all", every)
            .withColumn("_acc", F.expr(f"filter(_all, s -> s + {size + grace} > _sb)"))
            .withColumn("_n_all", F.size("_all")).withColumn("_n_acc", F.size("_acc")))


def _merge_windows(p: Pipeline, rows: DataFrame, ident: list[str]) -> DataFrame:
    """One row per window: partial rows merged."""
    return rows.groupBy(*ident, "window_end", "_close").agg(*merges(p), F.max("_max_ts").alias("_max_ts"))


def _stored(b: Batch, like: DataFrame) -> DataFrame:
    """Stored state shaped like ``like``; empty before the first commit."""
    return like.limit(0) if b.state is None else b.state.select(*like.columns)


def partial_names(p: Pipeline) -> list[str]:
    return [x.column for a in p.aggregates for x in a.partials]


def _open_state(b: Batch, like: DataFrame) -> DataFrame:
    """Stored windows (all open: closed ones are deleted), pruned to the buckets not yet due."""
    if b.state is None:
        return like.limit(0)
    low = b.stb // b.bucket_ms if b.stb != NO_TIME else NO_TIME
    return b.state.filter(F.col("_bucket") >= F.lit(low)).select(*like.columns)


# ---- plain (non-windowed) tables -------------------------------------------------------------
def _plain_table(b: Batch) -> Outcome:
    """One state row per key, merged in place; rows never close."""
    p = b.pipeline
    keys = list(p.keys)
    batch_partials = (b.records.groupBy(*keys).agg(*partials(p), F.max("_ts").alias("_max_ts"))
                      .withColumn("_close", F.lit(NEVER)).withColumn("_bucket", F.lit(NEVER // b.bucket_ms)))
    stored = _stored(b, batch_partials)
    merged = (stored.join(batch_partials.select(*keys), keys, "left_semi").unionByName(batch_partials)
              .groupBy(*keys, "_close", "_bucket").agg(*merges(p), F.max("_max_ts").alias("_max_ts"))
              .select(*batch_partials.columns))
    changes = merged.withColumn("_gone", F.lit(False))
    counted = b.records.withColumn("_one", F.lit(1))
    counters = {"late_record_drop_total": F.lit(0).cast("long"), "late_records": F.lit(0).cast("long"),
                **_lateness(b)}
    still_open = stored.select(*keys).unionByName(batch_partials.select(*keys)).distinct()
    return Outcome(changes, None, None, None, merged.select(*keys, *finished(p), F.lit(False).alias("_gone")),
                   counted.limit(0), merged.limit(0), counted, counters, still_open)


def _results(b: Batch, changes: DataFrame, touched: DataFrame) -> DataFrame:
    """Rows for the sink: closed windows (final results) or every touched window (updates)."""
    p = b.pipeline
    cols = [*p.keys, *_window_cols(p), *finished(p), "_gone"]
    if p.suppressed_final:
        return changes.filter(~F.col("_gone") & (F.col("_close") <= b.sta)).select(*cols)
    return touched.withColumn("_gone", F.lit(False)).unionByName(changes.filter(F.col("_gone"))).select(*cols)


# ---- session windows -----------------------------------------------------------------------
def _sessions(b: Batch, w: SessionWindows) -> Outcome:
    p = b.pipeline
    keys = list(p.keys)
    close = 1 + w.gap_ms + w.grace_ms
    shape = (b.records.groupBy(*keys, F.col("_ts").alias("window_start"), F.col("_ts").alias("window_end"))
             .agg(*partials(p), F.max("_ts").alias("_max_ts"))
             .withColumn("_close", F.col("window_end") + close).withColumn("_bucket", _bucket(b)))
    stored = _open_state(b, shape)
    state_cols = stored.columns
    touched_keys = b.records.select(*keys).distinct()
    old = stored.join(touched_keys, keys, "left_semi")
    members = (old.select(*keys, F.lit(0).alias("_kind"), F.col("window_start").alias("_id"),
                          F.col("window_start").alias("_a"), F.col("window_end").alias("_b"),
                          F.lit(None).cast("long").alias("_sb"))
               .unionByName(b.records.select(*keys, F.lit(1).alias("_kind"), F.col(f"{ARRIVAL}.pos").alias("_id"),
                                             F.col("_ts").alias("_a"), F.col("_ts").alias("_b"), "_sb")))
    schema = StructType([*(b.records.schema[k] for k in keys), StructField("_kind", IntegerType()),
                         *(StructField(c, LongType()) for c in ("_id", "_start", "_end"))])
    ordered = members.repartition(*keys).sortWithinPartitions(*keys, "_kind", "_id")
    assigned = ordered.mapInArrow(_session_fold(keys, w.gap_ms, w.grace_ms, schema), schema) \
        .localCheckpoint(eager=True)

    recs = b.records.withColumn("_id", F.col(f"{ARRIVAL}.pos"))
    rec_assign = recs.join(assigned.filter("_kind = 1").drop("_kind"), [*keys, "_id"])
    rec_partials = rec_assign.groupBy(*keys, "_start", "_end").agg(*partials(p), F.max("_ts").alias("_max_ts"))
    old_assign = (old.withColumn("_id", F.col("window_start"))
                  .join(assigned.filter("_kind = 0").drop("_kind"), [*keys, "_id"])
                  .select(*keys, "_start", "_end", *partial_names(p), "_max_ts"))
    merged = (rec_partials.unionByName(old_assign).groupBy(*keys, "_start", "_end")
              .agg(*merges(p), F.max("_max_ts").alias("_max_ts"))
              .withColumnRenamed("_start", "window_start").withColumnRenamed("_end", "window_end")
              .withColumn("_close", F.col("window_end") + close))
    merged = merged.withColumn("_bucket", _bucket(b)).select(*state_cols)
    gone = old.join(merged.select(*keys, "window_start"), [*keys, "window_start"], "left_anti")
    closing = stored.filter(F.col("_close") <= b.sta).join(touched_keys, keys, "left_anti")
    changes = (merged.withColumn("_gone", F.lit(False))
               .unionByName(gone.withColumn("_gone", F.lit(True)))
               .unionByName(closing.withColumn("_gone", F.lit(False))))
    landed = assigned.filter("_kind = 1").select(*keys, "_id", F.lit(True).alias("_landed"))
    counted = recs.join(landed, [*keys, "_id"], "left")
    n_late = F.sum(F.when(F.col("_landed").isNull(), 1).otherwise(0))
    counters = {"late_record_drop_total": n_late, "late_records": n_late, **_lateness(b)}
    ident = [*keys, "window_start"]
    kept_as_is = stored.join(changes.select(*ident), ident, "left_anti").filter(F.col("_close") > b.sta)
    still_open = kept_as_is.select(*ident).unionByName(
        changes.filter(~F.col("_gone") & (F.col("_close") > b.sta)).select(*ident))
    return Outcome(changes, None, None, None, _results(b, changes, merged),
                   counted.filter(F.col("_landed").isNull()),
                   changes.filter(~F.col("_gone") & (F.col("_close") <= b.sta)), counted, counters, still_open)


def _session_fold(keys: list[str], gap: int, grace: int, schema: StructType):
    """A ``mapInArrow`` function: assign open sessions and new records to sessions, key by key.

    Its input is partitioned by key and sorted by key, kind (open sessions first) and arrival,
    so one pass over the rows, in Arrow batches, sees each key's rows together. Records are
    taken in arrival order. A record joins every *open* session within ``gap`` (merging them); a
    session closed before the record arrived is left as it was emitted. A record with no open
    neighbour whose own session is already closed is late (left out).
    """
    names = [*keys, "_kind", "_id", "_start", "_end"]
    arrow = to_arrow_schema(schema)

    def sessions_of(active: list, done: list, key: tuple, out: list) -> None:
        out.extend((*key, kind, ident, s[0], s[1]) for s in active + done for kind, ident in s[2])

    def to_batch(out: list) -> pa.RecordBatch:
        columns = list(zip(*out)) if out else [[] for _ in names]
        return pa.RecordBatch.from_arrays([pa.array(c, type=arrow.field(n).type) for n, c in zip(names, columns)],
                                          schema=arrow)

    def fold(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        key, active, done, out = None, [], [], []
        for batch in batches:
            column = {name: batch.column(name).to_pylist() for name in batch.schema.names}
            rows = zip(zip(*(column[k] for k in keys)), *(column[c] for c in ("_kind", "_id", "_a", "_b", "_sb")))
            for row_key, kind, ident, ts, end, sb in rows:
                if row_key != key:
                    if key is not None:
                        sessions_of(active, done, key, out)
                    key, active, done = row_key, [], []
                if kind == 0:  # an open session: [start, end, members]
                    active.append([ts, end, [(0, ident)]])
                    continue
                done += [s for s in active if s[1] + 1 + gap + grace <= sb]
                active = [s for s in active if s[1] + 1 + gap + grace > sb]
                hit = [s for s in active if s[0] - gap <= ts <= s[1] + gap]
                if not hit and ts + 1 + gap + grace <= sb:
                    continue
                joined = [min([ts] + [s[0] for s in hit]), max([ts] + [s[1] for s in hit]),
                          [m for s in hit for m in s[2]] + [(1, ident)]]
                active = [s for s in active if all(s is not h for h in hit)] + [joined]
            if len(out) >= FOLD_BATCH_ROWS:
                yield to_batch(out)
                out = []
        if key is not None:
            sessions_of(active, done, key, out)
        yield to_batch(out)
    return fold


# ---- sliding windows -----------------------------------------------------------------------
def _keep_ms(w: SlidingWindows) -> int:
    """How long a record matters: until every window it is in or defines has closed."""
    return w.size_ms + 2 + w.grace_ms


def recent_records(b: Batch, w: SlidingWindows) -> DataFrame:
    """The kept records that may still matter (``_new`` false, earlier in arrival order) and the
    batch's records (``_new`` true)."""
    new = b.records.withColumn("_new", F.lit(True))
    if b.kept_records is None:
        return new
    kept = (b.kept_records.filter(F.col("_ts") >= F.lit(b.stb - _keep_ms(w)))
            .withColumn("_new", F.lit(False)).select(*new.columns))
    return kept.unionByName(new)


def _sliding(b: Batch, w: SlidingWindows) -> Outcome:
    p = b.pipeline
    keys = list(p.keys)
    size, grace = w.size_ms, w.grace_ms
    every = recent_records(b, w)

    left_start = F.greatest(F.col("_ts") - size, F.lit(0))
    lefts = every.select(*keys, left_start.alias("window_start"), (left_start + size).alias("window_end"), "_sb", "_new")
    rights = every.select(*keys, (F.col("_ts") + 1).alias("window_start"), (F.col("_ts") + 1 + size).alias("window_end"),
                          "_sb", "_new")
    windows = (lefts.unionByName(rights).withColumn("_close", F.col("window_end") + 1 + grace)
               .filter(F.col("_close") > F.col("_sb"))
               .groupBy(*keys, "window_start", "window_end", "_close").agg(F.max("_new").alias("_defined_new")))
    if p.suppressed_final:
        due = windows.filter((F.col("_close") > b.stb) & (F.col("_close") <= b.sta))
    else:
        due = windows.filter(F.col("_close") > b.stb)
    r = every.alias("r")
    content = due.alias("w").join(
        r, [F.col(f"w.{k}") == F.col(f"r.{k}") for k in keys]
        + [F.col("r._ts").between(F.col("w.window_start"), F.col("w.window_end")), F.col("w._close") > F.col("r._sb")])
    grouped = (content.select("w.*", *[F.col(f"r.{c}") for c in every.columns if c not in keys])
               .groupBy(*keys, "window_start", "window_end", "_close")
               .agg(*partials(p), F.max("_new").alias("_has_new"), F.max("_defined_new").alias("_defined_new")))
    if not p.suppressed_final:
        grouped = grouped.filter(F.col("_has_new") | F.col("_defined_new"))
    results = grouped.select(*keys, "window_start", "window_end", *finished(p), F.lit(False).alias("_gone"))

    left_close = left_start + size + 1 + grace
    counters = {"late_record_drop_total": F.sum(F.when(left_close <= F.col("_sb"), 1).otherwise(0)),
                "late_records": F.sum(F.when(F.col("_ts") + size + 1 + grace <= F.col("_sb"), 1).otherwise(0)),
                **_lateness(b)}
    late = b.records.filter(F.col("_ts") + size + 1 + grace <= F.col("_sb"))
    open_windows = windows.filter(F.col("_close") > b.sta)
    closed = windows.filter((F.col("_close") > b.stb) & (F.col("_close") <= b.sta))
    cutoff = None if b.stream_time is None else b.stream_time - _keep_ms(w)
    return Outcome(None, None, b.records, cutoff, results, late, closed, b.records, counters, open_windows)

