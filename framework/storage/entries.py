"""Bookkeeping entries in a pipeline's ``_state`` table: ledger rows, late records and rejected
records share it with window state so that one commit carries a batch's state change and what
the framework keeps about the batch.

Each kind has a partition of its own, a ``BUCKET`` below zero (``LEDGER_BUCKET``, ``LATE_BUCKET``,
``REJECTED_BUCKET``), where a row is its batch's sequence number (``SEQ``) and the entry itself
as JSON (``ENTRY``): the kinds keep their own columns without widening the window rows, and a
reader of one kind touches only its partition. This module is the one place that maps an entry
to a ``_state`` row and back, as DataFrames and as SQL for the catalog's views.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from ..definition.columns import BUCKET, ENTRY, SEQ


def to_rows(entries: DataFrame, seq: int | Column, bucket: int) -> DataFrame:
    """``entries`` as ``_state`` rows of ``bucket``, for batch ``seq`` (or each the batch
    its ``seq`` column names)."""
    return entries.select(
        F.lit(bucket).cast("long").alias(BUCKET),
        (F.lit(seq) if isinstance(seq, int) else seq).cast("long").alias(SEQ),
        F.to_json(F.struct(*[F.col(c) for c in entries.columns])).alias(ENTRY),
    )


def read(state: DataFrame, bucket: int, schema: str) -> DataFrame:
    """The entries of ``bucket`` of a ``_state`` table, with the columns of ``schema`` (DDL)."""
    rows = state.filter(F.col(BUCKET) == bucket)
    return rows.select(F.from_json(ENTRY, schema).alias("r")).select("r.*")


def query(table: str, bucket: int, schema: str) -> str:
    """``read`` as SQL over the catalog table ``table`` (a catalog view's query)."""
    return f"SELECT r.* FROM (SELECT from_json({ENTRY}, '{schema}') AS r FROM {table} WHERE {BUCKET} = {bucket})"
