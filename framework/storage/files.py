"""Small files and staged rows beside the tables, on whatever file system holds them.

Small files take one of two forms (``smallfile``): a file from a classic session, a folder
holding one part file from a Spark Connect session, which writes files only as a Spark job
does. Over Connect a folder is listed by the files Spark finds in it; names starting with
``_`` or ``.`` are hidden from Spark's reads, so no name a reader looks up does.
"""

from __future__ import annotations

import json
import posixpath
import uuid
from collections.abc import Sequence
from urllib.parse import unquote, urlparse

from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from . import classic
from .smallfile import text_of
from .tables import exists, read

# Object stores whose files appear whole when closed (one upload), never half-written; a rename
# there is a copy and a delete, neither atomic nor needed. (ABFS shows a file from its creation.)
OBJECT_STORES = ("s3a", "s3", "gs")


def put_text(spark: SparkSession, path: str, text: str) -> None:
    """Write a small file (local disk, HDFS or an object store), whole, so a reader never finds
    it created but still empty (a runner racing another attempt of the same batch read its batch
    id as ''). On an object store the file is written in place: it appears when it is closed,
    whole, replacing the old one in one step. Elsewhere it is written beside and renamed into
    place. Over Spark Connect it takes the folder form (``smallfile``), written by one job."""
    if not classic.is_classic(spark):
        _write_lines(spark, path, [json.dumps(text)])
        return
    if urlparse(path).scheme in OBJECT_STORES:
        classic.write_file(spark, path, text)
        return
    written = f"{path}.{uuid.uuid4().hex}.tmp"
    classic.write_file(spark, written, text)
    classic.move(spark, written, path)


def get_text(spark: SparkSession, path: str, *older: str) -> str | None:
    """A small file's text, in either form, or None if it does not exist (or was removed);
    ``older``: where earlier versions kept the same file, read in turn when ``path`` holds none."""
    text = _text(spark, path)
    return text if text is not None or not older else get_text(spark, *older)


def _text(spark: SparkSession, path: str) -> str | None:
    if classic.is_classic(spark):
        return text_of(posixpath.basename(path), classic.read_texts(spark, path))
    try:
        rows = spark.read.text(path).select("value", F.col("_metadata.file_path")).collect()
    except AnalysisException:  # PATH_NOT_FOUND
        return None
    found: dict[str, list[str]] = {}
    for value, file in rows:
        found.setdefault(posixpath.basename(unquote(urlparse(file).path)), []).append(value)
    return text_of(posixpath.basename(path), {name: "\n".join(lines) for name, lines in found.items()})


def stage(df: DataFrame, path: str) -> None:
    """Keep ``df``'s rows at ``path`` for a later publication, as plain Parquet files: only
    their publisher reads them, after a commit point that lands only once they are complete
    (``_SUCCESS``), so a Delta log would add a commit and a snapshot and protect nothing."""
    df.write.mode("overwrite").parquet(path)


def is_staged(spark: SparkSession, path: str) -> bool:
    """Whether ``path`` holds staged rows: Parquet files or a Delta table (a replay's). A staging
    write completes before its attempt's commit point, and only a committed attempt's rows are
    published, so files found there are whole; removal takes them first (``finish``)."""
    if classic.is_classic(spark):
        found = any(name.endswith(".parquet") for name in classic.list_names(spark, path))
    else:
        found = any(name.endswith(".parquet") for name in _files_in(spark, path))
    return found or exists(spark, path)


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
    asked of the server by analysed reads (Spark checks that each path exists and reads none):
    one of them all, and when one is missing, one of each half in turn (log2 of them)."""
    if classic.is_classic(spark):
        return next((path for path in paths if not classic.file_exists(spark, path)), None)

    def absent(some: list[str]) -> bool:
        try:
            spark.read.format("binaryFile").load(some).schema  # noqa: B018  (analysis checks the paths)
        except AnalysisException as e:
            if e.getCondition() == "PATH_NOT_FOUND":
                return True
            raise
        return False

    some = list(paths)  # a Connect reader takes a list only (inputFiles gives a tuple there)
    if not some or not absent(some):
        return None
    while len(some) > 1:
        half = len(some) // 2
        some = some[:half] if absent(some[:half]) else some[half:]
    return some[0]


def list_names(spark: SparkSession, path: str) -> list[str]:
    """Names of the entries of folder ``path`` (empty if it does not exist). Over Spark Connect:
    the entries holding a file Spark reads (not hidden, not empty), so a removed one is left out."""
    if classic.is_classic(spark):
        return classic.list_names(spark, path)
    return sorted({name.split("/", 1)[0] for name in _files_in(spark, path)})


def remove(spark: SparkSession, path: str) -> None:
    """Delete a folder (or a small file) and what it holds, on whatever file system holds it;
    over Spark Connect, overwrite it with no rows: an empty part file, which every reader here
    takes for nothing."""
    if classic.is_classic(spark):
        classic.remove(spark, path)
    else:
        _write_lines(spark, path, [])


def _write_lines(spark: SparkSession, path: str, lines: list[str]) -> None:
    """Replace what is at ``path`` with a folder holding ``lines`` in one part file (one Spark job)."""
    spark.createDataFrame([(line,) for line in lines], "value string").coalesce(1).write.mode("overwrite").text(path)


def _files_in(spark: SparkSession, path: str) -> list[str]:
    """The files Spark finds under folder ``path`` that are not empty, by their path below it
    (one Spark job; their content is not read); none if there is no such folder."""
    try:
        found = spark.read.format("binaryFile").option("recursiveFileLookup", "true").load(path)
        rows = found.where("length > 0").select("path").collect()
    except AnalysisException:  # PATH_NOT_FOUND
        return []
    root = unquote(urlparse(path).path).rstrip("/") + "/"
    return [unquote(urlparse(file).path).removeprefix(root) for (file,) in rows]
