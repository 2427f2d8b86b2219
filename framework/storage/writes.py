"""How a batch writes a table safely, whatever else runs.

- The rate-limiting buffer is rewritten whole by each attempt, in one overwrite (window state
  changes only at the commit point): why that is safe is told in docs/design.md#state-writes.
- Every commit a batch makes is tagged (``userMetadata`` starting ``finalresults:``) with the
  pipeline, table, sequence number and attempt, and holds the table's commit lock
  (``framework.storage.locks``).
"""

from __future__ import annotations

from typing import Callable, TypeVar

from delta.exceptions import (  # the base classes: importing them converts no Java exception
    ConcurrentAppendException,
    ConcurrentDeleteDeleteException,
    ConcurrentDeleteReadException,
    ConcurrentTransactionException,
    ConcurrentWriteException,
    DeltaConcurrentModificationException,
    MetadataChangedException,
    ProtocolChangedException,
)
from pyspark.sql import DataFrame, SparkSession

from . import classic
from .commitlog import commits_after
from .locks import committing, session_conf
from .tables import as_table, latest_version, properties

TAG = "finalresults:"  # userMetadata prefix of every commit a batch or replay makes


LEDGER_APP = "finalresults"  # Delta txnAppId of ledger commits (the commit point) and publications


MAINTENANCE = frozenset(
    {
        "OPTIMIZE",
        "SET TBLPROPERTIES",
        "UNSET TBLPROPERTIES",
        "VACUUM START",
        "VACUUM END",
        "UPGRADE PROTOCOL",
        "CREATE TABLE",
        "ADD CONSTRAINT",
        "DROP CONSTRAINT",
        "SET TABLE PROPERTIES",
        "COMPUTE STATS",
        "ANALYZE",
    }
)


RETRIES = 3  # attempts of one write that lost a race to another writer

T = TypeVar("T")


def history_since(spark: SparkSession, path: str, version: int | None) -> list:
    """The table's commits after ``version`` (None: all), oldest first: version, operation,
    userMetadata. Read from the commit files themselves when the log still holds ``version``'s
    (``commitlog``: no listing), else from Delta's history, with room to spare, and again with
    more if commits landing meanwhile pushed a wanted one out."""
    if version is not None and (recent := commits_after(spark, path, version)) is not None:
        return recent
    head = latest_version(spark, path)
    if head is None or (version is not None and head <= version):
        return []
    wanted = head - (version if version is not None else -1)
    while True:
        limit = "" if version is None else f" LIMIT {wanted + 8}"
        history = spark.sql(f"DESCRIBE HISTORY {as_table(spark, path)}{limit}")
        rows = history.select("version", "operation", "userMetadata").collect()
        since = sorted((r for r in rows if version is None or r.version > version), key=lambda r: r.version)
        if version is None or (since and since[0].version == version + 1) or len(rows) < wanted + 8:
            return since  # complete, or all the log still holds
        wanted *= 2


def same_rows(spark: SparkSession, path: str, version: int) -> int:
    """The latest version of the table if it holds the same rows as ``version`` (only
    maintenance landed since), else ``version``."""
    since = history_since(spark, path, version)
    if not since or since[0].version != version + 1 or any(changes_rows(c) for c in since):
        return version  # nothing since, or the log no longer tells what came right after it
    return since[-1].version


def changes_rows(commit) -> bool:
    """Whether a commit (a ``history_since`` row) may have changed rows: any batch's commit, or
    an operation that is not maintenance."""
    return (commit.userMetadata or "").startswith(TAG) or commit.operation not in MAINTENANCE


def once(version: int) -> dict[str, str]:
    """Write options that make Delta skip the write if a commit with transaction id
    (``LEDGER_APP``, ``version`` or later) landed on the table."""
    return {"txnAppId": LEDGER_APP, "txnVersion": str(version)}


def tagged(
    spark: SparkSession,
    path: str,
    tag: str,
    write: Callable[[], object],
    txn_version: int | None = None,
    evolve: bool = False,
) -> None:
    """Run ``write`` (a commit to the table at ``path``, DML included) with its commit's
    userMetadata set to ``tag``, holding the table's commit lock. With ``txn_version``, Delta
    skips the write if a commit with transaction id (``LEDGER_APP``, that version or later)
    landed; ``evolve`` lets a MERGE add the source's new columns to the table."""
    confs = {"spark.databricks.delta.commitInfo.userMetadata": tag}
    if evolve:
        confs["spark.databricks.delta.schema.autoMerge.enabled"] = "true"
    if txn_version is not None:
        confs.update(
            {
                "spark.databricks.delta.write.txnAppId": LEDGER_APP,
                "spark.databricks.delta.write.txnVersion": str(txn_version),
            }
        )
    with committing(path), session_conf(spark, confs):
        write()


def save(df: DataFrame, path: str, tag: str, mode: str = "append", **options: str) -> None:
    """Write ``df`` to ``path`` in one commit tagged ``tag`` (a write option, so writes of one
    batch to different tables can run at the same time). A table this creates gets the
    framework's ``properties`` (Delta ignores them on an existing table)."""
    with committing(path):
        df.write.format("delta").mode(mode).options(**properties(path), **options, userMetadata=tag).save(path)


def rewrite(df: DataFrame, path: str, replaced: str | None, tag: str, **options: str) -> None:
    """In one commit: remove the rows matching ``replaced`` (None: every row) and add ``df``
    (whose rows may lie outside ``replaced``: new partials go to later buckets)."""
    if replaced is not None:
        options["replaceWhere"] = replaced
    with (
        committing(path),
        session_conf(
            df.sparkSession,  # the table lock first, as in ``tagged``
            {"spark.databricks.delta.replaceWhere.constraintCheck.enabled": "false"},
        ),
    ):
        save(df, path, tag, "overwrite", **options)


# Delta's commit conflicts as delta-spark's Python classes (no common base among them). A
# conflict arrives as one of these only where ``delta.exceptions.captured`` was imported, which
# makes PySpark convert Delta's Java conflicts; elsewhere it arrives as a Py4JJavaError.
CONFLICTS = (
    DeltaConcurrentModificationException,
    ConcurrentWriteException,
    ConcurrentAppendException,
    ConcurrentDeleteReadException,
    ConcurrentDeleteDeleteException,
    ConcurrentTransactionException,
    MetadataChangedException,
    ProtocolChangedException,
)
# The Java class every Delta commit conflict extends: io.delta.exceptions.* and the
# org.apache.spark.sql.delta.* classes of the same names.
JVM_CONFLICT = "org.apache.spark.sql.delta.DeltaConcurrentModificationException"


def lost_race(error: BaseException) -> bool:
    """Whether ``error`` is a write that lost to another writer: the write may be tried again.
    That is a Delta commit conflict (another commit appended, deleted or
    wrote what this one read, changed the table's metadata or protocol, or took its transaction
    id): one of ``CONFLICTS``, or a Py4JJavaError whose Java exception, or a cause of it, is a
    ``JVM_CONFLICT``. Decided by class, never by message."""
    if isinstance(error, CONFLICTS):
        return True
    return classic.raised_java(error, JVM_CONFLICT)


def version_of(history: list, tag: str) -> int | None:
    return max((c.version for c in history if c.userMetadata == tag), default=None)


def retried(write: Callable[[], T], worth_it: Callable[[], bool] = lambda: True) -> T:
    """Run ``write``, again while it loses a race to another writer (``lost_race``) and
    ``worth_it()`` says another try can succeed, ``RETRIES`` times in all; else the lost race is
    raised. The one retry of the framework's writes: a commit point's ``worth_it`` is that its
    fence did not move (``ledger.commit_point``). Only for a write that may run twice: one that
    starts over from what it reads, or one Delta skips when it landed already (a transaction id)."""
    for tries_left in reversed(range(RETRIES)):
        try:
            return write()
        except Exception as e:
            if not lost_race(e) or not worth_it() or not tries_left:
                raise
    raise AssertionError("unreachable: the last try returns or raises")
