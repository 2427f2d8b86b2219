"""The plan of tumbling and hopping windows (``TimeWindows``): records are assigned to windows
with SQL array functions and aggregated into partials.

Windowed state is a log of partial rows (one per window and batch that touched it), merged when
the window closes: a batch appends its partials and rewrites only the buckets that are due, so it
never rewrites open windows it did not touch."""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from ...definition.columns import (
    BUCKET,
    CLOSE,
    GONE,
    MAX_TS,
    N_OPEN_STARTS,
    N_STARTS,
    OPEN_STARTS,
    STARTS,
    STREAM_BEFORE,
    TS,
)
from ...definition.pipeline import Pipeline
from ...definition.windows import TimeWindows
from ..batch import Batch, Effect, counters, finished, merges, partial_updates, partials, wants_updates


def plan(b: Batch, w: TimeWindows) -> Effect:
    p = b.pipeline
    ident = p.identity
    assigned = assign(b.records, w)
    held = assigned.withColumn("window_start", F.explode(OPEN_STARTS))  # a row per record and window
    batch_partials = b.keep(
        held.groupBy(*ident)
        .agg(*partials(p), F.max(TS).alias(MAX_TS))
        .withColumn("window_end", F.col("window_start") + w.size_ms)
        .withColumn(CLOSE, w.close(F.col("window_end")))
        .withColumn(BUCKET, b.bucket())
    )
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
    if p.suppressed_final:
        results = _merge_windows(p, rows.filter(due))
    else:
        results = _merge_windows(p, touched.unionByName(batch_partials))
    results = results.select(*p.keys, "window_start", "window_end", *finished(p), F.lit(False).alias(GONE))
    still_open = everything.filter(~due).unionByName(batch_partials.filter(~due)).select(*ident).distinct()
    closed = results if p.suppressed_final else rows.filter(due).select(*ident).distinct()

    return Effect(
        state_changes=None,
        state_rewrite=(keep, f"{BUCKET} <= {due_bucket}"),
        results=results,
        late=assigned.filter(F.col(N_OPEN_STARTS) == 0),
        closed=closed,
        results_are_closed=p.suppressed_final,
        counted=assigned,
        counters=counters(F.col(N_STARTS) - F.col(N_OPEN_STARTS), F.col(N_OPEN_STARTS) == 0),
        open_windows=still_open,
        opened=_new_windows(near, stored, batch_partials.select(*ident)),
        updates=partial_updates(b, held.withColumn("window_end", F.col("window_start") + w.size_ms), touched)
        if wants_updates(p)
        else None,
    )


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


def _new_windows(near: tuple[int, int] | None, stored: DataFrame, windows: DataFrame) -> DataFrame:
    """Of the batch's ``windows``, those not in state before: looked up in ``stored`` (state,
    or the part of it the plan read) in the ``near`` partitions only (counting every open
    window would read all state). No ``near`` range: no state to look in."""
    if near is None:
        return windows
    held = stored.filter(F.col(BUCKET).between(F.lit(near[0]), F.lit(near[1]))).select(*windows.columns)
    return windows.join(held, windows.columns, "left_anti")


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


def _merge_windows(p: Pipeline, rows: DataFrame) -> DataFrame:
    """One row per window: partial rows merged."""
    return rows.groupBy(*p.identity, "window_end", CLOSE).agg(*merges(p), F.max(MAX_TS).alias(MAX_TS))
