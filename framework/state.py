"""Where a pipeline's tables live and how they are written safely.

Per pipeline, under ``<warehouse>/<pipeline>/``:

- ``_ledger``      one row when a batch starts and one when it commits (the commit point)
- ``window_state`` open windows / sessions with their partial aggregates, partitioned by
                   ``_bucket`` (close-time bucket): closing reads only the buckets due
- ``records``      sliding windows only: recent records, partitioned by ``_tbucket``
- ``buffer_<name>`` ``until_time_limit`` only: the suppression buffer (one row per buffered key
                   and window), named by ``Suppressed.with_name`` (default ``suppress``)
- ``<sink>``       the results table (final results, or a continuously updated table)
- ``late_records`` records that landed in no window, with the stream time that made them late
- ``metrics``      one row per batch (KIP-328 metric names, with ``_`` for ``-``)

A batch writes each table at most once, and every commit is tagged with the batch
(``userMetadata`` = ``<pipeline>.<table>@<seq>``). A batch reads state as of the versions the
ledger recorded for the previous batch, so a batch that died between any two writes, run again,
plans the same writes; a resumed batch skips a table whose last commit already carries its tag.
Only the ledger's *started* row is a batch's claim and must hold against a concurrent runner
(``claim``); the other writes rely on the claim and the tag.

Delta's optimistic commits need a store whose "create the next log file if absent" is atomic.
Object stores and HDFS have one (with the right LogStore); a local disk does not across
processes (a rename overwrites, and Delta's local LogStore locks within one JVM only), so on a
local warehouse every commit holds an OS file lock beside its table (``committing``).
"""
from __future__ import annotations

import fcntl
import json
import os
import threading
import time
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from typing import Callable
from urllib.parse import urlparse

from delta.tables import DeltaTable
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

CREATE_WAIT_S = 30.0  # how long a runner waits for another runner's creation of a table to land
LOCK_WAIT_S = 600.0   # how long a commit waits for another process's commit to the same table

LEDGER_SCHEMA = (
    "seq long, batch_id string, status string, attempt string, fingerprint string, records_in long, "
    "stream_time_before long, stream_time long, state_version long, records_version long, "
    "output_version long, input_schema string, definition string, at timestamp, buffer_version long, "
    "windows_open long")


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

    def buffer(self, name: str) -> str:
        return os.path.join(self.root, f"buffer_{name}")

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


def head(spark: SparkSession, path: str) -> tuple[str, int] | None:
    """The table's id (new when a table is created again at the same path) and current version,
    or None if it does not exist yet (reads the log's listing, no Spark job: ``DeltaLog.update``
    with its default arguments, called from Python)."""
    if not exists(spark, path):
        return None
    log = spark._jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, path)
    snapshot = log.update(False, getattr(log, "update$default$2")(), getattr(log, "update$default$3")())
    return snapshot.metadata().id(), snapshot.version()


def latest_version(spark: SparkSession, path: str) -> int | None:
    """The table's current version, or None if it does not exist yet."""
    current = head(spark, path)
    return None if current is None else current[1]


def committed_by(spark: SparkSession, path: str, tag: str, recent: int = 5) -> bool:
    """Whether one of the table's last ``recent`` commits carries ``tag`` as its userMetadata."""
    return bool(DeltaTable.forPath(spark, path).history(recent).filter(F.col("userMetadata") == tag)
                .limit(1).collect())


class _FileLock:
    """An exclusive lock on one file, across processes (``flock``) and threads, re-entrant
    within a thread."""

    def __init__(self, path: str):
        self.path, self.guard, self.depth, self.fd = path, threading.RLock(), 0, -1

    def __enter__(self) -> None:
        self.guard.acquire()
        try:
            if self.depth == 0:
                self.fd = self._flock()
        except BaseException:
            self.guard.release()
            raise
        self.depth += 1

    def _flock(self) -> int:
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        fd, deadline = os.open(self.path, os.O_CREAT | os.O_RDWR), time.monotonic() + LOCK_WAIT_S
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return fd
            except BlockingIOError:
                if time.monotonic() > deadline:
                    os.close(fd)
                    raise TimeoutError(f"another process has held the commit lock {self.path} for over "
                                       f"{LOCK_WAIT_S:.0f} s") from None
                time.sleep(0.02)

    def __exit__(self, *exc) -> None:
        self.depth -= 1
        if self.depth == 0:
            os.close(self.fd)   # closing the only descriptor releases the flock
        self.guard.release()


_locks: dict[str, _FileLock] = {}
_locks_guard = threading.Lock()


def is_local(path: str) -> bool:
    """Whether ``path`` is on a local disk (a plain path or a ``file:`` URL)."""
    return urlparse(path).scheme in ("", "file")


def committing(path: str) -> AbstractContextManager:
    """A lock to hold while committing to the Delta table at ``path``: ``<table>.lock`` beside
    it on a local disk; nothing elsewhere, where the store's put-if-absent is atomic."""
    if not is_local(path):
        return nullcontext()
    parsed = urlparse(path)
    lock_file = os.path.abspath(parsed.path if parsed.scheme else path).rstrip("/") + ".lock"
    with _locks_guard:
        return _locks.setdefault(lock_file, _FileLock(lock_file))


def _nullable(schema: StructType) -> StructType:
    """The same schema with every field nullable (Delta refuses nested NOT NULL constraints)."""
    text = schema.json()
    for flag in ("nullable", "containsNull", "valueContainsNull"):
        text = text.replace(f'"{flag}":false', f'"{flag}":true')
    return StructType.fromJson(json.loads(text))


def create(spark: SparkSession, path: str, schema: StructType | str, partition_by: str | None = None) -> None:
    """Create the table if it is missing (no-op otherwise).

    Two processes starting a pipeline's first batch at once both create its ledger; Delta fails
    the slower creation (location not empty, protocol changed, ... depending on the moment), so a
    failed creation waits for the other's table to appear, and fails if none does."""
    if exists(spark, path):
        return
    if isinstance(schema, str):
        schema = spark.createDataFrame([], schema).schema
    builder = DeltaTable.createIfNotExists(spark).location(path).addColumns(_nullable(schema))
    if partition_by:
        builder = builder.partitionedBy(partition_by)
    try:
        with committing(path):
            builder.execute()
    except Exception as failure:
        deadline = time.monotonic() + CREATE_WAIT_S
        while not _loads(spark, path):
            if time.monotonic() > deadline:
                raise failure
            time.sleep(0.2)


def _loads(spark: SparkSession, path: str) -> bool:
    """Whether ``path`` reads as a Delta table. Unlike ``exists``, a read refreshes Delta's cached
    log, which after a lost race to create the table still says there is none."""
    try:
        read(spark, path).schema
        return True
    except Exception:
        return False


@dataclass(frozen=True)
class WriteId:
    """One write of one batch: ``app_id`` names pipeline and table, ``version`` the batch.
    ``resumed`` says an earlier attempt of the batch may already have made this write."""

    app_id: str
    version: int
    resumed: bool = False

    @property
    def tag(self) -> str:
        return f"{self.app_id}@{self.version}"


def _done(spark: SparkSession, path: str, wid: WriteId) -> bool:
    """Whether the table's last commit is ``wid`` (batches of a pipeline write in sequence,
    so an earlier attempt's write, if it landed, is the last commit)."""
    return wid.resumed and exists(spark, path) and committed_by(spark, path, wid.tag, recent=1)


def once(spark: SparkSession, path: str, wid: WriteId, write: Callable[[], None]) -> None:
    """Run ``write`` (Delta DML on ``path``: MERGE, DELETE, RESTORE) tagged with ``wid``,
    unless a resumed batch finds it already made."""
    with committing(path):
        if not _done(spark, path, wid):
            tagged(spark, path, wid.tag, write)


_conf_guard = threading.RLock()


@contextmanager
def _session_conf(spark: SparkSession, key: str, value: str):
    """Set a session conf for the writes inside the block only. The conf is seen by every
    thread of the session, so such blocks run one at a time (writes of one batch run
    concurrently; ``save`` passes its tag as a write option and needs no conf)."""
    with _conf_guard:
        spark.conf.set(key, value)
        try:
            yield
        finally:
            spark.conf.unset(key)


def tagged(spark: SparkSession, path: str, tag: str, write: Callable[[], None]) -> None:
    """Run ``write`` (a commit to the table at ``path``, DML included) with its commit's
    userMetadata set to ``tag``, holding the table's commit lock."""
    with committing(path), _session_conf(spark, "spark.databricks.delta.commitInfo.userMetadata", tag):
        write()


def save(df: DataFrame, path: str, wid: WriteId, mode: str = "append", **options: str) -> None:
    """Write ``df`` to ``path`` once, tagged with ``wid`` by a write option (so writes of one
    batch to different tables can run at the same time)."""
    with committing(path):
        if not _done(df.sparkSession, path, wid):
            df.write.format("delta").mode(mode).options(**options, userMetadata=wid.tag).save(path)


def append(df: DataFrame, path: str, wid: WriteId) -> None:
    """Append ``df`` once."""
    save(df, path, wid)


def claim(df: DataFrame, path: str, wid: WriteId, tag: str, seen: int, **options: str) -> bool:
    """Append ``df`` (a claim row) unless another writer committed to ``path`` since version
    ``seen``, or made the same claim; True if this call's commit landed (tagged ``tag``).

    On a local disk that is a compare-and-append under the commit lock (a version check
    costs a directory listing). Elsewhere Delta decides: it skips a repeated
    ``txnAppId``/``txnVersion`` and fails the second of two racing commits, and the table's
    history says whose commit landed."""
    writer = df.write.format("delta").mode("append").options(**options, userMetadata=tag)
    if is_local(path):
        with committing(path):
            if latest_version(df.sparkSession, path) != seen:
                return False
            writer.save(path)
            return True
    writer.option("txnAppId", wid.app_id).option("txnVersion", wid.version).save(path)
    return committed_by(df.sparkSession, path, tag)


def rewrite(df: DataFrame, path: str, replaced: str | None, wid: WriteId) -> None:
    """In one commit, once: remove the rows matching ``replaced`` (None: every row) and add
    ``df`` (whose rows may lie outside ``replaced``: new partials go to later buckets)."""
    options = {"replaceWhere": replaced} if replaced is not None else {}
    with committing(path), _session_conf(df.sparkSession,  # the table lock first, as in ``tagged``
                                         "spark.databricks.delta.replaceWhere.constraintCheck.enabled", "false"):
        save(df, path, wid, "overwrite", **options)
