"""Where a pipeline's tables live and how they are written safely.

Per pipeline, under ``<warehouse>/<pipeline>/``:

- ``_ledger``      one row when a batch starts and one when it commits (the commit point)
- ``window_state`` open windows / sessions with their partial aggregates, partitioned by
                   ``_bucket`` (close-time bucket): closing reads only the buckets due
- ``records``      sliding windows only: recent records, partitioned by ``_tbucket``
- ``<sink>``       the results table (final results, or a continuously updated table)
- ``late_records`` records that landed in no window, with the stream time that made them late
- ``metrics``      one row per batch (KIP-328 metric names, with ``_`` for ``-``)

Every write of a batch is idempotent: Delta's ``txnAppId``/``txnVersion`` (app id =
pipeline.table, version = batch sequence) make a repeated write a no-op, and a batch reads state
as of the versions the ledger recorded for the previous batch. So a batch that died between any
two writes, run again, ends exactly like a clean run.
"""
from __future__ import annotations

import json
import os
from contextlib import contextmanager
from dataclasses import dataclass

from delta.tables import DeltaTable
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType

LEDGER_SCHEMA = (
    "seq long, batch_id string, status string, attempt string, fingerprint string, records_in long, "
    "stream_time_before long, stream_time long, state_version long, records_version long, "
    "output_version long, input_schema string, definition string, at timestamp")


@dataclass(frozen=True)
class Tables:
    """Paths of one pipeline's Delta tables."""

    root: str
    sink: str

    @property
    def ledger(self) -> str:
        return os.path.join(self.root, "_ledger")

    @property
    def state(self) -> str:
        return os.path.join(self.root, "window_state")

    @property
    def records(self) -> str:
        return os.path.join(self.root, "records")

    @property
    def output(self) -> str:
        return os.path.join(self.root, self.sink)

    @property
    def late(self) -> str:
        return os.path.join(self.root, "late_records")

    @property
    def metrics(self) -> str:
        return os.path.join(self.root, "metrics")


def exists(spark: SparkSession, path: str) -> bool:
    return DeltaTable.isDeltaTable(spark, path)


def read(spark: SparkSession, path: str, version: int | None = None) -> DataFrame:
    """A Delta table, as of ``version`` when given (time travel)."""
    reader = spark.read.format("delta")
    if version is not None:
        reader = reader.option("versionAsOf", version)
    return reader.load(path)


def latest_version(spark: SparkSession, path: str) -> int | None:
    """The table's current version, or None if it does not exist yet."""
    if not exists(spark, path):
        return None
    return DeltaTable.forPath(spark, path).history(1).select("version").collect()[0][0]


def _nullable(schema: StructType) -> StructType:
    """The same schema with every field nullable (Delta refuses nested NOT NULL constraints)."""
    text = schema.json()
    for flag in ("nullable", "containsNull", "valueContainsNull"):
        text = text.replace(f'"{flag}":false', f'"{flag}":true')
    return StructType.fromJson(json.loads(text))


def create(spark: SparkSession, path: str, schema: StructType | str, partition_by: str | None = None) -> None:
    """Create the table if it is missing (no-op otherwise)."""
    if isinstance(schema, str):
        schema = spark.createDataFrame([], schema).schema
    builder = DeltaTable.createIfNotExists(spark).location(path).addColumns(_nullable(schema))
    if partition_by:
        builder = builder.partitionedBy(partition_by)
    builder.execute()


def append(df: DataFrame, path: str, app_id: str, version: int, partition_by: str | None = None) -> None:
    """Append ``df`` once: a second append with the same app id and version is skipped."""
    writer = (df.write.format("delta").mode("append")
              .option("txnAppId", app_id).option("txnVersion", version))
    if partition_by:
        writer = writer.partitionBy(partition_by)
    writer.save(path)


def rewrite(df: DataFrame, path: str, replaced: str, app_id: str, version: int) -> None:
    """In one commit, once: remove the rows matching ``replaced`` and add ``df`` (whose rows
    may lie outside ``replaced``: new partials go to later buckets)."""
    spark = df.sparkSession
    spark.conf.set("spark.databricks.delta.replaceWhere.constraintCheck.enabled", "false")
    try:
        (df.write.format("delta").mode("overwrite").option("replaceWhere", replaced)
         .option("txnAppId", app_id).option("txnVersion", version).save(path))
    finally:
        spark.conf.unset("spark.databricks.delta.replaceWhere.constraintCheck.enabled")


@contextmanager
def idempotent(spark: SparkSession, app_id: str, version: int):
    """Make the Delta DML (MERGE/UPDATE/DELETE) run inside the block idempotent."""
    spark.conf.set("spark.databricks.delta.write.txnAppId", app_id)
    spark.conf.set("spark.databricks.delta.write.txnVersion", str(version))
    try:
        yield
    finally:
        spark.conf.unset("spark.databricks.delta.write.txnAppId")
        spark.conf.unset("spark.databricks.delta.write.txnVersion")
