"""Tables that keep themselves small and quick to read: compaction and checkpoints in turns.

The ledger, metrics and late-records tables take one small append per batch, each its own file:
over 1,000 batches the ledger reached 3,853 files (``bench/results/retention.jsonl``), and every
batch reads the ledger first. So each is compacted (``OPTIMIZE``: one file again) every ``EVERY``
batches, by the committing batch after it has published; the tables take turns, spread evenly
over those batches, so no batch compacts more than one (over 200 batches of ``bench/retention.py``
compacting both at once cost a batch 1.2 to 2.6 s more than the median 2.2 s).

Compaction is maintenance: it changes no rows and carries no transaction id, so it fences out
no batch or replay, and a reader of an older version (time travel) still reads the same rows
from the same files until ``VACUUM``. Each table is compacted holding its commit lock. It runs
after the commit point, so a failure is logged and leaves the batch committed; the next batch
that is due compacts again.

Checkpoints likewise: Delta checkpoints a table's log inside the commit that reaches its
``delta.checkpointInterval`` (10 by default), and a pipeline's tables take one commit each per
batch, so they all checkpointed in the same batch (every 10th batch of ``bench/retention.py``
took 3.1 to 3.5 s against a median of 2.2 s). Tables the framework creates get an interval Delta
never reaches in practice (``CHECKPOINT_INTERVAL``, set in a table's first turn, a maintenance
commit like ``OPTIMIZE``), and the batch checkpoints its tables in turns instead: each every
``CHECKPOINT_EVERY`` batches, at most one per batch.
"""

from __future__ import annotations

import logging

from delta.tables import DeltaTable
from pyspark.sql import SparkSession

from . import locks, tables

log = logging.getLogger("framework.compaction")

EVERY = 50  # batches between compactions of a pipeline's bookkeeping tables
CHECKPOINT_EVERY = 10  # batches between checkpoints of one of a pipeline's tables
CHECKPOINT_INTERVAL = 1_000_000  # Delta's own checkpoint interval on a pipeline's tables
INTERVAL = "delta.checkpointInterval"


def bookkeeping(t: tables.Tables) -> tuple[str, ...]:
    """The append-only tables of a pipeline that grow by one small file per batch."""
    return t.ledger, t.metrics, t.late


def due(t: tables.Tables, seq: int) -> tuple[str, ...]:
    """The bookkeeping tables the batch with sequence number ``seq`` compacts: table ``i`` of
    ``n`` when ``seq + i * EVERY // n`` is a multiple of ``EVERY``."""
    paths = bookkeeping(t)
    return tuple(path for i, path in enumerate(paths) if (seq + i * EVERY // len(paths)) % EVERY == 0)


def checkpoint_due(paths: tuple[str, ...], seq: int) -> tuple[str, ...]:
    """Of a pipeline's tables ``paths``, the one the batch with sequence number ``seq``
    checkpoints, if any: table ``i`` of ``n`` when ``seq + i * CHECKPOINT_EVERY // n`` is a
    multiple of ``CHECKPOINT_EVERY``."""
    n = len(paths)
    return tuple(p for i, p in enumerate(paths) if (seq + i * CHECKPOINT_EVERY // n) % CHECKPOINT_EVERY == 0)


def checkpoint(spark: SparkSession, paths: tuple[str, ...]) -> list[str]:
    """Write a checkpoint of each existing table of ``paths`` at its latest version, first
    setting its interval out of Delta's reach; the ones checkpointed. (Delta's Python API has no
    call for a checkpoint; its JVM ``DeltaLog`` has.)"""
    done = []
    for path in paths:
        if not tables.exists(spark, path):
            continue
        if DeltaTable.forPath(spark, path).detail().first().properties.get(INTERVAL) != str(CHECKPOINT_INTERVAL):
            with locks.committing(path):
                spark.sql(
                    f"ALTER TABLE delta.`{path.replace('`', '``')}` "
                    f"SET TBLPROPERTIES ('{INTERVAL}' = '{CHECKPOINT_INTERVAL}')"
                )
        spark._jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, path).checkpoint()
        done.append(path)
    return done


def compact(spark: SparkSession, paths: tuple[str, ...]) -> list[str]:
    """``OPTIMIZE`` each existing table of ``paths``; the ones compacted."""
    done = []
    for path in paths:
        if tables.exists(spark, path):
            with locks.committing(path):
                DeltaTable.forPath(spark, path).optimize().executeCompaction()
            done.append(path)
    return done
