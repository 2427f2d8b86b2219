"""Writing a batch's state tables: window state MERGEd (or rewritten where due), the
rate-limiting buffer replaced.

Each write is ``writes.advance``: from the version the last committed batch recorded, undoing
first whatever an attempt that never committed left there, and tagged, so a re-run finds it
made. Returns the version the table is at after the write (the ledger records it), or ``base``
when the batch does not change the table.
"""

from __future__ import annotations

from typing import Callable

from delta.tables import DeltaTable
from pyspark.sql import Column, DataFrame, SparkSession

from ..definition.columns import BUCKET, CLOSE, GONE
from ..definition.pipeline import Pipeline
from ..definition.windows import SlidingWindows
from ..execution import engine
from ..execution.streamtime import NO_TIME
from . import tables, writes

TABLES = ("state", "buffer")  # the state tables; the ledger records ``<name>_version`` of each


def buffer_path(t: tables.Tables, p: Pipeline) -> str | None:
    """The rate-limiting buffer of ``p`` (None without one)."""
    return t.buffer(p.suppression.name) if p.rate_limited else None


def path(t: tables.Tables, p: Pipeline, table: str) -> str | None:
    """The path of state table ``table`` (one of ``TABLES``), None if ``p`` has none."""
    return buffer_path(t, p) if table == "buffer" else getattr(t, table)


def write_state(
    spark: SparkSession,
    path: str,
    p: Pipeline,
    outcome: engine.Outcome,
    base: int | None,
    tag: str,
    sta: int | None,
    cache: Callable[[DataFrame], DataFrame],
) -> int | None:
    """Window state: rewritten where the plan replaces it, else its changes MERGEd by window
    identity (gone and closed windows deleted; sliding windows are held after they close, until
    the plan marks them gone, as later records find their previous record through them)."""
    if outcome.state_rewrite is not None:
        rows, replaced = outcome.state_rewrite
        tables.create(spark, path, rows.schema, partition_by=BUCKET)
        return writes.advance(spark, path, base, tag, lambda: writes.rewrite(rows, path, replaced, tag))
    if outcome.state_changes is None:
        return base
    changes = cache(outcome.state_changes)
    columns = [c for c in changes.columns if c != GONE]
    tables.create(spark, path, changes.select(*columns).schema, partition_by=BUCKET)
    on = " AND ".join(f"t.`{c}` = s.`{c}`" for c in p.identity)
    due = "false" if isinstance(p.windows, SlidingWindows) else f"s.{CLOSE} <= {sta if sta is not None else NO_TIME}"
    values: dict[str, str | Column] = {f"`{c}`": f"s.`{c}`" for c in columns}
    return writes.advance(
        spark,
        path,
        base,
        tag,
        lambda: writes.tagged(
            spark,
            path,
            tag,
            lambda: (
                DeltaTable.forPath(spark, path)
                .alias("t")
                .merge(changes.alias("s"), on)
                .whenMatchedDelete(f"s.{GONE} OR {due}")
                .whenMatchedUpdate(set=values)
                .whenNotMatchedInsert(condition=f"NOT s.{GONE} AND NOT ({due})", values=values)
                .execute()
            ),
        ),
    )


def write_buffer(
    spark: SparkSession, path: str | None, outcome: engine.Outcome, base: int | None, tag: str
) -> int | None:
    """The rate-limiting buffer: the buffer after the batch replaces the one before."""
    if outcome.limited is None:
        return base
    assert path is not None  # a pipeline with a rate-limiting buffer has its path
    tables.create(spark, path, outcome.limited.buffer.schema)
    return writes.advance(spark, path, base, tag, lambda: writes.rewrite(outcome.limited.buffer, path, None, tag))
