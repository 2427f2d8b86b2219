"""Where a pipeline's tables live, and reading and creating them.

Per pipeline, under ``<warehouse>/<pipeline>/`` (see ``docs/design.md#state-tables``):

- ``_state``       window state (open windows / sessions with their partial aggregates, and for
                   sliding windows the closed ones a later record may still read), partitioned by
                   ``_bucket`` (close-time bucket: closing reads only the buckets due), and in two
                   partitions of their own the batch ledger (``framework.storage.ledger``: a row
                   per batch with its metrics) and the late records. One commit per batch: the
                   commit point. Read them by name (``framework.storage.bookkeeping``)
- ``buffer_<name>`` ``until_time_limit`` only: the suppression buffer (one row per buffered key
                   and window), named by ``Suppressed.with_name`` (default ``suppress``)
- ``<sink>``       the results table (final results, or a continuously updated table)
- ``_staging/``    what a batch attempt will publish once it has committed (removed after)
- ``_gate/``       the last job run's validation outcome, for the DAG's quality gate (``framework.operations.outcome``)

Earlier versions kept ``_ledger``, ``window_state``, ``metrics`` and ``late_records`` as tables
of their own; ``framework.storage.upgrade`` moves them into ``_state``.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import ArrayType, DataType, MapType, Row, StructType

from . import backend
from .backend import NO_TABLE as NO_TABLE  # what a read answers for a path with no table (tests name it here)
from .locks import committing, conf_guard
from .sqltext import literal, quoted

CREATE_WAIT_S = 30.0  # how long a runner waits for another runner's creation of a table to land

# Delta checkpoints a table every ``delta.checkpointInterval`` commits (default 10). A pipeline's
# tables take about one commit each per batch, so with one interval they all checkpointed in the
# same batch, and every 10th batch was markedly slower (bench/README.md#figures-behind-the-codes-choices).
# Distinct primes spread them: two tables checkpoint in the same batch in about 4 % of batches.
CHECKPOINT_INTERVALS = {"_state": 13, "quality_results": 31}
BUFFER_CHECKPOINT_INTERVAL = 29  # ``buffer_<name>``
OTHER_CHECKPOINT_INTERVAL = 17  # the sink, and any other table the framework creates


@dataclass(frozen=True)
class Tables:
    """Paths of one pipeline's Delta tables."""

    root: str
    sink: str
    tombstones: bool = False  # a MERGEd sink keeps its deletes as tombstone rows (a replay's staging)

    @property
    def state(self) -> str:
        """The table of window state, the ledger and late records: the commit point's."""
        return os.path.join(self.root, "_state")

    def buffer(self, name: str | None) -> str:
        """The rate-limiting buffer of suppression ``name`` (unnamed: ``suppress``)."""
        return os.path.join(self.root, f"buffer_{name or 'suppress'}")

    @property
    def output(self) -> str:
        return os.path.join(self.root, self.sink)

    @property
    def staging(self) -> str:
        return os.path.join(self.root, "_staging")

    def legacy(self, name: str) -> str:
        """A table of the layout before ``_state``: ``_ledger``, ``window_state``, ``metrics``, ``late_records``."""
        return os.path.join(self.root, name)


def exists(spark: SparkSession, path: str) -> bool:
    """Whether a Delta table is at ``path`` (``SessionBackend.is_table``)."""
    return backend.of(spark).is_table(path)


def as_table(spark: SparkSession, path: str) -> str:
    """The Delta table at ``path`` as SQL names it (``delta.`<path>```). SQL takes only an
    absolute path (or a URL) there: a relative one is resolved as a classic session's reads
    resolve it, against the JVM's working folder; over Spark Connect the server would resolve it
    against its own, so it is refused (``SessionBackend.sql_name``)."""
    return backend.of(spark).sql_name(path)


def merge(spark: SparkSession, path: str, source: DataFrame, on: str, clauses: Iterable[str]) -> Row | None:
    """``MERGE INTO`` the table at ``path`` (alias ``t``) from ``source`` (alias ``s``) in SQL,
    which a classic and a Spark Connect session both run (delta-spark's ``DeltaTable`` needs
    Delta's Connect plugin on the server, which Delta 4.4 does not publish for Spark 4.2).
    ``clauses`` are the ``WHEN ...`` clauses in order; the answer is Delta's row of counts
    (``num_affected_rows``, ``num_inserted_rows``, ...).

    The statement runs in ``spark``, whose session settings (the commit's tag, its transaction
    id) the commit takes. The source is a global temporary view of a name of its own, dropped
    afterwards: ``source`` may belong to another session of the same Spark (a session's own
    temporary views are invisible to the others), and threads merge at once."""
    view = f"finalresults_merge_source_{uuid.uuid4().hex}"
    database = spark.conf.get("spark.sql.globalTempDatabase", "global_temp")
    statement = f"MERGE INTO {as_table(spark, path)} AS t USING {database}.{view} AS s ON {on} " + " ".join(clauses)
    source.createOrReplaceGlobalTempView(view)
    try:
        return spark.sql(statement).first()
    finally:
        spark.catalog.dropGlobalTempView(view)


def matching(columns: Iterable[str]) -> str:
    """A MERGE's condition: the target's and the source's ``columns`` are equal."""
    return " AND ".join(f"t.{quoted(c)} = s.{quoted(c)}" for c in columns)


def update_all(columns: Iterable[str]) -> str:
    """``UPDATE SET`` of ``columns`` from the source: a MERGE clause's action."""
    return "UPDATE SET " + ", ".join(f"{quoted(c)} = s.{quoted(c)}" for c in columns)


def insert_all(columns: Iterable[str]) -> str:
    """``INSERT`` of ``columns`` from the source: a MERGE clause's action."""
    names = [quoted(c) for c in columns]
    return f"INSERT ({', '.join(names)}) VALUES ({', '.join('s.' + n for n in names)})"


def read(spark: SparkSession, path: str, version: int | None = None) -> DataFrame:
    """A Delta table, as of ``version`` when given (time travel)."""
    reader = spark.read.format("delta")
    if version is not None:
        reader = reader.option("versionAsOf", version)
    return reader.load(path)


def head(spark: SparkSession, path: str) -> tuple[str, int] | None:
    """The table's id (new when a table is created again at the same path) and current version,
    or None if it does not exist yet. A classic session reads the log's listing, with no Spark
    job; over Spark Connect, ``DESCRIBE HISTORY`` and the version's checksum file
    (``SessionBackend.head``)."""
    return backend.of(spark).head(path)


def prepare(spark: SparkSession, path: str) -> None:
    """Compute the table's current snapshot with its transaction ids, which the next commit to
    it needs first: done ahead, beside other work, that commit starts from a cached snapshot.
    Best effort: if this fails, the commit computes them itself and reports what fails. Over
    Spark Connect the server's Delta computes them at the commit: there is no snapshot to ask."""
    backend.of(spark).prepare(path)


def latest_version(spark: SparkSession, path: str) -> int | None:
    """The table's current version, or None if it does not exist yet."""
    current = head(spark, path)
    return None if current is None else current[1]


def properties(path: str) -> dict[str, str]:
    """The Delta table properties the framework creates the table at ``path`` with, by the
    table's role (its folder name): its checkpoint interval."""
    name = os.path.basename(path.rstrip("/"))
    interval = CHECKPOINT_INTERVALS.get(name) or (
        BUFFER_CHECKPOINT_INTERVAL if name.startswith("buffer_") else OTHER_CHECKPOINT_INTERVAL
    )
    return {"delta.checkpointInterval": str(interval)}


def columns(schema: StructType) -> str:
    """``CREATE TABLE``'s column list for ``schema``, names quoted, every field nullable (Delta
    refuses nested NOT NULL constraints, and the framework's tables take rows of any nullability)."""
    return ", ".join(f"{quoted(f.name)} {_ddl(f.dataType)}" for f in schema.fields)


def _ddl(kind: DataType) -> str:
    if isinstance(kind, StructType):
        return "STRUCT<" + ", ".join(f"{quoted(f.name)}: {_ddl(f.dataType)}" for f in kind.fields) + ">"
    if isinstance(kind, ArrayType):
        return f"ARRAY<{_ddl(kind.elementType)}>"
    if isinstance(kind, MapType):
        return f"MAP<{_ddl(kind.keyType)}, {_ddl(kind.valueType)}>"
    return kind.simpleString()


def create(spark: SparkSession, path: str, schema: StructType | str, partition_by: str | None = None) -> None:
    """Create the table if it is missing (no-op otherwise).

    Two processes starting a pipeline's first batch at once both create its ledger; Delta fails
    the slower creation (location not empty, protocol changed, ... depending on the moment), so a
    failed creation waits for the other's table to appear, and fails if none does."""
    if exists(spark, path):
        return
    if isinstance(schema, str):
        schema = spark.createDataFrame([], schema).schema
    props = ", ".join(f"{literal(k)} = {literal(v)}" for k, v in properties(path).items())
    partitioned = f" PARTITIONED BY ({quoted(partition_by)})" if partition_by else ""
    statement = (
        f"CREATE TABLE IF NOT EXISTS {as_table(spark, path)} ({columns(schema)}) USING delta"
        f"{partitioned} TBLPROPERTIES ({props})"
    )
    try:
        with committing(path), conf_guard:  # no other thread's commit tag may be set meanwhile
            spark.sql(statement)
    except Exception as failure:
        deadline = time.monotonic() + CREATE_WAIT_S
        while not _loads(spark, path):
            if time.monotonic() > deadline:
                raise failure
            time.sleep(0.2)


def _loads(spark: SparkSession, path: str) -> bool:
    """Whether ``path`` reads as a Delta table, whatever the failure. Unlike a classic session's
    ``exists``, a read refreshes Delta's cached log, which after a lost race to create the table
    still says there is none."""
    try:
        read(spark, path).schema
        return True
    except Exception:
        return False
