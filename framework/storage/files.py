"""Small files and staged rows beside the tables, on whatever file system holds them."""

from __future__ import annotations

import json
import uuid
from urllib.parse import urlparse

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType

from . import classic
from .tables import exists, read

# Object stores whose files appear whole when closed (one upload), never half-written; a rename
# there is a copy and a delete, neither atomic nor needed. (ABFS shows a file from its creation.)
OBJECT_STORES = ("s3a", "s3", "gs")


def put_text(spark: SparkSession, path: str, text: str) -> None:
    """Write a small file (local disk, HDFS or an object store), whole, so a reader never finds
    it created but still empty (a runner racing another attempt of the same batch read its batch
    id as ''). On an object store the file is written in place: it appears when it is closed,
    whole, replacing the old one in one step. Elsewhere it is written beside and renamed into
    place."""
    if urlparse(path).scheme in OBJECT_STORES:
        classic.write_file(spark, path, text)
        return
    written = f"{path}.{uuid.uuid4().hex}.tmp"
    classic.write_file(spark, written, text)
    classic.move(spark, written, path)


def get_text(spark: SparkSession, path: str) -> str | None:
    """A small file's text, or None if it does not exist."""
    return classic.read_file(spark, path)


def stage(df: DataFrame, path: str) -> None:
    """Keep ``df``'s rows at ``path`` for a later publication, as plain Parquet files: only
    their publisher reads them, after a commit point that lands only once they are complete
    (``_SUCCESS``), so a Delta log would add a commit and a snapshot and protect nothing."""
    df.write.mode("overwrite").parquet(path)


def is_staged(spark: SparkSession, path: str) -> bool:
    """Whether ``path`` holds staged rows: complete Parquet files or a Delta table (a replay's)."""
    return classic.file_exists(spark, f"{path}/_SUCCESS") or exists(spark, path)


def read_staged(spark: SparkSession, path: str, schema: str | None = None) -> DataFrame:
    """The rows ``stage`` (or a replay's publication into its own folder) left at ``path``;
    ``schema`` (``StructType.json()``), when the stager recorded it, spares the Spark job
    that reads it from the Parquet files."""
    if exists(spark, path):
        return read(spark, path)
    reader = spark.read if schema is None else spark.read.schema(StructType.fromJson(json.loads(schema)))
    return reader.parquet(path)


def list_names(spark: SparkSession, path: str) -> list[str]:
    """Names of the entries of folder ``path`` (empty if it does not exist)."""
    return classic.list_names(spark, path)


def remove(spark: SparkSession, path: str) -> None:
    """Delete a folder and what it holds, on whatever file system holds it."""
    classic.remove(spark, path)
