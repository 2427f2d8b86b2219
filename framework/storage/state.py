"""Writing a batch's state: the commit point (``commit``: window state MERGEd or rewritten
where due, with the batch's ledger row and late records, in one commit to ``_state``, fenced by
``ledger.commit_point``) and the rate-limiting buffer (``write_buffer``, one overwrite).
Why that is safe: docs/design.md#commit-point-and-fencing and docs/design.md#state-writes.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from ..definition.columns import BUCKET, CLOSE, ENTRY, GONE, SEQ
from ..definition.pipeline import Pipeline
from ..execution.batch import Effect
from ..execution.streamtime import NO_TIME
from . import tables, writes


def buffer_path(t: tables.Tables, p: Pipeline) -> str | None:
    """The rate-limiting buffer of ``p`` (None without one)."""
    return t.buffer(p.suppression.name) if p.suppression is not None and p.emission.buffered else None


def windows(spark: SparkSession, path: str, version: int) -> DataFrame | None:
    """The window state of the ``_state`` table at ``path`` as of ``version`` (its window
    partitions only); None before any batch wrote window state."""
    if version < 0:
        return None
    rows = tables.read(spark, path, version)
    if CLOSE not in rows.columns:  # only bookkeeping so far
        return None
    return rows.filter(F.col(BUCKET) >= 0).drop(SEQ, ENTRY)


@dataclass(frozen=True, kw_only=True)
class Change:
    """What a commit point writes to the ``_state`` table at ``path`` (``commit``): the batch's
    window-state change (``effect``), its ``bookkeeping`` rows (ledger rows, late and rejected
    records), the stream time after it, the ``tag`` of its commit and the window-state
    partitions its changes touch (``buckets``: None, not known)."""

    path: str
    p: Pipeline
    effect: Effect
    bookkeeping: DataFrame
    stream_time: int | None
    tag: str
    buckets: tuple[int, ...] | None


def commit(spark: SparkSession, c: Change, txn_version: int) -> None:
    """The commit point: in one commit to the ``_state`` table of ``c``, made with transaction version
    ``txn_version``, the batch's window state change and its
    ``bookkeeping`` rows (ledger row, late records: ``_bucket`` < 0, which no state change
    touches). Window state is rewritten where the plan replaces it, else its changes are MERGEd
    by window identity (gone and closed windows deleted; sliding windows are held after they
    close, until the plan marks them gone, as later records find their previous record through
    them); a batch that changes no window state appends its bookkeeping rows.

    The MERGE reads only the window partitions its changes are in (``buckets``, which planning
    collected from the changes it keeps for the counts and this MERGE): a
    window's partition follows from its bounds, so a stored row with a changed window's identity
    is in that window's partition, and a batch's MERGE costs what it changed, not every open
    window (a changed ``Runtime(bucket=...)`` is refused before it gets here)."""
    path, p, effect, bookkeeping, sta, tag, buckets = (
        c.path,
        c.p,
        c.effect,
        c.bookkeeping,
        c.stream_time,
        c.tag,
        c.buckets,
    )
    windows = f"{BUCKET} >= 0"
    if effect.state_rewrite is not None:
        rows, replaced = effect.state_rewrite
        data = rows.unionByName(bookkeeping, allowMissingColumns=True)
        tables.create(spark, path, data.schema, partition_by=BUCKET)
        writes.rewrite(data, path, f"({replaced}) AND {windows}", tag, mergeSchema="true", **writes.once(txn_version))
        return
    if effect.state_changes is None:
        tables.create(spark, path, bookkeeping.schema, partition_by=BUCKET)
        writes.save(bookkeeping, path, tag, mergeSchema="true", **writes.once(txn_version))
        return
    source = effect.state_changes.unionByName(bookkeeping.withColumn(GONE, F.lit(False)), allowMissingColumns=True)
    columns = [c for c in source.columns if c != GONE]
    tables.create(spark, path, source.select(*columns).schema, partition_by=BUCKET)
    on = f"t.{windows} AND s.{windows} AND {tables.matching(p.identity)}"
    if buckets is not None:
        on += f" AND t.{BUCKET} IN ({', '.join(map(str, buckets))})" if buckets else " AND false"
    held = p.windows is not None and p.windows.held_after_close
    due = "false" if held else f"s.{CLOSE} <= {sta if sta is not None else NO_TIME}"
    clauses = [
        f"WHEN MATCHED AND (s.{GONE} OR {due}) THEN DELETE",
        f"WHEN MATCHED THEN {tables.update_all(columns)}",
        f"WHEN NOT MATCHED AND (s.{BUCKET} < 0 OR (NOT s.{GONE} AND NOT ({due}))) THEN {tables.insert_all(columns)}",
    ]
    writes.tagged(
        spark, path, tag, lambda: tables.merge(spark, path, source, on, clauses), txn_version=txn_version, evolve=True
    )


def write_buffer(spark: SparkSession, path: str | None, effect: Effect, base: int | None, tag: str) -> int | None:
    """The rate-limiting buffer: the buffer after the batch replaces the whole table, in one
    overwrite, and the version that made is returned (the ledger records it). What other
    attempts wrote before (an attempt that never committed, a zombie, a replay beside this one)
    is replaced with the rest, so the version holds this batch's buffer alone; an overwrite that
    loses a race to another writer's commit is made again (``writes.retried``)."""
    if effect.limited is None:
        return base
    assert path is not None  # a pipeline with a rate-limiting buffer has its path
    tables.create(spark, path, effect.limited.buffer.schema)
    writes.retried(lambda: writes.rewrite(effect.limited.buffer, path, None, tag))
    return writes.version_of(writes.history_since(spark, path, base), tag)  # its commit lands after base
