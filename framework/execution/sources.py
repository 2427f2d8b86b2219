"""Reading a batch's input: schema checks, event-time parsing, fingerprint.

Everything that can be wrong with input is found here, in one pass, before any state is read
or written, and reported as an ``InputError`` naming the pipeline, the batch and the column.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from ..definition.aggregations import input_columns
from ..definition.columns import TS
from ..definition.pipeline import Pipeline
from ..errors import InputError
from .streamtime import to_datetime

TIME_TYPES = (T.TimestampType, T.TimestampNTZType, T.DateType, T.StringType)
KEY_TYPES = (
    T.StringType,
    T.IntegerType,
    T.LongType,
    T.ShortType,
    T.ByteType,
    T.BooleanType,
    T.DateType,
    T.TimestampType,
    T.TimestampNTZType,
    T.DecimalType,
)


@dataclass(frozen=True)
class BatchInput:
    """A validated batch: the frame with ``TS`` (event time, ms) and what identifies it."""

    frame: DataFrame
    count: int
    max_ts: int | None
    fingerprint: str
    schema_json: str


def _where(p: Pipeline, batch_id: str) -> str:
    return f"pipeline {p.name!r}, batch {batch_id!r}"


def _needed(p: Pipeline) -> dict[str, str]:
    """The input columns the pipeline reads, with their role."""
    needed = {
        p.timestamp: "event time",
        **{k: "group key" for k in p.keys},
        **{c: "aggregate input" for c in input_columns(p.aggregates)},
    }
    if p.arrival:
        needed[p.arrival] = "arrival order"
    return needed


def _check_columns(p: Pipeline, batch_id: str, df: DataFrame) -> None:
    types = {f.name: f.dataType for f in df.schema.fields}
    needed = _needed(p)
    for column, role in needed.items():
        if column not in types:
            raise InputError(
                f"{_where(p, batch_id)}: input has no column {column!r} ({role}); "
                f"columns present: {sorted(types)}. Nothing was committed."
            )
    reserved = sorted(c for c in types if c.startswith("_") and c not in needed)
    if reserved:  # the working columns (``definition.columns``) would clash with them deep in Spark
        raise InputError(
            f"{_where(p, batch_id)}: input column(s) {reserved} start with '_', which is reserved "
            "for the framework's working columns; drop or rename them upstream. Nothing was committed."
        )
    if not isinstance(types[p.timestamp], TIME_TYPES):
        raise InputError(
            f"{_where(p, batch_id)}: event time column {p.timestamp!r} has type "
            f"{types[p.timestamp].simpleString()}; expected timestamp, date or string."
        )
    for k in p.keys:
        if not isinstance(types[k], KEY_TYPES):
            raise InputError(
                f"{_where(p, batch_id)}: group key {k!r} has type {types[k].simpleString()}; "
                "keys must be atomic (string, integer, boolean, date, timestamp, decimal)."
            )


def _hashable(column: Column, data_type: T.DataType) -> Column:
    """``column`` in a form ``xxhash64`` accepts, equal for equal content (for the fingerprint).

    Spark refuses to hash maps (and variants), also nested in arrays and structs. A map becomes
    its entries sorted by key (then value), so the order it was built in does not count; a variant
    becomes its JSON text. Columns without either are hashed as they are, so the fingerprint of
    such input is what it always was (batches committed before still match on a re-run)."""
    if not _needs_canonical(data_type):
        return column
    if isinstance(data_type, T.MapType):
        if _needs_canonical(data_type.valueType):
            column = F.transform_values(column, lambda _, v: _hashable(v, data_type.valueType))
        return F.array_sort(F.map_entries(column))  # map keys hold no map or variant
    if isinstance(data_type, T.ArrayType):
        return F.transform(column, lambda x: _hashable(x, data_type.elementType))
    if isinstance(data_type, T.StructType):
        fields = [_hashable(column.getField(f.name), f.dataType).alias(f.name) for f in data_type.fields]
        return F.when(column.isNull(), F.lit(None)).otherwise(F.struct(*fields))
    return F.to_json(column)  # variant


def _needs_canonical(data_type: T.DataType) -> bool:
    if isinstance(data_type, (T.MapType, T.VariantType)):
        return True
    if isinstance(data_type, T.ArrayType):
        return _needs_canonical(data_type.elementType)
    if isinstance(data_type, T.StructType):
        return any(_needs_canonical(f.dataType) for f in data_type.fields)
    return False


def check_drift(p: Pipeline, batch_id: str, df: DataFrame, previous_schema: str | None) -> None:
    """Refuse a column the pipeline reads whose type differs from earlier batches'
    (``previous_schema``, as recorded by the ledger)."""
    if not previous_schema:
        return
    before, types = json.loads(previous_schema), {f.name: f.dataType for f in df.schema.fields}
    for column in _needed(p):
        now = types[column].simpleString()
        if column in before and before[column] != now:
            raise InputError(
                f"{_where(p, batch_id)}: column {column!r} was {before[column]} in earlier "
                f"batches and is {now} now (schema drift). Cast it back, or start a new pipeline."
            )


def read_batch(p: Pipeline, batch_id: str, df: DataFrame, latest_ms: int | None = None) -> BatchInput:
    """Validate ``df`` for pipeline ``p`` and add ``TS``; raises InputError on bad input
    (``check_drift`` compares the types with earlier batches').

    ``latest_ms`` is the latest plausible event time (the clock plus the allowed skew): one
    record from the far future would advance stream time and close every open window."""
    _check_columns(p, batch_id, df)
    raw = F.col(p.timestamp)
    is_text = isinstance(df.schema[p.timestamp].dataType, T.StringType)
    parsed = F.try_to_timestamp(raw) if is_text else raw.cast("timestamp")
    frame = df.withColumn(TS, F.floor(F.unix_micros(parsed) / 1000).cast("long"))
    ts = F.col(TS)
    columns = sorted(df.columns)
    row = frame.agg(
        F.count(F.lit(1)).alias("n"),
        F.sum(F.when(raw.isNull(), 1).otherwise(0)).alias("null_ts"),
        F.sum(F.when(raw.isNotNull() & ts.isNull(), 1).otherwise(0)).alias("bad_ts"),
        F.sum(F.when(ts < 0, 1).otherwise(0)).alias("pre_epoch"),
        F.sum(F.when(ts > F.lit(latest_ms), 1).otherwise(0)).alias("future"),
        F.max(ts).alias("max_ts"),
        F.first(F.when(raw.isNotNull() & ts.isNull(), raw.cast("string")), ignorenulls=True).alias("bad_example"),
        *[F.sum(F.when(F.col(k).isNull(), 1).otherwise(0)).alias(f"null_{i}") for i, k in enumerate(p.keys)],
        F.sum(F.xxhash64(*[_hashable(F.col(c), df.schema[c].dataType) for c in columns]).cast("decimal(38,0)")).alias(
            "h"
        ),
    ).collect()[0]
    where = _where(p, batch_id)
    if row["null_ts"]:
        raise InputError(
            f"{where}: {row['null_ts']} record(s) have a null event time in column "
            f"{p.timestamp!r}. Fix or filter them upstream; nothing was committed."
        )
    if row["bad_ts"]:
        raise InputError(
            f"{where}: {row['bad_ts']} record(s) have an unparsable event time in column "
            f"{p.timestamp!r} (e.g. {row['bad_example']!r}); nothing was committed."
        )
    if row["pre_epoch"]:
        raise InputError(
            f"{where}: {row['pre_epoch']} record(s) have an event time before 1970-01-01 in "
            f"column {p.timestamp!r}; windows start at the epoch. Nothing was committed."
        )
    if row["future"]:
        raise InputError(
            f"{where}: {row['future']} record(s) have an event time in column {p.timestamp!r} "
            f"after {to_datetime(latest_ms)} (the clock plus max_clock_skew), the latest at "
            f"{to_datetime(row['max_ts'])}; they would close every open window. Fix them upstream "
            "or raise Runtime(max_clock_skew=...); nothing was committed."
        )
    for i, k in enumerate(p.keys):
        if row[f"null_{i}"]:
            raise InputError(
                f"{where}: {row[f'null_{i}']} record(s) have a null group key {k!r}. "
                "Fill or filter them upstream; nothing was committed."
            )
    schema_json = json.dumps({f.name: f.dataType.simpleString() for f in df.schema.fields}, sort_keys=True)
    return BatchInput(frame, row["n"], row["max_ts"], f"{row['n']}:{row['h'] or 0}", schema_json)
