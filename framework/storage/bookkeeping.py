"""What the framework keeps about each batch, read by the names users know: the ledger, the
metrics, the late records and the rejected records of a pipeline, given the pipeline's folder
in a warehouse.

All of them live in the pipeline's ``_state`` table, beside window state, so that one commit per
batch carries them (``state.commit``): ledger rows in the ``LEDGER_BUCKET`` partition (a row
per batch as JSON, its metrics one of its fields), late records in ``LATE_BUCKET`` (each as
JSON, their schema in the ledger rows' ``late_schema``), rejected records in ``REJECTED_BUCKET``
(``REJECTED_SCHEMA``, as JSON). Readers (``Runtime.read_*``,
``status``, the status page, the CLI, the catalog's views) go through these functions and never
through a path. A warehouse of the layout before ``_state`` (``_ledger``, ``metrics``,
``late_records`` tables) is read from those tables until its first batch upgrades it
(``framework.storage.upgrade``).
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from ..definition.columns import LATE_BUCKET, REJECTED_BUCKET
from . import entries, ledger, metrics, tables


def _tables(root: str) -> tables.Tables:
    return tables.Tables(root, "output")


def _state(spark: SparkSession, root: str) -> DataFrame | None:
    """The ``_state`` table of the pipeline at ``root``; None before its first commit."""
    path = _tables(root).state
    return tables.read(spark, path) if tables.exists(spark, path) else None


def _legacy(spark: SparkSession, root: str, name: str) -> DataFrame | None:
    """Table ``name`` of the layout before ``_state``, if the pipeline at ``root`` has it and no ``_state``."""
    path = _tables(root).legacy(name)
    return tables.read(spark, path) if tables.exists(spark, path) else None


def has_batches(spark: SparkSession, root: str) -> bool:
    """Whether a batch of the pipeline stored at ``root`` has committed in either layout."""
    t = _tables(root)
    return tables.exists(spark, t.state) or tables.exists(spark, t.legacy("_ledger"))


def read_ledger(spark: SparkSession, root: str) -> DataFrame | None:
    """The batch ledger: a row per batch (``ledger.LedgerRow``'s columns); None before the first."""
    state = _state(spark, root)
    return ledger.frame(state) if state is not None else _legacy(spark, root, "_ledger")


def last_committed(spark: SparkSession, root: str, batch_id: str | None = None) -> ledger.LedgerRow | None:
    """The last committed ledger row of the pipeline at ``root`` (of batch ``batch_id`` if given); None if none."""
    rows = read_ledger(spark, root)
    return None if rows is None else ledger.last_committed_of(rows, batch_id)


def read_metrics(spark: SparkSession, root: str) -> DataFrame | None:
    """One metrics row per committed batch (``metrics.SCHEMA``, KIP-328 names with ``_``); None
    before the first. Each is its ledger row's ``metrics`` field, with its stream time."""
    state = _state(spark, root)
    if state is None:
        return _legacy(spark, root, "metrics")
    rows = ledger.committed(ledger.frame(state))
    values = F.from_json("metrics", metrics.JSON_SCHEMA)
    columns: list[Column] = [
        F.timestamp_millis("stream_time").alias(name) if name == "stream_time" else values[name].alias(name)
        for name, _ in metrics.COLUMNS
    ]
    pipeline = F.lit(root.rstrip("/").rsplit("/", 1)[-1]).alias("pipeline")
    return rows.select(pipeline, "batch_id", "seq", *columns)


def read_late(spark: SparkSession, root: str) -> DataFrame | None:
    """Records that landed in no window, with the stream time that made them late (keys,
    ``event_time``, ``stream_time_before``, ``batch_id``, ``seq``, ``record``); None before the
    first late record."""
    state = _state(spark, root)
    if state is None:
        return _legacy(spark, root, "late_records")
    schema = late_schema(state)
    if schema is None:
        return None
    return entries.read(state, LATE_BUCKET, schema)


REJECTED_SCHEMA = "reason string, batch_id string, seq long, record string"


def read_rejected(spark: SparkSession, root: str) -> DataFrame | None:
    """Records a quarantining pipeline left out of their batch (``REJECTED_SCHEMA``: why, the
    batch, the record as JSON); None before the first batch."""
    state = _state(spark, root)
    if state is None:
        return None
    return entries.read(state, REJECTED_BUCKET, REJECTED_SCHEMA)


def late_schema(state: DataFrame) -> str | None:
    """The schema of the late records kept in ``state`` (a pipeline's keys do not change), as
    its last ledger row with late records recorded it; None if none has."""
    found = ledger.frame(state).filter(F.col("late_schema").isNotNull()).orderBy(F.desc("seq")).limit(1).collect()
    return found[0]["late_schema"] if found else None
