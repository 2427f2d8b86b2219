"""What a batch's plan works from and yields (``Batch``, ``Effect``, ``Limited``) and the
columns its aggregates build: shared by ``engine``, which plans a batch, and ``ratelimit``, which
replaces an effect's results by what a suppression buffer emits, so neither imports the other
for them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from ..definition.columns import POS
from ..definition.pipeline import Pipeline
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

    @property
    def time_before(self) -> int:
        """Stream time before the batch, ``NO_TIME`` before any record (comparable in SQL)."""
        return NO_TIME if self.stream_time_before is None else self.stream_time_before

    @property
    def time_after(self) -> int:
        """Stream time after the batch, ``NO_TIME`` before any record."""
        return NO_TIME if self.stream_time is None else self.stream_time


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
    late: DataFrame  # records that landed in no window
    closed: DataFrame  # the windows that closed in this batch
    results_are_closed: bool = False  # each result row is a window that closed (final results of time windows)
    counted: DataFrame  # per-record frame the counters aggregate over
    counters: dict[str, Column]  # aggregate expressions over ``counted`` for metrics
    open_windows: DataFrame  # windows (or keys) held in state after the batch
    limited: Limited | None = None  # until_time_limit: what the suppression buffer did (``ratelimit``)
    opened: DataFrame | None = None  # time windows: the windows the batch added to state
    # the updates a suppression buffer takes (``ratelimit``), where the window type decides them:
    # sliding windows: rows whose running merge is each update; session windows: one row per
    # update (Kafka's forwards: tombstones ``GONE``), with ``POS``, ``STEP`` and merged partials
    updates: DataFrame | None = None


# ---- the columns of a pipeline's aggregates ---------------------------------------------------
def partials(p: Pipeline) -> list[Column]:
    return [F.expr(x.partial).alias(x.column) for a in p.aggregates for x in a.partials]


def merges(p: Pipeline) -> list[Column]:
    return [F.expr(x.merge).alias(x.column) for a in p.aggregates for x in a.partials]


def finished(p: Pipeline) -> list[Column]:
    return [F.expr(a.finish).alias(a.name) for a in p.aggregates]


def partial_names(p: Pipeline) -> list[str]:
    return [x.column for a in p.aggregates for x in a.partials]
