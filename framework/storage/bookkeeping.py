"""What the framework keeps about each batch, read by the names users know: the ledger, the
metrics, the late records and the rejected records of a pipeline, given the pipeline's folder in a warehouse.

Readers (``Runtime.read_*``, ``status``, the status page, the CLI) go through these functions and
never through a table's path: where each lives is the storage layout's business
(``docs/design.md#state-tables``), and a layout may keep several of them in one Delta table.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession

from . import tables


def _tables(root: str) -> tables.Tables:
    return tables.Tables(root, "output")


def has_batches(spark: SparkSession, root: str) -> bool:
    """Whether any batch of the pipeline stored at ``root`` has been attempted (its ledger exists)."""
    return tables.exists(spark, _tables(root).ledger)


def read_ledger(spark: SparkSession, root: str) -> DataFrame:
    """The batch ledger: a row per batch (``ledger.LedgerRow``'s columns)."""
    return tables.read(spark, _tables(root).ledger)


def read_metrics(spark: SparkSession, root: str) -> DataFrame | None:
    """One metrics row per committed batch (``metrics.SCHEMA``); None before the first."""
    path = _tables(root).metrics
    return tables.read(spark, path) if tables.exists(spark, path) else None


def read_late(spark: SparkSession, root: str) -> DataFrame | None:
    """Records that landed in no window, with the stream time that made them late; None before the first."""
    path = _tables(root).late
    return tables.read(spark, path) if tables.exists(spark, path) else None


def read_rejected(spark: SparkSession, root: str) -> DataFrame | None:
    """Records a quarantining pipeline left out of their batch, with the reason; None before the first."""
    path = _tables(root).rejected
    return tables.read(spark, path) if tables.exists(spark, path) else None
