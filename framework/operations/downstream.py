"""Acting on final results once: the alert or invoice a final row exists for.

A pipeline DAG's quality gate emits an Airflow asset event per committed batch whose extra names
the batch (``framework.airflow``). A downstream job reads exactly that batch's rows
(``batch_rows``) and records what it does in an *outbox*, a Delta table written by
``deliver_once``: a MERGE that inserts only rows whose key the outbox does not hold yet. A retried
task, or a second attempt overlapping the first, adds nothing twice; whatever sends the
notifications reads the outbox, never the results table.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import functions as F

from ..errors import FrameworkError
from ..storage import locks, tables

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from ..definition.pipeline import Pipeline
    from .runtime import Runtime


def batch_rows(runtime: Runtime, p: Pipeline, batch_ids: list[str]) -> DataFrame:
    """The final rows that batches ``batch_ids`` of ``p`` published (``emitted_batch_id``)."""
    return runtime.read_output(p).filter(F.col("emitted_batch_id").isin(list(batch_ids)))


def deliver_once(rows: DataFrame, outbox: str, keys: list[str]) -> int:
    """Add ``rows`` to the outbox Delta table at ``outbox`` (created on first use), except rows
    whose ``keys`` it already holds; returns how many were added.

    The MERGE reads the outbox and commits only if nothing was added since it read, so of two
    overlapping deliveries of the same rows one adds them and the other, re-run, adds none.
    """
    missing = [k for k in keys if k not in rows.columns]
    if not keys or missing:
        raise FrameworkError(f"outbox {outbox}: the delivery keys must be columns of the rows; missing {missing}")
    spark = rows.sparkSession
    if tables.exists(spark, outbox):
        _check_schema(rows, tables.read(spark, outbox), outbox)
    twice = rows.groupBy(*keys).count().filter("count > 1").limit(1).collect()
    if twice:
        key = {k: twice[0][k] for k in keys}
        raise FrameworkError(
            f"outbox {outbox}: {twice[0]['count']} rows to deliver share the key {key}; "
            "a key must name one delivery: add the column that tells them apart to the keys"
        )
    tables.create(spark, outbox, rows.schema)
    on = " AND ".join(f"t.{tables.quoted(k)} <=> s.{tables.quoted(k)}" for k in keys)
    with locks.committing(outbox):
        metrics = tables.merge(spark, outbox, rows, on, [f"WHEN NOT MATCHED THEN {tables.insert_all(rows.columns)}"])
    assert metrics is not None
    return int(metrics["num_inserted_rows"])


def _check_schema(rows: DataFrame, held: DataFrame, outbox: str) -> None:
    """Refuse rows whose columns differ from the outbox's: a MERGE would cast, drop or fail on them."""
    want = {f.name.lower(): f.dataType.simpleString() for f in held.schema}
    got = {f.name.lower(): f.dataType.simpleString() for f in rows.schema}
    if want != got:
        differ = sorted(c for c in want.keys() | got.keys() if want.get(c) != got.get(c))
        raise FrameworkError(
            f"outbox {outbox}: the rows' columns differ from the outbox's in "
            + ", ".join(f"{c} ({got.get(c, 'missing')} vs {want.get(c, 'absent')})" for c in differ)
            + "; deliver the same columns, or use a new outbox"
        )
