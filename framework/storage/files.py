"""Small files and staged rows beside the tables, on whatever file system holds them.

Small files take one of two forms (``smallfile``): a file from a classic session, a folder
holding one part file from a Spark Connect session, which writes files only as a Spark job
does. Over Connect a folder is listed by the files Spark finds in it; names starting with
``_`` or ``.`` are hidden from Spark's reads, so no name a reader looks up does. How each kind
of session writes, reads, lists and removes them is its backend's (``backend``).
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Sequence

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType

from . import backend
from .smallfile import text_of
from .tables import exists, read


def put_text(spark: SparkSession, path: str, text: str) -> None:
    """Write a small file (local disk, HDFS or an object store), whole, so a reader never finds
    it created but still empty (a runner racing another attempt of the same batch read its batch
    id as ''). A classic session writes it in place on an object store (it appears when it is
    closed, whole), elsewhere beside it and renamed into place; over Spark Connect it takes the
    folder form (``smallfile``), written by one job (``SessionBackend.put_text``)."""
    backend.of(spark).put_text(path, text)


def get_text(spark: SparkSession, path: str, *older: str) -> str | None:
    """A small file's text, in either form, or None if it does not exist (or was removed);
    ``older``: where earlier versions kept the same file, read in turn when ``path`` holds none."""
    text = _text(spark, path)
    return text if text is not None or not older else get_text(spark, *older)


def _text(spark: SparkSession, path: str) -> str | None:
    return text_of(posixpath.basename(path), backend.of(spark).texts(path))


def stage(df: DataFrame, path: str) -> None:
    """Keep ``df``'s rows at ``path`` for a later publication, as plain Parquet files: only
    their publisher reads them, after a commit point that lands only once they are complete
    (``_SUCCESS``), so a Delta log would add a commit and a snapshot and protect nothing."""
    df.write.mode("overwrite").parquet(path)


def is_staged(spark: SparkSession, path: str) -> bool:
    """Whether ``path`` holds staged rows: Parquet files or a Delta table (a replay's). A staging
    write completes before its attempt's commit point, and only a committed attempt's rows are
    published, so files found there are whole; removal takes them first (``finish``)."""
    return backend.of(spark).holds_parquet(path) or exists(spark, path)


def read_staged(spark: SparkSession, path: str, schema: str | None = None) -> DataFrame:
    """The rows ``stage`` (or a replay's publication into its own folder) left at ``path``;
    ``schema`` (``StructType.json()``), when the stager recorded it, spares the Spark job
    that reads it from the Parquet files."""
    if exists(spark, path):
        return read(spark, path)
    reader = spark.read if schema is None else spark.read.schema(StructType.fromJson(json.loads(schema)))
    return reader.parquet(path)


def first_missing(spark: SparkSession, paths: Sequence[str]) -> str | None:
    """The first of the files ``paths`` that does not exist, None if all do. Over Spark Connect,
    asked of the server by analysed reads, log2 of them (``SessionBackend.first_missing``)."""
    return backend.of(spark).first_missing(paths)


def list_names(spark: SparkSession, path: str) -> list[str]:
    """Names of the entries of folder ``path`` (empty if it does not exist). Over Spark Connect:
    the entries holding a file Spark reads (not hidden, not empty), so a removed one is left out."""
    return backend.of(spark).list_names(path)


def remove(spark: SparkSession, path: str) -> None:
    """Delete a folder (or a small file) and what it holds, on whatever file system holds it;
    over Spark Connect, overwrite it with no rows: an empty part file, which every reader here
    takes for nothing."""
    backend.of(spark).remove(path)
