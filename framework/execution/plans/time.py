"""The plan of tumbling and hopping windows (``TimeWindows``): a row per record and window
holding it (``assign``), aggregated into partials.

Windowed state is a log of partial rows (one per window and batch that touched it), merged when
the window closes: a batch appends its partials and rewrites only the buckets that are due, so it
never rewrites open windows it did not touch."""

from __future__ import annotations

from typing import Callable

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from ...definition.columns import (
    BUCKET,
    CLOSE,
    GONE,
    IN_TIME,
    INTERVAL,
    MAX_TS,
    NEWEST,
    RECORD,
    RECORDS,
    STREAM_BEFORE,
    TS,
)
from ...definition.pipeline import Pipeline
from ...definition.windows import TimeWindows
from ..batch import (
    Batch,
    Effect,
    counters,
    finished,
    merges,
    partial_names,
    partial_updates,
    partials,
    record_json,
    wants_updates,
)

Observe = Callable[[DataFrame, dict[str, Column]], DataFrame]  # a frame with aggregates computed on the way


def plan(b: Batch, w: TimeWindows) -> Effect:
    p = b.pipeline
    ident = p.identity
    windowed = assign(b.records, w)
    reduced = b.reduced if b.reduced is not None else b.keep(reduce(p, w, b.records, b.input_columns))
    batch_partials = (
        reduced.filter(F.col(RECORD).isNull())
        .select(*ident, *partial_names(p), MAX_TS)
        .withColumn("window_end", F.col("window_start") + w.size_ms)
        .withColumn(CLOSE, w.close(F.col("window_end")))
        .withColumn(BUCKET, b.bucket())
    )
    batch_windows = reduced.filter(F.col(RECORD).isNull()).select(*ident, *_interval(reduced))
    due_bucket = b.time_after // b.bucket_ms
    everything = b.stored(batch_partials)  # all of state: open windows counted anew (ledgers without the count)
    near = _near_buckets(b, w)
    # One read of state feeds the plan (a Delta scan is planned per read): the due partitions
    # (the results of final windows, the rewrite) and the partitions of the batch's windows
    # (the stored ones it updates, the new ones).
    wanted = F.col(BUCKET) <= due_bucket
    if near is not None:
        wanted = wanted | F.col(BUCKET).between(F.lit(near[0]), F.lit(near[1]))
    stored = b.keep_stored(everything.filter(wanted))
    rows = stored.filter(F.col(BUCKET) <= due_bucket).unionByName(batch_partials)
    due = F.col(CLOSE) <= b.time_after
    keep = rows.filter(~due)
    touched = stored.join(batch_partials.select(*ident), ident, "left_semi")  # stored rows of the batch's windows
    results = _merge_windows(p, p.emission.pick(rows.filter(due), touched.unionByName(batch_partials)))
    results = results.select(*p.keys, "window_start", "window_end", *finished(p), F.lit(False).alias(GONE))
    if LAST_IN in reduced.columns and not p.emission.final:  # a chunk's updates: each by its window's last interval
        last = reduced.filter(F.col(RECORD).isNull()).select(*ident, F.col(LAST_IN).alias(INTERVAL))
        results = results.join(last, ident)
    still_open = everything.filter(~due).unionByName(batch_partials.filter(~due)).select(*ident).distinct()
    closed = p.emission.pick(results, rows.filter(due).select(*ident, "window_end").distinct())

    return Effect(
        state_changes=None,
        state_rewrite=(keep, f"{BUCKET} <= {due_bucket}"),
        results=results,
        late=reduced.filter(F.col(RECORD).isNotNull())
        .withColumn(RECORDS, F.explode(F.array_repeat(F.col(RECORDS), F.col(RECORDS).cast("int"))))  # a row a copy
        .select(*p.keys, F.col(MAX_TS).alias(TS), STREAM_BEFORE, RECORD, *_interval(reduced)),
        closed=closed,
        results_are_closed=p.emission.final,
        counted=windowed,
        counters=counting(),
        open_windows=still_open,
        opened=_new_windows(near, stored, batch_windows, ident),
        updates=_updates(b, w, windowed, touched) if wants_updates(p) else None,
        touched=_touched(p, windowed, ident),
    )


def _interval(df: DataFrame) -> list[str]:
    """``INTERVAL``, where ``df``'s rows carry it (a chunk of a range)."""
    return [INTERVAL] if INTERVAL in df.columns else []


def _touched(p: Pipeline, windowed: DataFrame, ident: list[str]) -> DataFrame | None:
    """A chunk's updates of a MERGEd sink: the windows each interval updated, as many as a run of
    that interval alone publishes (``Effect.touched``); None elsewhere."""
    if INTERVAL not in windowed.columns or p.emission.final:
        return None
    return windowed.filter(IN_TIME).select(*ident, INTERVAL).distinct()


def _updates(b: Batch, w: TimeWindows, windowed: DataFrame, touched: DataFrame) -> DataFrame:
    """The updates of the batch's windows, record by record (``Effect.updates``)."""
    held = windowed.filter(IN_TIME).withColumn("window_end", F.col("window_start") + w.size_ms)
    return partial_updates(b, held, touched)


def _near_buckets(b: Batch, w: TimeWindows) -> tuple[int, int] | None:
    """The state partitions that can hold a window of the batch's event times still open before
    it (a late record's do not widen the range): a literal range Delta prunes the state's
    partitions by. None before any state, or for a batch without event times."""
    if b.state is None or b.event_times is None:
        return None
    first, last = b.event_times
    offset = w.close_offset_ms()  # a window of event time ts closes in (ts - size + offset, ts + offset]
    earliest = max(first - w.size_ms + offset, b.time_before + 1)  # a window the batch updates closes later
    return earliest // b.bucket_ms, (last + offset) // b.bucket_ms


def _new_windows(near: tuple[int, int] | None, stored: DataFrame, windows: DataFrame, ident: list[str]) -> DataFrame:
    """Of the batch's ``windows`` (by identity ``ident``), those not in state before: looked up
    in ``stored`` (state, or the part of it the plan read) in the ``near`` partitions only
    (counting every open window would read all state). No ``near`` range: no state to look in."""
    if near is None:
        return windows
    held = stored.filter(F.col(BUCKET).between(F.lit(near[0]), F.lit(near[1]))).select(*ident)
    return windows.join(held, ident, "left_anti")


def reduce(
    p: Pipeline, w: TimeWindows, records: DataFrame, input_columns: tuple[str, ...], observe: Observe | None = None
) -> DataFrame:
    """``records`` as the plan keeps them, from one read of them: a row of partials per window
    they update, and a row per distinct late record (``RECORD``, the stream time before it: the
    late records' table needs no second read of the input), each with the ``RECORDS`` whose
    newest window it is (their sum: the records read). ``observe`` computes the counters
    (``counting``) on the way, where the batch takes them from this read."""
    windowed = assign(records, w)
    if observe is not None:
        windowed = observe(windowed, counting())
    late = F.col(NEWEST) & ~F.col(IN_TIME)
    # a chunk of a range: a late record's row is its interval's, a window's the first (and last) that updated it
    chunked = INTERVAL in records.columns
    by_interval = [F.when(late, F.col(INTERVAL)).alias(LATE_IN)] if chunked else []
    return (
        windowed.filter(F.col(IN_TIME) | late)
        .groupBy(
            *p.identity,
            F.when(late, record_json(input_columns)).alias(RECORD),
            F.when(late, F.col(STREAM_BEFORE)).alias(STREAM_BEFORE),
            *by_interval,
        )
        .agg(
            *partials(p),
            F.max(TS).alias(MAX_TS),
            F.count_if(F.col(NEWEST)).alias(RECORDS),
            *([F.min(INTERVAL).alias(INTERVAL), F.max(INTERVAL).alias(LAST_IN)] if chunked else []),
        )
        .drop(LATE_IN)
    )


LATE_IN = "_late_iv"  # ``reduce``'s grouping by a late record's interval (a chunk)
LAST_IN = "_last_iv"  # the last interval of a chunk that updated a window (a MERGEd sink's emitting one)


def counting() -> dict[str, Column]:
    """The counters over ``assign``'s rows: a record is late when its newest window is closed."""
    closed = ~F.col(IN_TIME)
    return counters(F.when(closed, 1).otherwise(0), F.col(NEWEST) & closed, F.col(NEWEST))


def assign(records: DataFrame, w: TimeWindows) -> DataFrame:
    """A row per record and window holding it (``window_start``), with ``IN_TIME`` (the window
    was still open when the record arrived) and ``NEWEST`` (the record's newest window: when it
    is closed, all of them are, and the record is late).

    A hopping record's windows come from a literal array of offsets, ``explode``d, and plain
    arithmetic (as Spark's own ``window`` expands them), not from ``sequence`` and a lambda
    ``filter``: lambdas run interpreted, row by row, and made this the costliest step of a
    large batch (bench/README.md#figures-behind-the-codes-choices)."""
    size, adv = w.size_ms, w.advance_ms
    base = F.col(TS) - F.pmod(F.col(TS), F.lit(adv))  # the newest window's start
    windows = -(-size // adv)  # at most this many windows hold a record
    rows = records.withColumn("window_start", base)
    if windows > 1:  # each window's distance from the newest, then its start
        rows = records.withColumn("window_start", F.explode(F.array(*[F.lit(k * adv) for k in range(windows)])))
        rows = rows.withColumn("window_start", base - F.col("window_start"))
    return (
        rows.filter((F.col("window_start") >= 0) & (F.col("window_start") > F.col(TS) - size))
        .withColumn(IN_TIME, F.col("window_start") + w.close_offset_ms() > F.col(STREAM_BEFORE))
        .withColumn(NEWEST, F.col("window_start") == base)
    )


def _merge_windows(p: Pipeline, rows: DataFrame) -> DataFrame:
    """One row per window: partial rows merged."""
    return rows.groupBy(*p.identity, "window_end", CLOSE).agg(*merges(p), F.max(MAX_TS).alias(MAX_TS))
