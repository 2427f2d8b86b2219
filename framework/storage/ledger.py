"""The ledger: one row per batch, and the commit point.

Ledger rows live in the pipeline's ``_state`` table beside window state (``LEDGER_BUCKET``
rows, the row as JSON in ``ENTRY``); the one commit to that table that carries a batch's ledger
row is its commit point, fenced by ``commit_point``. Why that makes a batch commit once:
docs/design.md#commit-point-and-fencing.

A batch id has at most one ``committed`` row; a replay turns the rows of its range ``replaced``
and appends their new ``committed`` rows. ``LedgerRow`` is the one description of a row: the
schema users read (``frame``) is derived from it, and rows of older ledgers (without its later
fields) read into it with those fields None.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import json
import types
import typing
from dataclasses import dataclass
from typing import Callable

from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql import functions as F

from ..definition.columns import BUCKET, ENTRY, LEDGER_BUCKET, SEQ
from ..execution.streamtime import to_datetime
from . import classic, entries, tables
from .writes import LEDGER_APP, history_since, lost_race, retried, version_of


class Status(str, enum.Enum):
    """A ledger row's status."""

    COMMITTED = "committed"  # the batch's effect: what readers and the next batch start from
    REPLACED = "replaced"  # a committed row a replay re-ran (its new row is committed)
    STARTED = "started"  # legacy: an attempt of the previous protocol, which published before committing
    SWITCHED = "switched"  # a switch of the pipeline's version (``switched_to``) fenced this table here


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
    late_schema: str | None = None  # the DDL of the batch's late records (kept as JSON, ``LATE_BUCKET``)
    interval_start: int | None = None  # a job's batch: its data interval [start, end), epoch ms
    interval_end: int | None = None
    fence: int | None = None  # the transaction version its commit point was made with (``commit_point``)
    bucket_ms: int | None = None  # the width of the close-time buckets its window state is in (``Runtime(bucket=...)``)
    switched_to: int | None = None  # a ``SWITCHED`` row: the version the pipeline was switched to

    @classmethod
    def of(cls, row: Row) -> LedgerRow:
        """A row read from a ledger of any age."""
        values = row.asDict()
        fields: dict[str, typing.Any] = {name: values.get(name) for name in COLUMNS}
        return cls(**fields)

    @classmethod
    def from_json(cls, text: str) -> LedgerRow:
        """A row as ``to_json`` wrote it (fields a newer version added are ignored)."""
        values = json.loads(text)
        at = values.get("at")
        fields: dict[str, typing.Any] = {name: values.get(name) for name in COLUMNS}
        return cls(**fields | {"at": dt.datetime.fromisoformat(at) if at else None})

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self) | {"at": self.at.isoformat() if self.at else None})

    def version(self, table: str) -> int | None:
        """The version of state table ``table`` this batch planned from (``state``: ``_state``)
        or left (``buffer``)."""
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
    """``rows`` as ``_state`` rows (``BUCKET`` = ``LEDGER_BUCKET``, ``SEQ``, ``ENTRY``)."""
    return spark.createDataFrame(
        [(LEDGER_BUCKET, r.seq, r.to_json()) for r in rows], f"{BUCKET} long, {SEQ} long, {ENTRY} string"
    )


def frame(state: DataFrame) -> DataFrame:
    """The ledger rows of a ``_state`` table, with ``LedgerRow``'s columns."""
    return entries.read(state, LEDGER_BUCKET, LEDGER_SCHEMA)


def rows_at(spark: SparkSession, path: str, version: int) -> list[LedgerRow]:
    """The ledger rows of the ``_state`` table at ``path`` as of ``version`` (only the ledger's partition is read)."""
    state = tables.read(spark, path, version)
    return [LedgerRow.from_json(r[0]) for r in state.filter(F.col(BUCKET) == LEDGER_BUCKET).select(ENTRY).collect()]


def committed(ledger: DataFrame) -> DataFrame:
    """The committed rows of a ledger table."""
    return ledger.filter(F.col("status") == Status.COMMITTED.value)


def committed_rows(rows: list[LedgerRow]) -> list[LedgerRow]:
    """The committed rows among ``rows``, by sequence number: the last is the last committed batch."""
    return sorted((r for r in rows if r.status == Status.COMMITTED), key=lambda r: r.seq)


def switched_away(rows: list[LedgerRow], version: int) -> LedgerRow | None:
    """The last switch recorded in a version's ledger ``rows`` if it made another version the
    pipeline (this version is then written only by a build that follows the other); None while
    this version is the pipeline's, or was never switched from."""
    switched = [r for r in rows if r.status == Status.SWITCHED]
    last = max(switched, key=lambda r: r.fence or 0, default=None)
    return last if last is not None and last.switched_to != version else None


def last_committed_of(ledger: DataFrame, batch_id: str | None = None) -> LedgerRow | None:
    """The last committed row of ``ledger`` (of batch ``batch_id`` if given), None if none."""
    rows = committed(ledger)
    if batch_id is not None:
        rows = rows.filter(F.col("batch_id") == batch_id)
    last = rows.orderBy(F.desc("seq")).limit(1).collect()
    return LedgerRow.of(last[0]) if last else None


@dataclass(frozen=True)
class Head:
    """The ``_state`` table as an attempt read it: its Delta table id, version, and *fence*, the
    last transaction version a batch or replay committed with (``commit_point``); 0 before the
    first. The commit point of whoever read this head commits with ``next_fence``."""

    table_id: str
    version: int
    fence: int

    @property
    def exists(self) -> bool:
        return self.version >= 0

    @property
    def next_fence(self) -> int:
        """The transaction version the next commit point made from this head commits with."""
        return self.fence + 1


NO_LEDGER = Head("", -1, 0)  # what ``Ledgers.read`` sees before the table exists


def ledger_head(spark: SparkSession, path: str) -> Head:
    """The ledger's ``Head`` from one snapshot (Delta rebuilds its state to answer the fence)."""
    with classic.delta_snapshot(spark, path) as current:
        recorded = current.transactions().get(LEDGER_APP)
        return Head(current.metadata().id(), current.version(), int(recorded.get()) if recorded.isDefined() else 0)


def fence_of(rows: list[LedgerRow]) -> int | None:
    """The fence of a ``_state`` table whose ledger rows are ``rows``, from the rows alone; None
    if none records one (rows written before ledger rows recorded their fence).

    Every commit point writes ledger rows recording the transaction version it is made with
    (a batch its row, a replay the rows of its range), in that same commit, and each commit
    point's version is above the last: so the largest recorded is the one Delta holds. Reading
    it from the rows spares the Spark job in which Delta rebuilds the table's state to answer
    ``transactions`` (Delta 4.4 computes a snapshot's transaction ids no other way)."""
    return max((r.fence for r in rows if r.fence is not None), default=None)


def read_at(spark: SparkSession, path: str, current: tuple[str, int]) -> tuple[Head, list[LedgerRow]]:
    """The ``Head`` and ledger rows of the ``_state`` table at ``path``, whose id and version are
    ``current``: the fence from the rows (``fence_of``), or from Delta when no row records one
    (then as of the version Delta's snapshot is at, and the rows too)."""
    rows = rows_at(spark, path, current[1])
    fence = fence_of(rows)
    if fence is not None:
        return Head(*current, fence), rows
    head = ledger_head(spark, path)
    return head, rows if head.version == current[1] else rows_at(spark, path, head.version)


class Ledgers:
    """The ledgers a runtime read, by path: rows known at a version of a table are not read
    again (a Delta version never changes), and the fence is read from them (``fence_of``)."""

    def __init__(self, spark: SparkSession):
        self.spark = spark
        self._known: dict[str, tuple[Head, list[LedgerRow]]] = {}

    def read(self, path: str) -> tuple[Head, list[LedgerRow]]:
        """The ``_state`` table's ``Head`` and ledger rows; ``NO_LEDGER`` and no rows before the
        table exists."""
        current = tables.head(self.spark, path)
        if current is None:
            return NO_LEDGER, []
        known = self._known.get(path)
        if known is not None and (known[0].table_id, known[0].version) == current:
            return known
        self._known[path] = read_at(self.spark, path, current)
        return self._known[path]

    def late_schema(self, path: str) -> Callable[[], str | None] | None:
        """The late records' schema as the ledger rows known at ``path`` record it (the last
        row that has one), without reading; None if this runtime read no rows there."""
        known = self._known.get(path)
        if known is None:
            return None
        with_late = [r for r in known[1] if r.late_schema]
        return lambda: max(with_late, key=lambda r: r.seq).late_schema if with_late else None

    def appended(self, path: str, seen: Head, rows: list[LedgerRow], new: list[LedgerRow], made: int) -> None:
        """Remember that commit ``made`` appended ``new`` (a batch's row, a chunk's rows) to the
        ledger read as ``seen``, ``rows``."""
        if made == seen.version + 1 and seen.table_id:  # nothing came between: the rows known are current
            self._known[path] = (Head(seen.table_id, made, seen.next_fence), [*rows, *new])


def commit_point(spark: SparkSession, path: str, seen: Head, tag: str, commit: Callable[[int], None]) -> int | None:
    """The commit point of a batch or a replay: run ``commit(txn_version)`` (one commit to the
    ``_state`` table at ``path`` tagged ``tag``, made with transaction id ``LEDGER_APP`` and
    ``txn_version``, the fence read + 1) and return the version it made, or None if it is
    fenced out: another batch or replay committed since the table was read as ``seen``.

    Delta keeps the last ``txnVersion`` of ``LEDGER_APP`` in the table's log: a commit whose
    version is not above it is skipped, and of two racing ones the second fails. Every commit
    point uses the fence it read + 1, so this is a compare-and-set decided by Delta;
    maintenance commits carry no transaction version and leave the fence as it was. So a
    commit that lost a race while the fence stayed (an ``OPTIMIZE`` of files it rewrites) is
    made again (``writes.retried``, ``writes.RETRIES`` times in all); one that lost to a moved
    fence is fenced out."""
    fenced_out: list[bool] = []

    def fence_unchanged() -> bool:  # another try can pass: only maintenance landed meanwhile
        current = tables.head(spark, path)
        if current is None or read_at(spark, path, current)[0].fence != seen.fence:
            fenced_out.append(True)
        return not fenced_out

    try:
        retried(lambda: commit(seen.next_fence), fence_unchanged)
    except Exception as e:
        if fenced_out and lost_race(e):
            return None
        raise
    return version_of(history_since(spark, path, seen.version), tag)
