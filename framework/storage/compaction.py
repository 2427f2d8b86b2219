"""Bookkeeping tables that keep themselves small.

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
"""

from __future__ import annotations

import logging

from delta.tables import DeltaTable
from pyspark.sql import SparkSession

from . import locks, tables

log = logging.getLogger("framework.compaction")

EVERY = 50  # batches between compactions of a pipeline's bookkeeping tables


def bookkeeping(t: tables.Tables) -> tuple[str, ...]:
    """The append-only tables of a pipeline that grow by one small file per batch."""
    return t.ledger, t.metrics, t.late


def due(t: tables.Tables, seq: int) -> tuple[str, ...]:
    """The bookkeeping tables the batch with sequence number ``seq`` compacts: table ``i`` of
    ``n`` when ``seq + i * EVERY // n`` is a multiple of ``EVERY``."""
    paths = bookkeeping(t)
    return tuple(path for i, path in enumerate(paths) if (seq + i * EVERY // len(paths)) % EVERY == 0)


def compact(spark: SparkSession, paths: tuple[str, ...]) -> list[str]:
    """``OPTIMIZE`` each existing table of ``paths``; the ones compacted."""
    done = []
    for path in paths:
        if tables.exists(spark, path):
            with locks.committing(path):
                DeltaTable.forPath(spark, path).optimize().executeCompaction()
            done.append(path)
    return done
