"""Reading a batch's input: schema checks, event-time parsing, fingerprint.

Everything that can be wrong with input is found here, in one pass, before any state is read
or written, and reported as an ``InputError`` naming the pipeline, the batch and the column
(and, for checks of single records, the first few records that fail them), or, for a pipeline
that quarantines bad records, set aside as rejected records.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from ..definition.aggregations import input_columns
from ..definition.columns import INTERVAL, TS
from ..definition.pipeline import Pipeline
from ..errors import InputError
from .streamtime import arrival_order, to_datetime

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
DEFAULT_COLLATION = "UTF8_BINARY"  # the only one keys may have: a record's key is its bytes
EXAMPLES = 3  # offending records an error about input records names


@dataclass(frozen=True)
class BatchInput:
    """A validated batch: the frame with ``TS`` (event time, ms) and what identifies it."""

    frame: DataFrame  # the records the batch processes (rejected ones left out)
    count: int  # records in the input, rejected ones included
    max_ts: int | None  # of the records processed
    fingerprint: str  # of the whole input
    schema_json: str
    columns: tuple[str, ...] = ()  # of the input, as given
    min_ts: int | None = None  # of the records processed
    rejected: int = 0  # records that failed a per-record check (``bad_records="quarantine"``)
    rejected_rows: DataFrame | None = None  # those records: ``reason``, ``record`` (JSON)


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
        key_type = types[k]
        if isinstance(key_type, T.StringType) and key_type.collation != DEFAULT_COLLATION:
            raise InputError(  # SQL would group 'A' and 'a' as one key, the sessions' fold in Python as two
                f"{_where(p, batch_id)}: group key {k!r} has collation {key_type.collation}; keys compare byte "
                f"for byte ({DEFAULT_COLLATION}). Normalize the key upstream: collate(lower({k}), "
                f"'{DEFAULT_COLLATION}') for case-insensitive keys (lower() keeps the collation), "
                f"collate({k}, '{DEFAULT_COLLATION}') for case-sensitive ones. Nothing was committed."
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


@dataclass(frozen=True)
class CheckedInput:
    """A batch's input whose columns passed the checks, before any record is read: its records
    with ``TS``, the per-record checks, and the summary one read of them computes (``summary``),
    in a query of its own (``read``) or on the way of the plan's pass over the records that pass
    the checks (not ``bad``), which calls ``validated`` with it before it uses its result."""

    pipeline: Pipeline
    batch_id: str
    source: DataFrame  # the input as given
    frame: DataFrame  # with ``TS``
    checks: list[RecordCheck]

    @property
    def columns(self) -> tuple[str, ...]:
        """The input's columns, as given."""
        return tuple(self.source.columns)

    @property
    def bad(self) -> Column:
        """Whether a record fails a check."""
        bad = F.lit(False)
        for check in self.checks:
            bad = bad | check.fails
        return bad

    def summary(self) -> list[Column]:
        """What validation needs of the whole input, in one aggregate: the count, each check's
        failures, the records set aside, the event-time range and the fingerprint's hash."""
        bad, df = self.bad, self.source
        return [
            F.count(F.lit(1)).alias("n"),
            *[F.count_if(check.fails).alias(f"failed_{i}") for i, check in enumerate(self.checks)],
            F.count_if(bad).alias("rejected"),
            F.max(F.when(~bad, F.col(TS))).alias("max_ts"),
            F.min(F.when(~bad, F.col(TS))).alias("min_ts"),
            F.sum(
                F.xxhash64(*[_hashable(F.col(c), df.schema[c].dataType) for c in sorted(df.columns)]).cast(
                    "decimal(38,0)"
                )
            ).alias("h"),
        ]

    def read(self) -> BatchInput:
        """Validate the records in a query of their own (``validated``).

        Records failing a ``record_checks`` check refuse the batch (InputError), naming the first
        few of them, unless the pipeline quarantines bad records (``bad_records="quarantine"``):
        then they are left out of the batch and kept in ``BatchInput.rejected_rows``. Either way
        the fingerprint covers the whole input, so a re-run with the same input finds the batch
        committed."""
        return self.validated(self.frame.agg(*self.summary()).collect()[0].asDict())

    def validated(self, row: dict) -> BatchInput:
        """The batch's input from ``summary``'s values; raises InputError for failing records
        unless the pipeline quarantines them (``read``)."""
        p, batch_id, frame, checks = self.pipeline, self.batch_id, self.frame, self.checks
        failed = [(check, row[f"failed_{i}"]) for i, check in enumerate(checks) if row[f"failed_{i}"]]
        if failed and p.bad_records == "refuse":
            check, count = failed[0]
            raise InputError(
                f"{_where(p, batch_id)}: {count} record(s) {check.problem} (first by arrival order: "
                f"{_examples(p, frame, check.fails)}). {check.advice} and re-run the batch, or define the "
                "pipeline with bad_records='quarantine' to set such records aside and go on; nothing was committed."
            )
        rejected_rows = None
        if failed:
            reason = F.coalesce(*[F.when(check.fails, F.lit(check.reason)) for check in checks])
            record = F.to_json(F.struct(*[F.col(c) for c in self.source.columns]), {"ignoreNullFields": "false"})
            carried = [INTERVAL] if INTERVAL in frame.columns else []  # a chunk's: the batch of each
            rejected_rows = frame.filter(self.bad).select(reason.alias("reason"), record.alias("record"), *carried)
            frame = frame.filter(~self.bad)
        fields = self.source.schema.fields
        return BatchInput(
            frame=frame,
            count=row["n"],
            max_ts=row["max_ts"],
            min_ts=row["min_ts"],
            fingerprint=fingerprint(row),
            columns=self.columns,
            schema_json=json.dumps({f.name: f.dataType.simpleString() for f in fields}, sort_keys=True),
            rejected=row["rejected"],
            rejected_rows=rejected_rows,
        )


def fingerprint(summary: dict) -> str:
    """A batch's input fingerprint from its ``CheckedInput.summary`` row: the record count and
    the sum of the records' hashes, so it does not depend on the records' order."""
    return f"{summary['n']}:{summary['h'] or 0}"


def check_input(p: Pipeline, batch_id: str, df: DataFrame, latest_ms: int | Column | None = None) -> CheckedInput:
    """Check ``df``'s columns for pipeline ``p`` (InputError when one is missing, reserved or of
    a wrong type, ``check_drift`` compares the types with earlier batches') and add ``TS``; no
    record is read (``CheckedInput.read``).

    ``latest_ms`` is the latest plausible event time (the clock plus the allowed skew): one
    record from the far future would advance stream time and close every open window. A chunk
    of a range gives a column: each record's interval's limit."""
    _check_columns(p, batch_id, df)
    raw = F.col(p.timestamp)
    is_text = isinstance(df.schema[p.timestamp].dataType, T.StringType)
    parsed = F.try_to_timestamp(raw) if is_text else raw.cast("timestamp")
    frame = df.withColumn(TS, F.floor(F.unix_micros(parsed) / 1000).cast("long"))
    return CheckedInput(p, batch_id, df, frame, record_checks(p, latest_ms))


@dataclass(frozen=True)
class RecordCheck:
    """A check every input record must pass: the ``reason`` a rejected record is kept with,
    when a record ``fails`` it (never null), and what an error says about such records."""

    reason: str
    fails: Column
    problem: str  # follows "<n> record(s) "
    advice: str


def record_checks(p: Pipeline, latest_ms: int | Column | None) -> list[RecordCheck]:
    """The per-record input checks of ``p``, in the order a record's reason is picked: the
    event time (``TS`` once parsed from column ``p.timestamp``) and the group keys."""
    raw, ts, column = F.col(p.timestamp), F.col(TS), p.timestamp
    upstream = "Fix or filter them upstream"
    checks = [
        _check("null event time", raw.isNull(), f"have a null event time in column {column!r}", upstream),
        _check(
            "unparsable event time",
            raw.isNotNull() & ts.isNull(),
            f"have an unparsable event time in column {column!r}",
            upstream,
        ),
        _check(
            "event time before 1970",
            ts < 0,
            f"have an event time before 1970-01-01 in column {column!r}; windows start at the epoch",
            upstream,
        ),
    ]
    if latest_ms is not None:
        latest = "their batch's end" if isinstance(latest_ms, Column) else to_datetime(latest_ms)
        checks.append(
            _check(
                "event time beyond the allowed clock skew",
                ts > F.lit(latest_ms),
                f"have an event time in column {column!r} after {latest} (the clock plus "
                "max_clock_skew); they would close every open window",
                f"{upstream}, or raise Runtime(max_clock_skew=...)",
            )
        )
    for k in p.keys:
        checks.append(_check(f"null group key {k}", F.col(k).isNull(), f"have a null group key {k!r}", upstream))
    return checks


def _check(reason: str, fails: Column, problem: str, advice: str) -> RecordCheck:
    return RecordCheck(reason, F.coalesce(fails, F.lit(False)), problem, advice)


def _examples(p: Pipeline, frame: DataFrame, fails: Column) -> str:
    """The first ``EXAMPLES`` records (by arrival order) for which ``fails`` holds: their
    arrival column, keys and event time as given, times as Spark prints them in the session's
    time zone (one more Spark job, on the error path only)."""
    shown = list(dict.fromkeys(c for c in (p.arrival, *p.keys, p.timestamp) if c))
    order = arrival_order(frame, TS, p.arrival, p.keys)
    as_text = [F.col(c).cast("string") if c == p.timestamp else F.col(c) for c in shown]
    rows = frame.filter(fails).orderBy(*order).select(*as_text).limit(EXAMPLES).collect()
    return "; ".join(", ".join(f"{c}={value!r}" for c, value in zip(shown, r)) for r in rows)


def rejected_records(inp: BatchInput, batch_id: str | Column, seq: int | Column) -> DataFrame | None:
    """The batch's rejected records as kept in the rejected-records table: why, the batch
    (columns, in a chunk of a range: each record's interval's), the record as JSON (all its
    columns); None when the batch rejected none."""
    if inp.rejected_rows is None:
        return None
    return inp.rejected_rows.select(
        "reason", F.lit(batch_id).alias("batch_id"), F.lit(seq).cast("long").alias("seq"), "record"
    )
