"""What a batch's plan works from and yields (``Batch``, ``Effect``, ``Limited``), the one
shape of the updates every plan gives a suppression buffer, and the columns its
aggregates build: shared by ``plans``, a plan per window type, and ``ratelimit``, which replaces
an effect's results by what a suppression buffer emits, so neither imports the other for them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from ..definition.columns import (
    ARRIVAL,
    ARRIVAL_POS,
    BUCKET,
    CLOSE,
    GONE,
    INTERVAL,
    MAX_TS,
    POS,
    RECORD,
    STEP,
    STREAM_AFTER,
    STREAM_BEFORE,
    TOUCH,
    TS,
    UPDATED_AT,
)
from ..definition.names import quoted
from ..definition.pipeline import Pipeline
from ..definition.windows import WindowType
from .streamtime import NO_TIME


@dataclass(kw_only=True)
class Batch:
    """What one batch works from: its records (with ``TS``, ``STREAM_BEFORE``, ``ARRIVAL``) and state."""

    pipeline: Pipeline
    seq: int
    records: DataFrame
    stream_time_before: int | None
    stream_time: int | None
    state: DataFrame | None  # the window rows of ``_state`` as of the last committed batch
    bucket_ms: int
    buffer: DataFrame | None = None  # until_time_limit: the suppression buffer as of the last committed batch
    keep: Callable[[DataFrame], DataFrame] = lambda df: df  # checkpoints a frame read more than once (``Kept``)
    event_times: tuple[int, int] | None = None  # the first and last event time of the records (ms)
    input_columns: tuple[str, ...] = ()  # the input's columns, as given: a late record is kept as their JSON
    reduced: DataFrame | None = None  # the records as the batch's one pass kept them (``plans.reduce``)

    @property
    def time_before(self) -> int:
        """Stream time before the batch, ``NO_TIME`` before any record (comparable in SQL)."""
        return NO_TIME if self.stream_time_before is None else self.stream_time_before

    @property
    def time_after(self) -> int:
        """Stream time after the batch, ``NO_TIME`` before any record."""
        return NO_TIME if self.stream_time is None else self.stream_time

    def bucket(self) -> Column:
        """The state partition (``BUCKET``) of a window row, from its close time."""
        return F.floor(F.col(CLOSE) / self.bucket_ms).cast("long")

    def stored(self, like: DataFrame) -> DataFrame:
        """Stored window state shaped like ``like``; empty before the first commit."""
        return like.limit(0) if self.state is None else self.state.select(*like.columns)

    def keep_stored(self, df: DataFrame) -> DataFrame:
        """``df``, a frame of stored state a plan reads more than once, checkpointed (``keep``):
        each read of state plans a Delta scan of its own. Before any state there is nothing to keep."""
        return df if self.state is None else self.keep(df)

    def open_state(self, like: DataFrame) -> DataFrame:
        """Stored windows (all open: closed ones are deleted), pruned to the buckets not yet due."""
        if self.state is None:
            return like.limit(0)
        low = self.time_before // self.bucket_ms if self.time_before != NO_TIME else NO_TIME
        return self.state.filter(F.col(BUCKET) >= F.lit(low)).select(*like.columns)

    def record_windows(self, w: WindowType, recs: DataFrame) -> DataFrame:
        """A window per key and event time holding its records: the shape stored windows of
        sessions and sliding windows are read in (``stored``, ``open_state``)."""
        return (
            recs.groupBy(*self.pipeline.keys, F.col(TS).alias("window_start"), F.col(TS).alias("window_end"))
            .agg(*partials(self.pipeline), F.max(TS).alias(MAX_TS))
            .withColumn(CLOSE, w.close(F.col("window_end")))
            .withColumn(BUCKET, self.bucket())
        )


@dataclass
class Limited:
    """What the buffer did in one batch."""

    emissions: DataFrame  # sink rows: keys, window bounds (ms), aggregates, ``GONE``, ``EMITTED_AT``
    buffer: DataFrame  # the buffer after the batch: entries with ``BUFFER_TIME``, ``SIZE``, ``ENTRY_KEY``, values
    changes: DataFrame  # ``POS``, ``_dc``, ``_db``: entries and bytes added (or removed) per position

    def stats(self) -> DataFrame:
        """Buffer count and bytes after the batch and their largest value after any record (one
        row: ``BUFFER_STATS``), to collect with the batch's other counts."""
        return buffer_stats(self.changes)


BUFFER_STATS = ("count", "count_max", "size", "size_max")


def buffer_stats(changes: DataFrame) -> DataFrame:
    """Count and bytes of a buffer after a batch and their largest value after any record, from
    its changes (``Limited.changes``): one row of ``BUFFER_STATS``."""
    per_pos = changes.groupBy(POS).agg(F.sum("_dc").alias("dc"), F.sum("_db").alias("db"))
    upto = Window.orderBy(POS).rowsBetween(Window.unboundedPreceding, Window.currentRow)
    running = per_pos.select(POS, F.sum("dc").over(upto).alias("n"), F.sum("db").over(upto).alias("b"))
    return running.agg(
        F.max("n").alias("count_max"),
        F.max("b").alias("size_max"),
        F.max_by("n", POS).alias("count"),
        F.max_by("b", POS).alias("size"),
    )


def collected_stats(row: dict) -> dict:
    """``buffer_stats``'s row as a dict of ints (an empty buffer's nulls as 0)."""
    return {k: int(row.get(k) or 0) for k in BUFFER_STATS}


@dataclass(kw_only=True)
class Effect:
    """A batch's effect: state rows to upsert/delete, results, late records, counters."""

    state_changes: DataFrame | None  # window rows + ``GONE``, MERGEd into ``_state``: closed/gone rows deleted
    state_rewrite: tuple[DataFrame, str] | None  # or: rows written replacing the state matching a predicate
    results: DataFrame  # keys, window bounds (ms), finished aggregates, ``GONE``
    late: DataFrame  # records that landed in no window (``late_rows``)
    closed: DataFrame  # the windows that closed in this batch
    results_are_closed: bool = False  # each result row is a window that closed (final results of time windows)
    counted: DataFrame  # per-record frame the counters aggregate over
    counters: dict[str, Column]  # aggregate expressions over ``counted`` for metrics
    open_windows: DataFrame  # windows (or keys) held in state after the batch
    limited: Limited | None = None  # until_time_limit: what the suppression buffer did (``ratelimit``)
    opened: DataFrame | None = None  # the windows (or keys) the batch added to state (all but sliding windows)
    replaced: DataFrame | None = None  # sessions: the stored windows a merge or an extension took out of state
    updates: DataFrame | None = None  # when ``wants_updates``: each update (the shape below)
    # sessions in a chunk of a range: each record with its ``INTERVAL`` and the sessions it opened
    # (``_opens``: 1 less the open sessions it joined; null when late), which a chunk sums by interval
    opens: DataFrame | None = None
    # time windows in a chunk of a range: the windows each interval updated (identity, ``INTERVAL``)
    touched: DataFrame | None = None


# ---- the updates a suppression buffer takes ----------------------------------------------------
# Every plan gives its updates (``Effect.updates``) in one shape, one row per update a record
# makes, as Kafka forwards them record by record: the window (or key) it updates
# (``Pipeline.keys_and_bounds``),
# the record's position (``POS``) and the update's place among its record's updates (``STEP``),
# the stream time before and after the record, the update's time (``UPDATED_AT``, as Kafka stamps
# it: the largest event time the window holds so far, a session's end, a plain table's record
# time), whether it is a tombstone (``GONE``: a session merged away or extended) and the window's
# partials after it (null for a tombstone). A suppression buffer (``ratelimit``) reads only this.


def wants_updates(p: Pipeline) -> bool:
    """Whether a plan gives its updates record by record (``Effect.updates``): for a
    rate-limiting buffer, or a final-results one measured after every record."""
    return p.emission.buffered or holds_until_close(p)


def holds_until_close(p: Pipeline) -> bool:
    """Whether the batch measures its final-results buffer after every record
    (``ratelimit.held_until_close``): a bounded one that shuts down when full, where records
    are late one by one (lateness="record"); with lateness="batch" the open windows after the
    batch are its size."""
    return strict(p) and not p.emission.buffered and p.windows is not None and p.lateness == "record"


def strict(p: Pipeline) -> bool:
    """Whether ``p``'s buffer is bounded and shuts down when full (a batch that would overfill it
    is refused before its writes: ``planning.check_buffer``)."""
    buf = p.suppression.buffer if p.suppression is not None else None
    return buf is not None and buf.shuts_down_when_full() and (buf.record_limit, buf.byte_limit) != (None, None)


def running_updates(p: Pipeline, rows: DataFrame) -> DataFrame:
    """Updates from ``rows`` whose running merge per window in arrival order is each update's
    value: a window's stored partials first (no ``ARRIVAL``), then a row per record it holds,
    ``TOUCH`` where the record updated it. Rows: the keys and bounds, ``ARRIVAL``,
    ``STREAM_BEFORE``, ``STREAM_AFTER``, ``TS``, ``TOUCH``, partials."""
    ident = p.identity
    spec = (
        f"PARTITION BY {', '.join(quoted(c) for c in ident)} ORDER BY {ARRIVAL} ASC NULLS FIRST "
        "ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW"
    )
    updated_at = F.expr(f"max({TS}) OVER ({spec})") if p.windows is not None else F.col(TS)
    running = rows.select(
        *p.keys_and_bounds,
        ARRIVAL,
        STREAM_BEFORE,
        STREAM_AFTER,
        TOUCH,
        updated_at.alias(UPDATED_AT),
        *[F.expr(x.over(spec)).alias(x.column) for a in p.aggregates for x in a.partials],
    ).filter(TOUCH)
    step = F.lit(0)
    if p.windows is not None:  # a record's updates go by window start
        step = F.row_number().over(Window.partitionBy(ARRIVAL_POS).orderBy("window_start")) - 1
    return running.select(
        *p.keys_and_bounds,
        F.col(ARRIVAL_POS).alias(POS),
        step.cast("long").alias(STEP),
        STREAM_BEFORE,
        STREAM_AFTER,
        UPDATED_AT,
        F.lit(False).alias(GONE),
        *partial_names(p),
    )


def partial_updates(b: Batch, held: DataFrame, touched: DataFrame) -> DataFrame:
    """Updates of the windows (or keys) whose state is a log of partials (time windows, plain
    tables): ``held`` has a row per record and window it lands in (its keys and bounds),
    ``touched`` the stored rows of those windows (the plan's one read of them); each record's
    partials, after the window's stored partials (no arrival, not an update, their latest event
    time as ``TS``), make the running merge."""
    p = b.pipeline
    after = F.greatest(STREAM_BEFORE, TS).alias(STREAM_AFTER)
    per_record = (
        held.groupBy(*p.keys_and_bounds, ARRIVAL, STREAM_BEFORE, after, TS)
        .agg(*partials(p))
        .withColumn(TOUCH, F.lit(True))
    )
    if b.state is None:
        return running_updates(p, per_record)
    parts = partial_names(p)
    stored = touched.select(
        *p.keys_and_bounds,
        F.lit(None).cast(per_record.schema[ARRIVAL].dataType).alias(ARRIVAL),
        *[F.lit(None).cast("long").alias(c) for c in (STREAM_BEFORE, STREAM_AFTER)],
        F.col(MAX_TS).alias(TS),
        F.lit(False).alias(TOUCH),
        *parts,
    )
    return running_updates(p, per_record.unionByName(stored))


# ---- a plan's counters --------------------------------------------------------------------------
def late_rows(b: Batch, records: DataFrame) -> DataFrame:
    """Late ``records`` as a plan gives them (``Effect.late``): keys, ``TS``, ``STREAM_BEFORE``
    and the record as given, as JSON (``RECORD``)."""
    carried = [INTERVAL] if INTERVAL in records.columns else []  # a chunk's: the interval of each
    return records.select(*b.pipeline.keys, TS, STREAM_BEFORE, record_json(b.input_columns).alias(RECORD), *carried)


def record_json(columns: tuple[str, ...]) -> Column:
    """An input record as kept with the late records: its ``columns`` as JSON."""
    return F.to_json(F.struct(*[F.col(c) for c in columns]))


def lateness(per_record: Column | None = None) -> dict[str, Column]:
    """How late the batch's records were: average and largest stream time before minus event
    time, over the rows ``per_record`` picks (one per record, where a record has several)."""
    late_by = F.when(F.col(STREAM_BEFORE) > F.col(TS), F.col(STREAM_BEFORE) - F.col(TS)).otherwise(0)
    if per_record is not None:
        late_by = F.when(per_record, late_by)  # avg and max skip the nulls of the rows left out
    return {"record_lateness_avg": F.avg(late_by).cast("double"), "record_lateness_max": F.max(late_by).cast("double")}


def counters(dropped: Column, late: Column, per_record: Column | None = None) -> dict[str, Column]:
    """A windowed plan's counters over its per-record frame (or a row per record and window,
    ``per_record`` picking one of a record's rows): the windows each record was too late for
    (Kafka's drop metric counts each), the records too late for every window, lateness."""
    return {
        "late_record_drop_total": F.sum(dropped),
        "late_records": F.sum(F.when(late, 1).otherwise(0)),
        **lateness(per_record),
    }


# ---- the columns of a pipeline's aggregates ---------------------------------------------------
def partials(p: Pipeline) -> list[Column]:
    return [F.expr(x.partial).alias(x.column) for a in p.aggregates for x in a.partials]


def merges(p: Pipeline) -> list[Column]:
    return [F.expr(x.merge).alias(x.column) for a in p.aggregates for x in a.partials]


def finished(p: Pipeline) -> list[Column]:
    return [F.expr(a.finish).alias(a.name) for a in p.aggregates]


def partial_names(p: Pipeline) -> list[str]:
    return [x.column for a in p.aggregates for x in a.partials]
