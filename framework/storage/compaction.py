"""Bookkeeping tables that keep themselves small.

The ledger, metrics and late-records tables take one small append per batch, each its own file:
over 1,000 batches the ledger reached 3,853 files (``bench/results/retention.jsonl``), and every
batch reads the ledger first. So every ``EVERY`` batches, after it has published, the committing
batch compacts them (``OPTIMIZE``: one file per table again).

Compaction is maintenance: it changes no rows and carries no transaction id, so it fences out
no batch or replay, and a reader of an older version (time travel) still reads the same rows
from the same files until ``VACUUM``. Each table is compacted holding its commit lock. It runs
after the commit point, so a failure is logged and leaves the batch committed; the next batch
at a multiple of ``EVERY`` compacts again.
"""

from __future__ import annotations

import logging

from delta.tables import DeltaTable
from pyspark.sql import SparkSession

from . import locks, tables

log = logging.getLogger("framework.compaction")

EVERY = 50  # batches between compactions of a pipeline's bookkeeping tables


def due(seq: int) -> bool:
    """Whether the batch with sequence number ``seq`` compacts the bookkeeping tables."""
    return seq % EVERY == 0


def bookkeeping(t: tables.Tables) -> tuple[str, ...]:
    """The append-only tables of a pipeline that grow by one small file per batch."""
    return t.ledger, t.metrics, t.late


def compact(spark: SparkSession, paths: tuple[str, ...]) -> list[str]:
    """``OPTIMIZE`` each existing table of ``paths``; the ones compacted."""
    done = []
    for path in paths:
        if tables.exists(spark, path):
            with locks.committing(path):
                DeltaTable.forPath(spark, path).optimize().executeCompaction()
            done.append(path)
    return done
