"""Stream time and arrival order.

*Stream time before record r* is the largest event time of every record that arrived before r
(earlier batches, then earlier in this batch). Judging lateness against it, record by record,
is what makes results independent of how the stream is split into batches (docs/design.md#batch-split-invariance).

It is a prefix maximum over arrival order, computed as a parallel scan: range-partition the
batch by arrival order, take each partition's maximum and size (a handful of numbers brought
to the driver), prefix them, then run a local running maximum inside each partition.
"""

from __future__ import annotations

import datetime as dt

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from ..definition.columns import ARRIVAL, STREAM_BEFORE

NO_TIME = -(2**63)  # stream time before the first record: every window is open
EPOCH = dt.datetime(1970, 1, 1)


def to_datetime(ms: int | None) -> dt.datetime | None:
    """A stream or event time (epoch milliseconds, UTC) as a naive UTC datetime."""
    return None if ms is None else EPOCH + dt.timedelta(milliseconds=ms)


def to_epoch_millis(t: dt.datetime) -> int:
    """Epoch milliseconds of ``t`` (naive times are UTC, as the session's time zone)."""
    if t.tzinfo is not None:
        t = t.astimezone(dt.timezone.utc).replace(tzinfo=None)
    return (t - EPOCH) // dt.timedelta(milliseconds=1)


def arrival_order(df: DataFrame, timestamp_ms: str, arrival: str | None, keys: tuple[str, ...]) -> list[str]:
    """Columns giving a total, deterministic arrival order inside a batch.

    With an arrival column: that column, then event time and key as tie-breakers. Without one,
    records are taken in event-time order, ties by key, then by the other (orderable) values.
    """
    if arrival:
        head = [arrival, timestamp_ms, *keys]
    else:
        head = [timestamp_ms, *keys]
    orderable = [
        f.name
        for f in df.schema.fields
        if f.name not in head and f.dataType.typeName() not in ("array", "map", "struct", "binary")
    ]
    return head + sorted(orderable)


def with_stream_time(
    df: DataFrame,
    order: list[str],
    timestamp_ms: str,
    seq: int | Column,
    stream_time_before: int | None,
    per_record: bool,
    partitions: int,
    batch_max: int | None,
) -> tuple[DataFrame, int | None]:
    """Add ``ARRIVAL`` (struct of batch seq and position) and ``STREAM_BEFORE`` (stream time
    before the record).

    ``seq`` is the batch's sequence number (a column for a chunk of a range, whose records are
    in the batches of their intervals). ``partitions`` is the scan's parallelism (1 for small
    batches); ``batch_max`` is the batch's largest event time, known from input validation. Returns the checkpointed
    frame and the stream time after the batch. With
    ``per_record=False`` (lateness="batch") every record is judged against the stream time
    before the batch, as Structured Streaming's watermark does.
    """
    spark = df.sparkSession
    prev = NO_TIME if stream_time_before is None else stream_time_before
    if partitions > 1:
        ranged = (
            df.repartitionByRange(partitions, *order)
            .withColumn("_part", F.spark_partition_id())
            .localCheckpoint(eager=True)
        )
        stats = sorted(
            ranged.groupBy("_part").agg(F.max(timestamp_ms).alias("m"), F.count(F.lit(1)).alias("n")).collect()
        )
    else:  # a small batch: one partition, no sampling or per-partition statistics needed
        ranged = df.repartition(1).withColumn("_part", F.lit(0))
        stats = []
    prefix_rows, running_max, offset = [], prev, 0
    for part, part_max, count in stats:
        prefix_rows.append((part, running_max, offset))
        running_max, offset = max(running_max, part_max), offset + count
    prefix = spark.createDataFrame(prefix_rows or [(0, prev, 0)], "_part int, _before long, _offset long")

    before = F.col("_before") if per_record else F.lit(prev)
    seq_col = F.lit(seq) if isinstance(seq, int) else seq
    joined = ranged.join(F.broadcast(prefix), "_part")
    out = _scanned(joined, "_part", order, timestamp_ms, before, per_record, seq_col, F.col("_offset"))
    out = out.drop("_part", "_before", "_offset")
    if partitions == 1 and batch_max is not None:
        running_max = max(prev, batch_max)
    after = None if running_max == NO_TIME else running_max
    return out.localCheckpoint(eager=True), after


def within_intervals(
    df: DataFrame, order: list[str], timestamp_ms: str, interval: str, seq: Column, before: Column, per_record: bool
) -> DataFrame:
    """``with_stream_time`` for a chunk of a range: each interval's records (``interval``) are
    scanned on their own, from the stream time ``before`` it, in their batch ``seq``. A chunk's
    intervals are many and alike in size, so they are the scan's partitions: no sampled range
    partitioning, no per-partition prefix, one materialization instead of two (half of a week's
    chunk went to the batch's scan). A record's position counts within its interval, offset by
    the interval (``POS_STRIDE``), so positions stay unique in the chunk and ordered as arrival."""
    first = F.col(interval).cast("long") * POS_STRIDE
    return _scanned(df, interval, order, timestamp_ms, before, per_record, seq, first).localCheckpoint(eager=True)


POS_STRIDE = 2**40  # positions an interval of a chunk can hold (a trillion records)


def _scanned(
    df: DataFrame,
    part: str,
    order: list[str],
    timestamp_ms: str,
    before: Column,
    per_record: bool,
    seq: Column,
    first: Column,
) -> DataFrame:
    """The scan ``with_stream_time`` and ``within_intervals`` share, in each ``part`` in arrival
    ``order``: ``STREAM_BEFORE`` is ``before`` the part, raised (``per_record``) by the largest
    event time of the part's earlier records; ``ARRIVAL`` is (``seq``, the part's ``first``
    position plus the record's place in the part)."""
    w = Window.partitionBy(part).orderBy(*order)
    local_before = F.max(timestamp_ms).over(w.rowsBetween(Window.unboundedPreceding, -1))
    sb = F.greatest(before, F.coalesce(local_before, F.lit(NO_TIME))) if per_record else before
    pos = first + F.row_number().over(w) - 1
    arrival = F.struct(seq.cast("long").alias("seq"), pos.cast("long").alias("pos"))
    return df.withColumn(STREAM_BEFORE, sb.cast("long")).withColumn(ARRIVAL, arrival)


def at_batch_start(
    df: DataFrame, stream_time_before: int | None, batch_max: int | None
) -> tuple[DataFrame, int | None]:
    """Add ``STREAM_BEFORE``: every record judged against the stream time before the batch
    (``lateness="batch"``), for plans that need no arrival position. No scan, no shuffle:
    the stream time after the batch is its largest event time, known from input validation."""
    prev = NO_TIME if stream_time_before is None else stream_time_before
    after = max(prev, batch_max) if batch_max is not None else prev
    return df.withColumn(STREAM_BEFORE, F.lit(prev).cast("long")), None if after == NO_TIME else after


def first_reaching(value: str, thresholds: list[int]) -> Column:
    """The index of the first of the nondecreasing ``thresholds`` that is at least ``value`` (a
    SQL expression; ``len(thresholds)`` when none is): the interval of a chunk whose stream time
    after it first reaches a window's close time. A binary search, so a row takes about
    log2(n) comparisons and no join; built as one SQL text, as a tree of ``Column`` calls costs
    a round trip to the JVM a node (over a second for a chunk of a week of hours).

    Up to ``INLINE_SEARCH`` thresholds the search is nested ``CASE`` expressions, compiled into
    the query's code; past that, the code outgrew the JVM's 64 KB method limit (a month of hours
    did) and Spark logged an ERROR and ran the query interpreted. Longer lists are searched by
    ``aggregate`` over the steps of the search, the thresholds one constant array: about a
    microsecond a row, for any length."""
    n = len(thresholds)
    if n <= INLINE_SEARCH:

        def search(lo: int, hi: int) -> str:  # the answer is in [lo, hi]
            if lo == hi:
                return str(lo)
            mid = (lo + hi) // 2
            below = f"{value} <= {_long(thresholds[mid])}"
            return f"CASE WHEN {below} THEN {search(lo, mid)} ELSE {search(mid + 1, hi)} END"

        return F.expr(search(0, n))
    constants = f"array({', '.join(_long(t) for t in thresholds)})"
    # the answer is in [lo, hi]; the lambda's names are unlike a column's (a column named like one
    # would be shadowed by it inside the lambda)
    lo, hi, mid = "__search.lo", "__search.hi", "CAST((__search.lo + __search.hi) DIV 2 AS INT)"
    step = (
        f"IF({lo} >= {hi}, __search, IF({value} <= element_at({constants}, {mid} + 1), "
        f"named_struct('lo', {lo}, 'hi', {mid}), named_struct('lo', {mid} + 1, 'hi', {hi})))"
    )
    start = f"named_struct('lo', 0, 'hi', {n})"
    return F.expr(f"aggregate(sequence(1, {n.bit_length()}), {start}, (__search, __step) -> {step}).lo")


INLINE_SEARCH = 128  # thresholds ``first_reaching`` compiles inline (168 compiled; 720 outgrew 64 KB)


def _long(t: int) -> str:
    """``t`` as a SQL bigint literal (the smallest long has no literal of its own)."""
    return f"{t}L" if t != NO_TIME else f"({NO_TIME + 1}L - 1L)"


def pick(index: Column, values: list) -> Column:
    """``values[index]``, ``values`` a short list of literals (one per interval of a chunk)."""
    return F.element_at(F.array(*[F.lit(v) for v in values]), index + 1)
