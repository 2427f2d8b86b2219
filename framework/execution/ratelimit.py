"""Rate-limiting suppression (KIP-328 ``until_time_limit``) of a grouped table, windowed or not.

Every record that changes an aggregate makes an *update*: the key (and window), the record's
arrival position, the stream time before and after it, the update's time (the record's event
time; for a window, the largest event time in it so far, as Kafka stamps it) and the new value;
a session merge or extension also puts a tombstone for each session it replaced. Each window
type's plan gives its updates in one shape (``Effect.updates``, told in ``batch``), so this
module never asks which plan made them.

The same fold measures ``until_window_closes``'s buffer for strict bounds on every window type
(``held_until_close``): there every open window is an entry, leaving when it closes.

The buffer itself is ``eviction.Buffer``. When only time decides (unbounded and strict
buffers) it runs per key in parallel; a strict bound is then checked over the size changes
summed by arrival position. An eager size-bounded buffer evicts the oldest entry of *any* key
when full, so it runs over the whole batch in arrival order in one task: its cost grows with
the batch's records (never with the table's history) and nothing is pulled to the driver.
A small batch (``planning`` decides, from its records and the entries buffered before it) is
folded on the driver in the same way, over rows one query collects (``_limited_locally``).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable

import pandas as pd
from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.types import BooleanType, LongType, StringType, StructField, StructType

from ..definition.columns import (
    ARRIVAL_POS,
    BUFFER_TIME,
    BYTES_CHANGE,
    CLOSE,
    COUNT_CHANGE,
    EMITTED_AT,
    ENTRY_KEY,
    GONE,
    POS,
    SIZE,
    STEP,
    STREAM_AFTER,
    STREAM_BEFORE,
    TS,
    UPDATED_AT,
)
from ..definition.names import quoted
from ..definition.pipeline import Pipeline
from ..definition.suppress import EagerBufferConfig
from . import eviction
from .batch import Batch, Effect, Limited, buffer_stats, finished, merges

# Columns of the fold, in this module only. In: an event's kind (EVENT_KIND, below),
# whether a row is an update (TOUCH), the group folded together. Out (CHANGES): what happened
# (put, emit, keep) at which position, the stream time then, the threshold an entry left at (when
# a per-key fold cannot place it), the update holding its value (REF, its position, and REF_STEP,
# its step there), and the entry.
EVENT_KIND, GROUP = "_event_kind", "_g"
# The kinds of fold input (EVENT_KIND): an entry the buffer held before the batch (loaded first), an
# update (``eviction.Update``), and, for an eager buffer, a tick per record of the batch (the
# stream time after it, ``eviction.Tick``). At one arrival position the update folds first.
STORED, UPDATE, TICK = 0, 1, 2
WHAT, STREAM_TIME, THRESHOLD, REF, REF_STEP = "_what", "_st", "_thr", "_ref", "_ref_step"
CHANGES = (
    f"{WHAT} string, {POS} long, {STREAM_TIME} long, {THRESHOLD} long, {REF} long, {REF_STEP} long, "
    f"{BUFFER_TIME} long, {SIZE} long, {ENTRY_KEY} string, {COUNT_CHANGE} long, {BYTES_CHANGE} long"
)


def _values(p: Pipeline) -> list[str]:
    """An entry's value: the aggregates, and whether it is a tombstone (``GONE``) where windows
    merge (only they put tombstones in a buffer, whose table keeps the column then)."""
    return [a.name for a in p.aggregates] + ([GONE] if p.windows is not None and p.windows.merges else [])


def limit(b: Batch, effect: Effect, locally: bool = False) -> Effect:
    """``effect`` with its results replaced by what the buffer emits in batch ``b``. ``locally``:
    the batch is small (its records and the stored entries, ``planning``'s choice), so the
    updates, the entries and the stream time after each record are collected in one query and
    folded on the driver (``_limited_locally``): a small batch does not pay for the distributed
    fold's three checkpoints, its Python workers and the joins that place and value its emissions."""
    p = b.pipeline
    s = p.suppression
    ident, entry = p.identity, p.keys_and_bounds
    values = _values(p)
    ups = _updates(b, effect)
    stored = (
        b.buffer.select(*ups.drop(POS, STEP, STREAM_BEFORE, STREAM_AFTER).columns)
        if b.buffer is not None
        else ups.drop(POS, STEP, STREAM_BEFORE, STREAM_AFTER).limit(0)
    )
    buf = s.buffer
    eager = isinstance(buf, EagerBufferConfig) and (buf.record_limit is not None or buf.byte_limit is not None)
    assert s.time_limit_ms is not None  # rate limiting is until_time_limit
    if locally:
        limited = _limited_locally(b, ups, stored, s.time_limit_ms, eager)
        return replace(effect, results=limited.emissions, results_are_closed=False, limited=limited)
    ups = ups.localCheckpoint(eager=True)  # read three times: by the fold and for two values
    changes = _buffered(b, ups, stored, s.time_limit_ms, eager)
    # read by the emitted rows and by the buffer's sizes: computed once (each read planned the
    # placement's joins and window again)
    emits = _placed(b, changes.filter(f"{WHAT} = 'emit'")).localCheckpoint(eager=True)
    emitted = _with_values(emits, ups, stored, ident, values).select(
        *entry, *values, *([] if GONE in values else [F.lit(False).alias(GONE)]), F.col(STREAM_TIME).alias(EMITTED_AT)
    )
    kept = _with_values(changes.filter(f"{WHAT} = 'keep'"), ups, stored, ident, values).select(
        *entry, BUFFER_TIME, SIZE, ENTRY_KEY, *values
    )
    return replace(
        effect,
        results=emitted,
        results_are_closed=False,  # what the buffer emits, not the windows that closed
        limited=Limited(emissions=emitted, buffer=kept, changes=_sized(emits, changes, stored)),
    )


def _limited_locally(b: Batch, ups: DataFrame, stored: DataFrame, limit_ms: int, eager: bool) -> Limited:
    """What ``limit`` computes, for a small batch: one query collects the stored entries, the
    updates and a tick per record (the stream time after it), and ``eviction.fold`` runs them in
    arrival order through one buffer, as the eager fold does. Every emission is then placed at
    its record and valued from the update (or stored entry) that set it without a join; the
    frames returned are local rows."""
    p = b.pipeline
    buf = p.suppression.buffer
    entry, values = p.keys_and_bounds, _values(p)
    rows = _events(b, ups, stored)
    # an entry's value: the update that set it (its position and step) or the stored entry (None)
    valued = {
        (tuple(r[c] for c in entry), None if r[EVENT_KIND] == STORED else (r[POS], r[STEP])): r
        for r in rows
        if r[EVENT_KIND] != TICK
    }
    buffer = eviction.Buffer(limit_ms, buf.record_limit if eager else None, buf.byte_limit if eager else None, eager)
    changes = _folded(buffer, rows, entry, b.stream_time, end_known=True)
    return _as_frames(b, ups, rows, changes, lambda c: tuple(valued[(c.entry.ident, c.entry.ref)][v] for v in values))


Valued = Callable[[eviction.Change], tuple]  # the values of a change's entry


def _events(b: Batch, ups: DataFrame, stored: DataFrame) -> list[dict]:
    """The stored entries, the updates and a tick per record (the stream time after it), as
    local rows, in one query (``_limited_locally``)."""
    p = b.pipeline
    entry, values = p.keys_and_bounds, _values(p)
    events = [EVENT_KIND, POS, STEP, STREAM_BEFORE, STREAM_AFTER]
    collected = (
        stored.select(*entry, BUFFER_TIME, SIZE, ENTRY_KEY, *values, F.lit(STORED).alias(EVENT_KIND))
        .unionByName(ups.withColumn(EVENT_KIND, F.lit(UPDATE)), allowMissingColumns=True)
        .unionByName(
            b.records.select(
                F.lit(TICK).alias(EVENT_KIND),
                F.col(ARRIVAL_POS).alias(POS),
                F.greatest(STREAM_BEFORE, TS).alias(STREAM_AFTER),
            ),
            allowMissingColumns=True,
        )
        .select(*entry, BUFFER_TIME, SIZE, ENTRY_KEY, *values, *events)
        .collect()
    )
    return [r.asDict() for r in collected]


def _as_frames(b: Batch, ups: DataFrame, rows: list[dict], changes: list[eviction.Change], value: Valued) -> Limited:
    """The local fold's ``changes`` (of the events ``rows``) as the frames of a ``Limited``:
    emissions and entries kept valued by ``value``, and the buffer's size changes by position."""
    p, spark = b.pipeline, b.records.sparkSession
    entry, values = p.keys_and_bounds, _values(p)
    value_fields = [ups.schema[c] for c in values]
    fields = [f for f in ups.schema.fields if f.name in entry]
    emitted_schema = StructType(
        [*fields, *value_fields, *([] if GONE in values else [StructField(GONE, BooleanType())])]
        + [StructField(EMITTED_AT, LongType())]
    )
    emissions = spark.createDataFrame(
        [
            (*c.entry.ident, *value(c), *([] if GONE in values else [False]), c.stream_time)
            for c in changes
            if c.kind == "emit"
        ],
        emitted_schema,
    )
    kept_schema = StructType(
        [*fields, StructField(BUFFER_TIME, LongType()), StructField(SIZE, LongType())]
        + [StructField(ENTRY_KEY, StringType()), *value_fields]
    )
    kept = spark.createDataFrame(
        [
            (*c.entry.ident, c.entry.time, c.entry.size, c.entry.order[0], *value(c))
            for c in changes
            if c.kind == "keep"
        ],
        kept_schema,
    )
    sized = [(-1, 1, r[SIZE]) for r in rows if r[EVENT_KIND] == STORED] + [
        (c.pos, c.d_count, c.d_bytes) for c in changes if c.kind in ("put", "emit")
    ]
    return Limited(
        emissions=emissions,
        buffer=kept,
        changes=spark.createDataFrame(sized, f"{POS} long, {COUNT_CHANGE} long, {BYTES_CHANGE} long"),
    )


def held_until_close(b: Batch, effect: Effect) -> DataFrame:
    """The buffer of ``until_window_closes`` (any window type), count and bytes after every record
    (``Limited.stats``), for strict bounds: Kafka's buffer holds every open window (each update
    is put, a window leaves once stream time reaches its close), so this is the fold of a
    rate-limiting buffer with the window's close time as buffer time and no time limit."""
    p = b.pipeline
    entry = p.keys_and_bounds
    close = p.windows.close(F.col("window_end"))
    ups = _updates(b, effect, buffer_time=close)
    base = ups.drop(POS, STEP, STREAM_BEFORE, STREAM_AFTER)
    if b.state is None:
        stored = base.limit(0)
    else:
        merged = b.state.filter(F.col(CLOSE) > b.time_before).groupBy(*entry).agg(*merges(p))  # open windows
        stored = merged.select(*entry, close.alias(BUFFER_TIME), *finished(p), F.lit(False).alias(GONE))
        stored = stored.select(*entry, BUFFER_TIME, _size(p), _key(p), *_values(p))
    changes = _buffered(b, ups, stored, 0, eager=False)
    return buffer_stats(_sized(_placed(b, changes.filter(f"{WHAT} = 'emit'")), changes, stored))


def _sized(emits: DataFrame, changes: DataFrame, stored: DataFrame) -> DataFrame:
    """Entries and bytes added (or removed) per position: stored entries before the batch
    (position -1), puts and emissions."""
    return (
        emits.select(POS, COUNT_CHANGE, BYTES_CHANGE)
        .unionByName(changes.filter(f"{WHAT} = 'put'").select(POS, COUNT_CHANGE, BYTES_CHANGE))
        .unionByName(
            stored.select(
                F.lit(-1).cast("long").alias(POS),
                F.lit(1).cast("long").alias(COUNT_CHANGE),
                F.col(SIZE).alias(BYTES_CHANGE),
            )
        )
    )


def _buffered(b: Batch, ups: DataFrame, stored: DataFrame, limit_ms: int, eager: bool) -> DataFrame:
    """What the buffer does with the stored entries and the batch's updates: the fold's
    changes (``CHANGES``), checkpointed."""
    p = b.pipeline
    buf = p.suppression.buffer
    ident, entry = p.identity, p.keys_and_bounds
    base = [*entry, BUFFER_TIME, SIZE, ENTRY_KEY]
    members = stored.select(
        *base,
        F.lit(STORED).alias(EVENT_KIND),
        *[F.lit(None).cast("long").alias(c) for c in (POS, STEP, STREAM_BEFORE, STREAM_AFTER)],
    ).unionByName(ups.select(*base, F.lit(UPDATE).alias(EVENT_KIND), POS, STEP, STREAM_BEFORE, STREAM_AFTER))
    if eager:  # the oldest entry of any key leaves when full: one fold over the batch in arrival order
        ticks = b.records.select(
            *[F.lit(None).cast(members.schema[c].dataType).alias(c) for c in base],
            F.lit(TICK).alias(EVENT_KIND),
            F.col(ARRIVAL_POS).alias(POS),
            F.lit(None).cast("long").alias(STEP),
            F.lit(None).cast("long").alias(STREAM_BEFORE),
            F.greatest(STREAM_BEFORE, TS).alias(STREAM_AFTER),
        )
        grouped = members.unionByName(ticks).withColumn(GROUP, F.lit(0)).groupBy(GROUP)
    else:  # keys hashed to a few groups, each folding its keys one after another
        buckets = int(b.records.sparkSession.conf.get("spark.sql.shuffle.partitions") or 200)
        grouped = members.withColumn(GROUP, F.pmod(F.xxhash64(*ident), F.lit(buckets))).groupBy(GROUP)
    key_schema = ", ".join(
        f"{quoted(f.name)} {f.dataType.simpleString()}" for f in members.schema.fields if f.name in entry
    )
    fold = _fold(
        entry, limit_ms, buf.record_limit if eager else None, buf.byte_limit if eager else None, eager, b.stream_time
    )
    return grouped.applyInPandas(fold, f"{key_schema}, {CHANGES}").localCheckpoint(eager=True)


def _size(p: Pipeline) -> Column:
    """An entry's size: UTF-8 bytes of its value's string form (docs/design.md#buffer-bounds);
    a tombstone's value is null."""
    text = (
        F.col(p.aggregates[0].name).cast("string")
        if len(p.aggregates) == 1
        else F.to_json(F.struct(*[a.name for a in p.aggregates]))
    )
    text = F.when(~F.col(GONE), text)
    return F.coalesce(F.octet_length(text), F.lit(0)).cast("long").alias(SIZE)


def _key(p: Pipeline) -> Column:
    """The key's string form, which orders entries of equal buffer time."""
    return F.concat_ws("\u0000", *[F.col(k).cast("string") for k in p.keys]).alias(ENTRY_KEY)


def _updates(b: Batch, effect: Effect, buffer_time: Column | None = None) -> DataFrame:
    """The plan's updates (``Effect.updates``) as buffer entries, each timed by its update's
    time (or ``buffer_time``), with its value (a tombstone's null) and the value's size."""
    p = b.pipeline
    assert effect.updates is not None  # a plan gives its updates to a buffer that needs them
    tombstone = F.col(GONE)
    ups = effect.updates.select(
        *p.keys_and_bounds,
        POS,
        STEP,
        STREAM_BEFORE,
        STREAM_AFTER,
        GONE,
        (buffer_time if buffer_time is not None else F.col(UPDATED_AT)).alias(BUFFER_TIME),
        *[F.when(~tombstone, F.expr(a.finish)).alias(a.name) for a in p.aggregates],
    )
    return _entries(p, ups)


def _entries(p: Pipeline, ups: DataFrame) -> DataFrame:
    """Updates as buffer entries: a record's first update advances stream time (and expires
    entries), so its later ones find the stream time after the record."""
    first = F.col(STEP) == 0
    return ups.select(
        *p.keys_and_bounds,
        POS,
        STEP,
        F.when(first, F.col(STREAM_BEFORE)).otherwise(F.col(STREAM_AFTER)).alias(STREAM_BEFORE),
        STREAM_AFTER,
        BUFFER_TIME,
        _size(p),
        _key(p),
        *_values(p),
    )


def _fold(
    entry: list[str],
    limit_ms: int,
    max_records: int | None,
    max_bytes: int | None,
    eager: bool,
    stream_time: int | None,
):
    """A pandas function: run stored entries, updates (and ticks) through a buffer per key, or
    through one buffer for the whole group when ``eager``."""

    def run(pdf: pd.DataFrame) -> pd.DataFrame:
        groups: dict[object, list[dict]] = {}
        for r in pdf.drop(columns=GROUP).to_dict("records"):
            groups.setdefault(None if eager else tuple(r[c] for c in entry), []).append(r)
        out = []
        for rows in groups.values():
            buf = eviction.Buffer(limit_ms, max_records, max_bytes, eager)
            out += [_change_row(c) for c in _folded(buf, rows, entry, stream_time, end_known=eager)]
        return pd.DataFrame(out, columns=[*entry, *_CHANGE_COLUMNS])

    return run


def _folded(
    buf: eviction.Buffer, rows: list[dict], entry: list[str], stream_time: int | None, end_known: bool
) -> list[eviction.Change]:
    """``buf`` loaded with the stored entries among ``rows`` (fold input, ``EVENT_KIND``), then the
    updates and ticks run through it in arrival order (at one position the update first)."""
    buf.load(
        eviction.Entry(tuple(r[c] for c in entry), _entry_order(r), int(r[BUFFER_TIME]), int(r[SIZE]))
        for r in rows
        if r[EVENT_KIND] == STORED
    )
    moving = sorted((r for r in rows if r[EVENT_KIND] != STORED), key=lambda r: (r[POS], r[EVENT_KIND], r[STEP] or 0))
    return list(eviction.fold(buf, [_event(r, entry) for r in moving], stream_time, end_known=end_known))


def _entry_order(r: dict) -> tuple:
    return r[ENTRY_KEY], r.get("window_start") or 0, r.get("window_end") or 0


def _event(r: dict, entry: list[str]) -> eviction.Update | eviction.Tick:
    """A row of ``_fold``'s input as what the buffer processes: an update, or a tick of stream time."""
    if r[EVENT_KIND] == TICK:
        return eviction.Tick(int(r[POS]), int(r[STREAM_AFTER]))
    return eviction.Update(
        tuple(r[c] for c in entry),
        _entry_order(r),
        int(r[POS]),
        int(r[STREAM_BEFORE]),
        int(r[STREAM_AFTER]),
        int(r[BUFFER_TIME]),
        int(r[SIZE]),
        (int(r[POS]), int(r[STEP])),
    )


_CHANGE_COLUMNS = [
    WHAT,
    POS,
    STREAM_TIME,
    THRESHOLD,
    REF,
    REF_STEP,
    BUFFER_TIME,
    SIZE,
    ENTRY_KEY,
    COUNT_CHANGE,
    BYTES_CHANGE,
]


def _change_row(c: eviction.Change) -> tuple:
    """A buffer's change as a row of ``_fold``'s output: the entry's key, then ``_CHANGE_COLUMNS``."""
    ref = c.entry.ref or (None, None)
    return (
        *c.entry.ident,
        c.kind,
        c.pos,
        c.stream_time,
        c.threshold,
        *ref,
        c.entry.time,
        c.entry.size,
        c.entry.order[0],
        c.d_count,
        c.d_bytes,
    )


def _placed(b: Batch, emits: DataFrame) -> DataFrame:
    """Emits with their position and stream time: a per-key fold knows only the threshold of an
    entry that left between its updates; it left at the first record whose stream time reached
    it (stream time never decreases, so that record has the smallest such stream time)."""
    unknown = emits.filter(F.col(POS).isNull())
    steps = b.records.groupBy(F.greatest(STREAM_BEFORE, TS).alias("_v")).agg(F.min(ARRIVAL_POS).alias("_at"))
    if b.stream_time is not None:
        steps = steps.unionByName(
            b.records.sparkSession.createDataFrame([(b.stream_time, eviction.END)], "_v long, _at long")
        )
    asks = unknown.select(F.col(THRESHOLD).alias("_v")).distinct().withColumn("_at", F.lit(None).cast("long"))
    # Descending, steps before asks at equal value, and of equal steps the earliest last (the
    # batch's end has the stream time of its last record, unless idle advancement moved it):
    # the last step seen is the smallest one >= the ask (a running frame: an unbounded-following
    # one would cost a pass per row).
    seen = Window.orderBy(F.desc("_v"), F.col("_at").isNull(), F.desc("_at")).rowsBetween(
        Window.unboundedPreceding, Window.currentRow
    )
    last: Column = F.last(F.when(F.col("_at").isNotNull(), F.struct("_v", "_at")), ignorenulls=True).over(seen)
    answers = (
        asks.unionByName(steps)
        .select("_v", F.col("_at").isNull().alias("_ask"), last.alias("_step"))
        .filter("_ask")
        .select(F.col("_v").alias(THRESHOLD), F.col("_step._at").alias("_at"), F.col("_step._v").alias("_sv"))
    )
    placed = (
        unknown.join(answers, THRESHOLD)
        .withColumn(POS, F.col("_at"))
        .withColumn(STREAM_TIME, F.col("_sv"))
        .drop("_at", "_sv")
    )
    return emits.filter(F.col(POS).isNotNull()).unionByName(placed)


def _with_values(rows: DataFrame, ups: DataFrame, stored: DataFrame, ident: list[str], values: list[str]) -> DataFrame:
    """``rows`` (one per entry) with the entry's value: that of the update ``_ref``, or the
    stored one (``_ref`` null: not updated in this batch)."""
    from_update = rows.filter(F.col(REF).isNotNull()).join(
        ups.select(*ident, F.col(POS).alias(REF), F.col(STEP).alias(REF_STEP), *values), [*ident, REF, REF_STEP]
    )
    from_store = rows.filter(F.col(REF).isNull()).join(stored.select(*ident, *values), ident)
    return from_update.unionByName(from_store)
