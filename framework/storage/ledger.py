"""The ledger: one row per batch, and the commit point.

The ledger row is appended with Delta's transaction id (``txnAppId``/``txnVersion`` = the
ledger's *fence* + 1, see ``commit_point``): a compare-and-append that Delta decides, so of two
attempts that read the same ledger, at most one commits, on any store. Maintenance commits set
no transaction id, so they never fence a batch out.

A batch id has at most one ``committed`` row; a replay turns the rows of its range ``replaced``
and appends their new ``committed`` rows. ``LedgerRow`` is the one description of a row: the
table's schema is derived from it, and rows of older ledgers (without its later columns) read
into it with those columns None.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import json
import types
import typing
from dataclasses import dataclass

from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql import functions as F

from ..execution.streamtime import to_datetime
from . import tables
from .writes import LEDGER_APP, history_since, save, version_of


class Status(str, enum.Enum):
    """A ledger row's status."""

    COMMITTED = "committed"  # the batch's effect: what readers and the next batch start from
    REPLACED = "replaced"  # a committed row a replay re-ran (its new row is committed)
    STARTED = "started"  # legacy: an attempt of the previous protocol, which published before committing


@dataclass(frozen=True)
class LedgerRow:
    """One ledger row, its columns in the table's order (later columns last, None in older rows)."""

    seq: int
    batch_id: str
    status: str
    attempt: str | None = None
    fingerprint: str | None = None
    records_in: int | None = None
    stream_time_before: int | None = None
    stream_time: int | None = None
    state_version: int | None = None
    records_version: int | None = None  # legacy: sliding windows' kept records, before they held windows
    output_version: int | None = None  # legacy: the sink's version after a batch that published before committing
    input_schema: str | None = None
    definition: str | None = None
    at: dt.datetime | None = None
    buffer_version: int | None = None
    windows_open: int | None = None
    output_base: int | None = None  # a MERGEd sink's version before the batch (a replay restores it)
    metrics: str | None = None  # the batch's metrics as JSON (stream_time aside)

    @classmethod
    def of(cls, row: Row) -> LedgerRow:
        """A row read from a ledger of any age."""
        values = row.asDict()
        fields: dict[str, typing.Any] = {name: values.get(name) for name in COLUMNS}
        return cls(**fields)

    def version(self, table: str) -> int | None:
        """The version of state table ``table`` (``state``, ``buffer``) this batch left."""
        return getattr(self, f"{table}_version")

    def recorded_metrics(self) -> dict | None:
        """The batch's metrics with its stream time; None in a row from before metrics were kept here."""
        if self.metrics is None:
            return None
        return {**json.loads(self.metrics), "stream_time": to_datetime(self.stream_time)}


COLUMNS = tuple(f.name for f in dataclasses.fields(LedgerRow))
_SQL_TYPES = {int: "long", str: "string", dt.datetime: "timestamp"}


def _sql_type(hint) -> str:
    if isinstance(hint, types.UnionType):
        hint = next(a for a in typing.get_args(hint) if a is not types.NoneType)
    return _SQL_TYPES[hint]


LEDGER_SCHEMA = ", ".join(f"{name} {_sql_type(hint)}" for name, hint in typing.get_type_hints(LedgerRow).items())


def to_frame(spark: SparkSession, rows: list[LedgerRow]) -> DataFrame:
    return spark.createDataFrame([dataclasses.astuple(r) for r in rows], LEDGER_SCHEMA)


def committed(ledger: DataFrame) -> DataFrame:
    """The committed rows of a ledger table."""
    return ledger.filter(F.col("status") == Status.COMMITTED.value)


def committed_rows(rows: list[LedgerRow]) -> list[LedgerRow]:
    """The committed rows among ``rows``, by sequence number: the last is the last committed batch."""
    return sorted((r for r in rows if r.status == Status.COMMITTED), key=lambda r: r.seq)


def last_committed(spark: SparkSession, path: str, batch_id: str | None = None) -> LedgerRow | None:
    """The last committed row of the ledger at ``path`` (of batch ``batch_id`` if given); None
    when there is none, or no ledger yet."""
    if not tables.exists(spark, path):
        return None
    return last_committed_of(tables.read(spark, path), batch_id)


def last_committed_of(ledger: DataFrame, batch_id: str | None = None) -> LedgerRow | None:
    """The last committed row of ``ledger`` (of batch ``batch_id`` if given), None if none."""
    rows = committed(ledger)
    if batch_id is not None:
        rows = rows.filter(F.col("batch_id") == batch_id)
    last = rows.orderBy(F.desc("seq")).limit(1).collect()
    return LedgerRow.of(last[0]) if last else None


def ledger_head(spark: SparkSession, path: str) -> tuple[str, int, int]:
    """The ledger's id, current version and *fence*: the last transaction version a batch or
    replay committed with (``commit_point``), 0 before the first, from one snapshot."""
    with tables.snapshot(spark, path) as current:
        recorded = current.transactions().get(LEDGER_APP)
        return current.metadata().id(), current.version(), int(recorded.get()) if recorded.isDefined() else 0


class Ledgers:
    """The ledgers a runtime read, by path: rows known at a version of a table are not read
    again (a Delta version never changes), nor its fence (reading it costs a Spark job)."""

    def __init__(self, spark: SparkSession):
        self.spark = spark
        self._known: dict[str, tuple[tuple[str, int, int], list[LedgerRow]]] = {}

    def read(self, path: str) -> tuple[tuple[str, int, int], list[LedgerRow]]:
        """The ledger's (table id, version, fence) and rows, creating it if need be."""
        tables.create(self.spark, path, LEDGER_SCHEMA)
        known = self._known.get(path)
        if known is not None and known[0][:2] == tables.head(self.spark, path):
            return known
        seen = ledger_head(self.spark, path)
        return seen, [LedgerRow.of(r) for r in tables.read(self.spark, path, seen[1]).collect()]

    def appended(self, path: str, seen: tuple[str, int, int], rows: list[LedgerRow], row: LedgerRow, made: int) -> None:
        """Remember that commit ``made`` appended ``row`` to the ledger read as ``seen``, ``rows``."""
        if made == seen[1] + 1:  # nothing came between: the rows known are current
            self._known[path] = ((seen[0], made, seen[2] + 1), [*rows, row])


def commit_point(
    df: DataFrame, path: str, read_version: int, fence: int, tag: str, mode: str = "append", **options: str
) -> int | None:
    """Write ``df`` to the ledger at ``path`` in one commit, unless another batch or replay
    committed to it since this attempt read it (at ``read_version``, with ``fence``, see
    ``ledger_head``). Returns the version this commit made, or None if it was fenced out.

    Delta keeps the last ``txnVersion`` of ``LEDGER_APP`` in the table's log: a write whose
    version is not above it is skipped, and of two racing ones the second fails. Every ledger
    write uses the fence it read + 1, so this is a compare-and-set decided by Delta; maintenance
    commits carry no transaction version and leave the fence as it was."""
    save(df, path, tag, mode, **options, txnAppId=LEDGER_APP, txnVersion=str(fence + 1))
    return version_of(history_since(df.sparkSession, path, read_version), tag)
