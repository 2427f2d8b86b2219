"""Bookkeeping that keeps itself small.

Each batch adds a ledger row and maybe late records to ``_state``, each commit its own small
file in the bookkeeping partitions (``_bucket`` < 0), so the ledger alone grows by thousands of
files a thousand batches (``bench/retention.py``), and every batch reads the ledger first.
So those partitions are compacted (``OPTIMIZE ... WHERE _bucket < 0``: a file per partition
again) every ``EVERY`` batches, by the committing batch after it has published.

Compaction is maintenance: it changes no rows and carries no transaction id, so it fences out
no batch or replay; it touches no window partition, which is all a batch's commit reads, so the
two never conflict; and a reader of an older version (time travel) still reads the same rows
from the same files until ``VACUUM``. It holds the table's commit lock. It runs after the
commit point, so a failure is logged and leaves the batch committed; the next batch that is due
compacts again.
"""

from __future__ import annotations

import logging

from pyspark.sql import SparkSession

from ..definition.columns import BUCKET
from . import locks, tables

log = logging.getLogger("framework.compaction")

EVERY = 50  # batches between compactions of a pipeline's bookkeeping tables


def due(t: tables.Tables, seq: int) -> tuple[str, ...]:
    """The tables whose bookkeeping partitions the batch with sequence number ``seq`` compacts."""
    return (t.state,) if seq % EVERY == 0 else ()


def compact(spark: SparkSession, paths: tuple[str, ...]) -> list[str]:
    """``OPTIMIZE`` the bookkeeping partitions of each existing ``_state`` table of ``paths``; the ones compacted."""
    done = []
    for path in paths:
        if tables.exists(spark, path):
            with locks.committing(path):
                spark.sql(f"OPTIMIZE {tables.as_table(spark, path)} WHERE {BUCKET} < 0")
            done.append(path)
    return done
