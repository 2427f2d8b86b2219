"""Rate-limiting suppression (KIP-328 ``until_time_limit``) of a grouped table, windowed or not.

Every record that changes an aggregate makes an *update*: the key (and window), the record's
arrival position, the stream time before and after it, the update's time (the record's event
time; for a window, the largest event time in it so far, as Kafka stamps it) and the new value.
The value after each update is a running merge, a window function per key (and window), so it
runs in parallel: of the stored partials and the batch's per-record partials (plain tables,
time windows), or of the kept and new records a sliding window holds. Session windows are not
supported: a merge would need tombstones for the merged sessions.

The same fold measures ``until_window_closes``'s buffer for strict bounds on time windows
(``held_until_close``): there every open window is an entry, leaving when it closes.

The buffer itself is ``eviction.Buffer``. When only time decides (unbounded and strict
buffers) it runs per key in parallel; a strict bound is then checked over the size changes
summed by arrival position. An eager size-bounded buffer evicts the oldest entry of *any* key
when full, so it runs over the whole batch in arrival order in one task: its cost grows with
the batch's records (never with the table's history) and nothing is pulled to the driver.
"""
from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from ..definition.names import quoted
from ..definition.pipeline import Pipeline
from ..definition.suppress import EagerBufferConfig
from ..definition.windows import SlidingWindows
from . import eviction
from .engine import Batch, Outcome, assign, finished, merges, partial_names, partials, recent_records

CHANGES = "_what string, _pos long, _st long, _thr long, _ref long, _bt long, _size long, _key string, " \
          "_dc long, _db long"


def identity(p: Pipeline) -> list[str]:
    """Columns naming one buffer entry: the keys, and the window when windowed."""
    return [*p.keys, "window_start"] if p.windows is not None else list(p.keys)


def _carried(p: Pipeline) -> list[str]:
    return identity(p) + (["window_end"] if p.windows is not None else [])


@dataclass
class Limited:
    """What the buffer did in one batch."""

    emissions: DataFrame  # sink rows: keys, window bounds (ms), aggregates, ``_gone``, ``_est``
    buffer: DataFrame     # the buffer after the batch: entries with ``_bt``, ``_size``, ``_key``, values
    changes: DataFrame    # ``_pos``, ``_dc``, ``_db``: entries and bytes added (or removed) per position

    def stats(self) -> dict:
        """Buffer count and bytes after the batch and their largest value after any record."""
        return _stats(self.changes)


def _stats(changes: DataFrame) -> dict:
    per_pos = changes.groupBy("_pos").agg(F.sum("_dc").alias("dc"), F.sum("_db").alias("db"))
    upto = Window.orderBy("_pos").rowsBetween(Window.unboundedPreceding, Window.currentRow)
    running = per_pos.select("_pos", F.sum("dc").over(upto).alias("n"), F.sum("db").over(upto).alias("b"))
    row = running.agg(F.max("n").alias("count_max"), F.max("b").alias("size_max"),
                      F.max_by("n", "_pos").alias("count"), F.max_by("b", "_pos").alias("size")).collect()[0]
    return {k: int(row[k] or 0) for k in ("count", "count_max", "size", "size_max")}


def limit(b: Batch, outcome: Outcome) -> Outcome:
    """``outcome`` with its results replaced by what the buffer emits in batch ``b``."""
    p = b.pipeline
    s = p.suppression
    ident, carried = identity(p), _carried(p)
    values = [a.name for a in p.aggregates]
    ups = _updates(b).localCheckpoint(eager=True)  # read three times: by the fold and for two values
    stored = b.buffer.select(*ups.drop("_pos", "_sb", "_sa").columns) if b.buffer is not None \
        else ups.drop("_pos", "_sb", "_sa").limit(0)
    buf = s.buffer
    eager = isinstance(buf, EagerBufferConfig) and (buf.record_limit is not None or buf.byte_limit is not None)
    changes = _buffered(b, ups, stored, s.time_limit_ms, eager)
    emits = _placed(b, changes.filter("_what = 'emit'"))
    emitted = _with_values(emits, ups, stored, ident, values).select(
        *carried, *values, F.lit(False).alias("_gone"), F.col("_st").alias("_est"))
    kept = _with_values(changes.filter("_what = 'keep'"), ups, stored, ident, values).select(
        *carried, "_bt", "_size", "_key", *values)
    outcome.results = emitted
    outcome.limited = Limited(emitted, kept, _sized(emits, changes, stored))
    return outcome


def held_until_close(b: Batch) -> dict:
    """The buffer of ``until_window_closes`` on time windows, count and bytes after every record
    (``Limited.stats``), for strict bounds: Kafka's buffer holds every open window (each update
    is put, a window leaves once stream time reaches its close), so this is the fold of a
    rate-limiting buffer with the window's close time as buffer time and no time limit."""
    p = b.pipeline
    carried = _carried(p)
    close = F.col("window_end") + p.windows.grace_ms
    ups = _updates(b, buffer_time=close)
    base = ups.drop("_pos", "_sb", "_sa")
    if b.state is None:
        stored = base.limit(0)
    else:
        merged = b.state.groupBy(*carried).agg(*merges(p))
        stored = merged.select(*carried, close.alias("_bt"), *finished(p))
        stored = stored.select(*carried, "_bt", _size(p), _key(p), *[a.name for a in p.aggregates])
    changes = _buffered(b, ups, stored, 0, eager=False)
    return _stats(_sized(_placed(b, changes.filter("_what = 'emit'")), changes, stored))


def _sized(emits: DataFrame, changes: DataFrame, stored: DataFrame) -> DataFrame:
    """Entries and bytes added (or removed) per position: stored entries before the batch
    (position -1), puts and emissions."""
    return (emits.select("_pos", "_dc", "_db")
            .unionByName(changes.filter("_what = 'put'").select("_pos", "_dc", "_db"))
            .unionByName(stored.select(F.lit(-1).cast("long").alias("_pos"), F.lit(1).cast("long").alias("_dc"),
                                       F.col("_size").alias("_db"))))


def _buffered(b: Batch, ups: DataFrame, stored: DataFrame, limit_ms: int, eager: bool) -> DataFrame:
    """What the buffer does with the stored entries and the batch's updates: the fold's
    changes (``CHANGES``), checkpointed."""
    p = b.pipeline
    buf = p.suppression.buffer
    ident, carried = identity(p), _carried(p)
    base = [*carried, "_bt", "_size", "_key"]
    members = (stored.select(*base, F.lit(0).alias("_kind"), *[F.lit(None).cast("long").alias(c)
                                                               for c in ("_pos", "_sb", "_sa")])
               .unionByName(ups.select(*base, F.lit(1).alias("_kind"), "_pos", "_sb", "_sa")))
    if eager:  # the oldest entry of any key leaves when full: one fold over the batch in arrival order
        ticks = b.records.select(*[F.lit(None).cast(members.schema[c].dataType).alias(c) for c in base],
                                 F.lit(2).alias("_kind"), F.col("_ord.pos").alias("_pos"),
                                 F.lit(None).cast("long").alias("_sb"), F.greatest("_sb", "_ts").alias("_sa"))
        grouped = members.unionByName(ticks).withColumn("_g", F.lit(0)).groupBy("_g")
    else:  # keys hashed to a few groups, each folding its keys one after another
        buckets = int(b.records.sparkSession.conf.get("spark.sql.shuffle.partitions"))
        grouped = members.withColumn("_g", F.pmod(F.xxhash64(*ident), F.lit(buckets))).groupBy("_g")
    key_schema = ", ".join(f"{quoted(f.name)} {f.dataType.simpleString()}" for f in members.schema.fields
                           if f.name in carried)
    fold = _fold(carried, limit_ms, buf.record_limit if eager else None,
                 buf.byte_limit if eager else None, eager, b.stream_time)
    return grouped.applyInPandas(fold, f"{key_schema}, {CHANGES}").localCheckpoint(eager=True)


def _size(p: Pipeline) -> Column:
    """An entry's size: UTF-8 bytes of its value's string form (SPEC 3.6)."""
    text = F.col(p.aggregates[0].name).cast("string") if len(p.aggregates) == 1 \
        else F.to_json(F.struct(*[a.name for a in p.aggregates]))
    return F.coalesce(F.octet_length(text), F.lit(0)).cast("long").alias("_size")


def _key(p: Pipeline) -> Column:
    """The key's string form, which orders entries of equal buffer time."""
    return F.concat_ws("\u0000", *[F.col(k).cast("string") for k in p.keys]).alias("_key")


def _updates(b: Batch, buffer_time: Column | None = None) -> DataFrame:
    """One row per update: the entry it names, position, stream time before/after, update time
    (or ``buffer_time``), value and its size."""
    p = b.pipeline
    ident, carried = identity(p), _carried(p)
    rows = _sliding_rows(b, p.windows) if isinstance(p.windows, SlidingWindows) else _time_rows(b)
    spec = (f"PARTITION BY {', '.join(quoted(c) for c in ident)} ORDER BY _ord ASC NULLS FIRST "
            "ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW")
    if buffer_time is None:
        buffer_time = F.expr(f"max(_ts) OVER ({spec})") if p.windows is not None else F.col("_ts")
    running = rows.select(*carried, "_ord", "_sb", "_sa", "_touch", buffer_time.alias("_bt"),
                          *[F.expr(x.over(spec)).alias(x.column) for a in p.aggregates for x in a.partials])
    ups = running.filter("_touch")
    if p.windows is not None:  # a record's updates go by window start; its first one advances stream
        # time (and expires entries), so the later ones find the stream time after the record
        first = F.row_number().over(Window.partitionBy("_ord").orderBy("window_start")) == 1
        ups = ups.withColumn("_sb", F.when(first, F.col("_sb")).otherwise(F.col("_sa")))
    return (ups.select(*carried, "_ord", "_sb", "_sa", "_bt", *finished(p))
            .select(*carried, F.col("_ord.pos").alias("_pos"), "_sb", "_sa", "_bt",
                    _size(p), _key(p), *[a.name for a in p.aggregates]))


def _time_rows(b: Batch) -> DataFrame:
    """Per record and entry it updates (``_touch``): the record's partials; before them the
    stored partials of those entries (time windows and plain tables keep partials)."""
    p = b.pipeline
    ident, carried = identity(p), _carried(p)
    recs = b.records.withColumn("_sa", F.greatest("_sb", "_ts"))
    if p.windows is not None:
        recs = (assign(recs, p.windows).withColumn("window_start", F.explode("_acc"))
                .withColumn("window_end", F.col("window_start") + p.windows.size_ms))
    per_record = recs.groupBy(*carried, "_ord", "_sb", "_sa", "_ts").agg(*partials(p)).withColumn("_touch", F.lit(True))
    if b.state is None:
        return per_record
    parts = partial_names(p)
    stored = (b.state.select(*carried, *parts, "_max_ts").join(per_record.select(*ident).distinct(), ident, "left_semi")
              .select(*carried, F.lit(None).cast(per_record.schema["_ord"].dataType).alias("_ord"),
                      *[F.lit(None).cast("long").alias(c) for c in ("_sb", "_sa")],
                      F.col("_max_ts").alias("_ts"), *parts, F.lit(False).alias("_touch")))
    return per_record.unionByName(stored)


def _sliding_rows(b: Batch, w: SlidingWindows) -> DataFrame:
    """Sliding windows keep records, not partials: per window, a row for every record it holds
    (kept ones first), and one for a record that creates it without being in it (its right
    window, holding earlier records). A row is an update (``_touch``) when its record is new,
    the window is open for it (SPEC 3.1) and exists by then (``_def``, the record that created
    it, arrived no later), exactly the windows ``engine._sliding`` builds."""
    p = b.pipeline
    keys = list(p.keys)
    every = recent_records(b, w).join(b.records.select(*keys).distinct(), keys, "left_semi")
    rec = F.struct("_ord", "_ts", "_sb", "_new")  # ``_ord`` first: compares by arrival
    left = F.greatest(F.col("_ts") - w.size_ms, F.lit(0))
    # per window: the first record whose left window it is, and the first one 1 ms before it
    # (whose right window it is)
    lefts = every.groupBy(*keys, left.alias("window_start")).agg(F.min(rec).alias("_left"))
    rights = every.groupBy(*keys, (F.col("_ts") + 1).alias("window_start")).agg(F.min(rec).alias("_right"))
    windows = (lefts.join(rights, [*keys, "window_start"], "full")
               .withColumn("window_end", F.col("window_start") + w.size_ms)
               .withColumn("_close", F.col("window_end") + 1 + w.grace_ms)
               .filter(F.col("_close") > F.lit(b.stb)))  # open for some record of the batch
    on = [F.col(f"w.{k}") == F.col(f"r.{k}") for k in keys] + [
        F.col("r._ts").between(F.col("w.window_start"), F.col("w.window_end"))]
    held = windows.alias("w").join(every.alias("r"), on).select(
        "w.*", *[F.col(f"r.{c}") for c in every.columns if c not in keys])
    # a right window exists once its record and one inside it have arrived
    first_in = F.min(rec).over(Window.partitionBy(*keys, "window_start"))
    as_right = F.when(F.col("_right").isNotNull(), F.greatest("_right", "_first_in"))
    held = (held.withColumn("_first_in", first_in).withColumn("_def", F.least("_left", as_right))
            .withColumn("_sa", F.greatest("_sb", "_ts")))
    carried = [*keys, "window_start", "window_end"]
    touch = F.col("_new") & (F.col("_close") > F.col("_sb")) & (F.col("_ord") >= F.col("_def._ord"))
    members = (held.withColumn("_touch", touch)
               .groupBy(*carried, "_ord", "_sb", "_sa", "_ts", "_touch").agg(*partials(p)))
    d = F.col("_def")
    creator_outside = d["_new"] & (d["_ts"] < F.col("window_start")) & (F.col("_close") > d["_sb"])
    creations = held.filter((F.col("_ord") == F.col("_first_in._ord")) & creator_outside)  # one row per window
    return members.unionByName(creations.select(
        *carried, d["_ord"].alias("_ord"), d["_sb"].alias("_sb"), F.greatest(d["_sb"], d["_ts"]).alias("_sa"),
        F.lit(None).cast("long").alias("_ts"), F.lit(True).alias("_touch"),
        *[F.lit(None).cast(members.schema[c].dataType).alias(c) for c in partial_names(p)]))


def _fold(carried: list[str], limit_ms: int, max_records: int | None, max_bytes: int | None,
          eager: bool, stream_time: int | None):
    """A pandas function: run stored entries, updates (and ticks) through a buffer per key, or
    through one buffer for the whole group when ``eager``."""
    def entry_order(r: dict) -> tuple:
        return r["_key"], r.get("window_start") or 0

    def event(r: dict) -> eviction.Update | eviction.Tick:
        if r["_kind"] == 2:
            return eviction.Tick(int(r["_pos"]), int(r["_sa"]))
        return eviction.Update(tuple(r[c] for c in carried), entry_order(r), int(r["_pos"]), int(r["_sb"]),
                               int(r["_sa"]), int(r["_bt"]), int(r["_size"]), int(r["_pos"]))

    def run(pdf: pd.DataFrame) -> pd.DataFrame:
        groups: dict[object, list[dict]] = {}
        for r in pdf.drop(columns="_g").to_dict("records"):
            groups.setdefault(None if eager else tuple(r[c] for c in carried), []).append(r)
        out = []
        for rows in groups.values():
            buf = eviction.Buffer(limit_ms, max_records, max_bytes, eager)
            buf.load(eviction.Entry(tuple(r[c] for c in carried), entry_order(r), int(r["_bt"]), int(r["_size"]))
                     for r in rows if r["_kind"] == 0)
            events = [event(r) for r in sorted((r for r in rows if r["_kind"] != 0),
                                               key=lambda r: (r["_pos"], r["_kind"], r.get("window_start") or 0))]
            out += [(*c.entry.ident, c.kind, c.pos, c.stream_time, c.threshold, c.entry.ref, c.entry.time,
                     c.entry.size, c.entry.order[0], c.d_count, c.d_bytes)
                    for c in eviction.fold(buf, events, stream_time, end_known=eager)]
        return pd.DataFrame(out, columns=[*carried, "_what", "_pos", "_st", "_thr", "_ref", "_bt", "_size", "_key",
                                          "_dc", "_db"])
    return run


def _placed(b: Batch, emits: DataFrame) -> DataFrame:
    """Emits with their position and stream time: a per-key fold knows only the threshold of an
    entry that left between its updates; it left at the first record whose stream time reached
    it (stream time never decreases, so that record has the smallest such stream time)."""
    unknown = emits.filter(F.col("_pos").isNull())
    steps = b.records.groupBy(F.greatest("_sb", "_ts").alias("_v")).agg(F.min("_ord.pos").alias("_at"))
    if b.stream_time is not None:
        steps = steps.unionByName(b.records.sparkSession.createDataFrame(
            [(b.stream_time, eviction.END)], "_v long, _at long"))
    asks = unknown.select(F.col("_thr").alias("_v")).distinct().withColumn("_at", F.lit(None).cast("long"))
    # Descending, steps before asks at equal value, and of equal steps the earliest last (the
    # batch's end has the stream time of its last record, unless idle advancement moved it):
    # the last step seen is the smallest one >= the ask (a running frame: an unbounded-following
    # one would cost a pass per row).
    seen = Window.orderBy(F.desc("_v"), F.col("_at").isNull(), F.desc("_at")).rowsBetween(
        Window.unboundedPreceding, Window.currentRow)
    last: Column = F.last(F.when(F.col("_at").isNotNull(), F.struct("_v", "_at")), ignorenulls=True).over(seen)
    answers = (asks.unionByName(steps).select("_v", F.col("_at").isNull().alias("_ask"), last.alias("_step"))
               .filter("_ask").select(F.col("_v").alias("_thr"), F.col("_step._at").alias("_at"),
                                      F.col("_step._v").alias("_sv")))
    placed = (unknown.join(answers, "_thr").withColumn("_pos", F.col("_at")).withColumn("_st", F.col("_sv"))
              .drop("_at", "_sv"))
    return emits.filter(F.col("_pos").isNotNull()).unionByName(placed)


def _with_values(rows: DataFrame, ups: DataFrame, stored: DataFrame, ident: list[str], values: list[str]) -> DataFrame:
    """``rows`` (one per entry) with the entry's value: that of the update ``_ref``, or the
    stored one (``_ref`` null: not updated in this batch)."""
    from_update = rows.filter(F.col("_ref").isNotNull()).join(
        ups.select(*ident, F.col("_pos").alias("_ref"), *values), [*ident, "_ref"])
    from_store = rows.filter(F.col("_ref").isNull()).join(stored.select(*ident, *values), ident)
    return from_update.unionByName(from_store)
