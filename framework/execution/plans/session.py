"""The plan of KIP-94 session windows (``SessionWindows``).

The fold (``fold.Sessions``) decides, record by record in arrival order, which session each
record joins, extends or merges, from the open sessions its key holds. A session is named by
both bounds (``SessionWindows.bounds``): an extension or a merge makes a new session, and the
ones it replaced are deleted from state (``GONE``)."""

from __future__ import annotations

import bisect
import itertools
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
    # counters, the late records and a chunk's members all read it (a join each was a chunk's
    # costliest work: a sort of every record, three times), on the record's position alone,
    # which is unique (sorting by key first compared most pairs of rows column by column)
    assignments = assigned.filter(f"_member = {fold.RECORD}").select("_id", "_start", "_end")
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
        members=_members(assigned, rec_assign, old, closing, keys) if INTERVAL in recs.columns else None,
    )


def _members(
    assigned: DataFrame, rec_assign: DataFrame, old: DataFrame, closing: DataFrame, keys: list[str]
) -> DataFrame:
    """Each session a chunk touched or closed, and the span and ``INTERVAL`` of each member it
    holds: its records (``rec_assign``, their event time) and the stored sessions it took in
    (their bounds, interval -1); a stored session the chunk closed untouched is its own member."""
    bounds = [F.col("_start").alias("window_start"), F.col("_end").alias("window_end")]
    stored = [F.col("window_start").alias("_a"), F.col("window_end").alias("_b"), F.lit(-1).alias(INTERVAL)]
    records = rec_assign.select(
        *keys, *bounds, F.col(TS).alias("_a"), F.col(TS).alias("_b"), F.col(INTERVAL).cast("int").alias(INTERVAL)
    )
    held = (
        old.withColumn("_id", F.col("window_start"))
        .join(assigned.filter(f"_member = {fold.HELD}"), [*keys, "_id"])
        .select(*keys, *bounds, *stored)
    )
    alone = closing.select(*keys, "window_start", "window_end", *stored)
    return records.unionByName(held).unionByName(alone)


def open_per_interval(members: DataFrame, keys: list[str], w: SessionWindows, closing: Column, n: int) -> DataFrame:
    """How the number of open sessions changed in each interval ``0..n-1`` of a chunk, from the
    sessions of ``members`` (``Effect.members``): rows (``INTERVAL``, ``n``), summed over the
    sessions. ``closing`` is the interval whose stream time closes a session (``n``: none in the
    chunk). Before the chunk, each member of interval -1 was an open session of its own.

    A session of the chunk grew from its members: after interval k, those that had arrived by
    then form as many sessions as their spans, sorted, leave gaps wider than the inactivity gap
    (the fold joins a record to every open session within the gap). None of those is closed
    before the whole session is: a record that joins a closed session is late (its merged end is
    under the close time), so it is not a member. The stored sessions the chunk neither touched
    nor closed are open throughout, before the chunk and after each interval.

    The members are sorted by session and interval within partitions and each partition's
    sessions counted in one Python call (``_session_changes`` a session): a call per session
    (``applyInPandas``) cost 2 ms each, 133 s of a two-day chunk's 180 s of work."""
    gap, session = w.gap_ms, [*keys, "window_start", "window_end"]
    names = [*session, INTERVAL, "_a", "_b", "_closing"]
    width = len(session)

    def changes(batches):
        import pandas as pd

        totals: dict[int, int] = {}
        current: tuple | None = None
        held: list[tuple] = []
        for pdf in batches:
            for row in zip(*(pdf[c].tolist() for c in names)):
                if row[:width] != current:
                    _session_changes(held, gap, n, totals)
                    current, held = row[:width], []
                held.append(row[width:])
        _session_changes(held, gap, n, totals)
        yield pd.DataFrame({INTERVAL: list(totals), "n": list(totals.values())}, dtype="int64").astype(
            {INTERVAL: "int32"}
        )

    ordered = members.withColumn("_closing", closing).select(*names).repartition(*session)
    counted = ordered.sortWithinPartitions(*session, INTERVAL).mapInPandas(changes, f"{INTERVAL} int, n long")
    return counted.groupBy(INTERVAL).agg(F.sum("n").alias("n"))


def _session_changes(members: list[tuple], gap: int, n: int, totals: dict[int, int]) -> None:
    """Add to ``totals`` (interval: change) how one session's ``members`` (interval, span start,
    span end, closing interval), sorted by interval, changed the open sessions interval by
    interval until the session closed (``open_per_interval``)."""
    if not members:
        return
    end, spans = int(members[0][3]), _Spans(gap)
    arrived = [m for m in members if m[0] >= 0]
    for _, a, b, _ in members[: len(members) - len(arrived)]:  # the stored ones: open before the chunk
        spans.add(int(a), int(b))
    before = spans.count
    for k, group in itertools.groupby(arrived, key=lambda m: int(m[0])):
        if k >= end:  # a record after its session closed is late, not a member
            break
        for _, a, b, _ in group:
            spans.add(int(a), int(b))
        totals[k] = totals.get(k, 0) + spans.count - before
        before = spans.count
    if end < n:
        totals[end] = totals.get(end, 0) - before


class _Spans:
    """Disjoint spans more than ``gap`` apart, sorted, as the fold would have joined the spans
    added so far: ``add`` joins a span to every span within ``gap`` of it."""

    def __init__(self, gap: int):
        self.gap = gap
        self.starts: list[int] = []
        self.ends: list[int] = []

    @property
    def count(self) -> int:
        return len(self.starts)

    def add(self, a: int, b: int) -> None:
        hi = bisect.bisect_right(self.starts, b + self.gap)  # spans starting near enough before b
        lo = hi
        while lo > 0 and self.ends[lo - 1] >= a - self.gap:  # ... and ending near enough after a
            lo -= 1
        if lo < hi:
            a, b = min(a, self.starts[lo]), max(b, max(self.ends[lo:hi]))
        self.starts[lo:hi], self.ends[lo:hi] = [a], [b]


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
