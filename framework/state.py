"""Where a pipeline's tables live and how a batch writes them safely.

Per pipeline, under ``<warehouse>/<pipeline>/``:

- ``_ledger``      one *committed* row per batch: the commit point (input fingerprint, stream
                   time, the version of each state table the batch left, its metrics)
- ``window_state`` open windows / sessions with their partial aggregates, partitioned by
                   ``_bucket`` (close-time bucket): closing reads only the buckets due
- ``records``      sliding windows only: recent records, partitioned by ``_tbucket``
- ``buffer_<name>`` ``until_time_limit`` only: the suppression buffer (one row per buffered key
                   and window), named by ``Suppressed.with_name`` (default ``suppress``)
- ``<sink>``       the results table (final results, or a continuously updated table)
- ``late_records`` records that landed in no window, with the stream time that made them late
- ``metrics``      one row per batch (KIP-328 metric names, with ``_`` for ``-``)
- ``_staging/``    what a batch attempt will publish once it has committed (removed after)

Two kinds of writes, both safe whatever else runs (see ``framework.runtime`` for the protocol):

- State tables (window state, records, buffers) are *advanced in place* from the version the
  ledger recorded (``advance``): a batch reads them as of that version (time travel), so commits
  made since by an attempt that never committed are garbage, undone (``RESTORE``) before the
  next write, and never read. The version a write made is recorded only if nothing but
  maintenance (``OPTIMIZE``, table properties, ``VACUUM``) landed between it and its base.
- The ledger row is appended with Delta's transaction id (``txnAppId``/``txnVersion`` = the
  ledger version the attempt read + 1, see ``commit_point``): a compare-and-append that Delta
  decides, so of two attempts that read the same ledger, at most one commits, on any store.
  Maintenance commits set no transaction id, so they never fence a batch out.

Every commit a batch makes is tagged (``userMetadata`` starting ``finalresults:``) with the
pipeline, table, sequence number and attempt.

Delta's optimistic commits need a store whose "create the next log file if absent" is atomic.
Object stores and HDFS have one (with the right LogStore); a local disk does not across
processes (a rename overwrites, and Delta's local LogStore locks within one JVM only), so on a
local warehouse every commit holds an OS file lock beside its table (``committing``) for the
length of that commit only.
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
from py4j.protocol import Py4JJavaError
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType

CREATE_WAIT_S = 30.0  # how long a runner waits for another runner's creation of a table to land
LOCK_WAIT_S = 600.0   # how long a commit waits for another process's commit to the same table

LEDGER_SCHEMA = (
    "seq long, batch_id string, status string, attempt string, fingerprint string, records_in long, "
    "stream_time_before long, stream_time long, state_version long, records_version long, "
    "output_version long, input_schema string, definition string, at timestamp, buffer_version long, "
    "windows_open long, output_base long, metrics string")
TAG = "finalresults:"        # userMetadata prefix of every commit a batch or replay makes
LEDGER_APP = "finalresults"  # Delta txnAppId of ledger commits (the commit point) and publications
# Operations that change no rows: maintenance by other writers, never undone or fenced against.
MAINTENANCE = frozenset({"OPTIMIZE", "SET TBLPROPERTIES", "UNSET TBLPROPERTIES", "VACUUM START", "VACUUM END",
                         "UPGRADE PROTOCOL", "CREATE TABLE", "ADD CONSTRAINT", "DROP CONSTRAINT",
                         "SET TABLE PROPERTIES", "COMPUTE STATS", "ANALYZE"})
RETRIES = 3  # attempts of one write that lost a race to another writer


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

    def buffer(self, name: str | None) -> str:
        """The rate-limiting buffer of suppression ``name`` (unnamed: ``suppress``)."""
        return os.path.join(self.root, f"buffer_{name or 'suppress'}")

    @property
    def output(self) -> str:
        return os.path.join(self.root, self.sink)

    @property
    def late(self) -> str:
        return os.path.join(self.root, "late_records")

    @property
    def metrics(self) -> str:
        return os.path.join(self.root, "metrics")

    @property
    def staging(self) -> str:
        return os.path.join(self.root, "_staging")


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
    snapshot = _snapshot(spark, path)
    return None if snapshot is None else (snapshot.metadata().id(), snapshot.version())


def ledger_head(spark: SparkSession, path: str) -> tuple[str, int, int]:
    """The ledger's id, current version and *fence*: the last transaction version a batch or
    replay committed with (``commit_point``), 0 before the first, from one snapshot."""
    snapshot = _snapshot(spark, path)
    recorded = snapshot.transactions().get(LEDGER_APP)
    return snapshot.metadata().id(), snapshot.version(), int(recorded.get()) if recorded.isDefined() else 0


def _snapshot(spark: SparkSession, path: str):
    if not exists(spark, path):
        return None
    log = spark._jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, path)
    return log.update(False, getattr(log, "update$default$2")(), getattr(log, "update$default$3")())


def prepare(spark: SparkSession, path: str) -> None:
    """Compute the table's current snapshot with its transaction ids, which the next commit to
    it needs first: done ahead, beside other work, that commit starts from a cached snapshot.
    Best effort: if this fails, the commit computes them itself and reports what fails."""
    try:
        snapshot = _snapshot(spark, path)
        if snapshot is not None:
            snapshot.transactions()
    except Py4JJavaError:
        pass


def latest_version(spark: SparkSession, path: str) -> int | None:
    """The table's current version, or None if it does not exist yet."""
    current = head(spark, path)
    return None if current is None else current[1]


def history_since(spark: SparkSession, path: str, version: int | None) -> list:
    """The table's commits after ``version`` (None: all), oldest first: version, operation,
    userMetadata. Reads the latest commits with room to spare, and again with more if commits
    landing meanwhile pushed a wanted one out."""
    head = latest_version(spark, path)
    if head is None or (version is not None and head <= version):
        return []
    table, wanted = DeltaTable.forPath(spark, path), head - (version if version is not None else -1)
    while True:
        rows = (table.history() if version is None else table.history(wanted + 8)) \
            .select("version", "operation", "userMetadata").collect()
        since = sorted((r for r in rows if version is None or r.version > version), key=lambda r: r.version)
        if version is None or (since and since[0].version == version + 1) or len(rows) < wanted + 8:
            return since  # complete, or all the log still holds
        wanted *= 2


def same_rows(spark: SparkSession, path: str, version: int) -> int:
    """The latest version of the table if it holds the same rows as ``version`` (only
    maintenance landed since), else ``version``."""
    head = latest_version(spark, path)
    if head is None or head == version or any(changes_rows(c) for c in history_since(spark, path, version)):
        return version
    return head


def changes_rows(commit) -> bool:
    """Whether a commit (a ``history_since`` row) may have changed rows: any batch's commit, or
    an operation that is not maintenance."""
    return (commit.userMetadata or "").startswith(TAG) or commit.operation not in MAINTENANCE


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
_conf_guard = threading.RLock()  # held while session confs tag commits (``_session_conf``)
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
        with committing(path), _conf_guard:  # no other thread's commit tag may be set meanwhile
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



@contextmanager
def _session_conf(spark: SparkSession, confs: dict[str, str]):
    """Set session confs for the writes inside the block only. A conf is seen by every
    thread of the session, so such blocks run one at a time (writes of one batch run
    concurrently; ``save`` passes its tag as a write option and needs no conf)."""
    with _conf_guard:
        for key, value in confs.items():
            spark.conf.set(key, value)
        try:
            yield
        finally:
            for key in confs:
                spark.conf.unset(key)


def tagged(spark: SparkSession, path: str, tag: str, write: Callable[[], None], txn_version: int | None = None) -> None:
    """Run ``write`` (a commit to the table at ``path``, DML included) with its commit's
    userMetadata set to ``tag``, holding the table's commit lock. With ``txn_version``, Delta
    skips the write if a commit with transaction id (``LEDGER_APP``, that version or later) landed."""
    confs = {"spark.databricks.delta.commitInfo.userMetadata": tag}
    if txn_version is not None:
        confs.update({"spark.databricks.delta.write.txnAppId": LEDGER_APP,
                      "spark.databricks.delta.write.txnVersion": str(txn_version)})
    with committing(path), _session_conf(spark, confs):
        write()


def save(df: DataFrame, path: str, tag: str, mode: str = "append", **options: str) -> None:
    """Write ``df`` to ``path`` in one commit tagged ``tag`` (a write option, so writes of one
    batch to different tables can run at the same time)."""
    with committing(path):
        df.write.format("delta").mode(mode).options(**options, userMetadata=tag).save(path)


def rewrite(df: DataFrame, path: str, replaced: str | None, tag: str) -> None:
    """In one commit: remove the rows matching ``replaced`` (None: every row) and add ``df``
    (whose rows may lie outside ``replaced``: new partials go to later buckets)."""
    options = {"replaceWhere": replaced} if replaced is not None else {}
    with committing(path), _session_conf(df.sparkSession,  # the table lock first, as in ``tagged``
                                         {"spark.databricks.delta.replaceWhere.constraintCheck.enabled": "false"}):
        save(df, path, tag, "overwrite", **options)


class Interleaved(Exception):
    """Another attempt's commit landed between a write and the version it was based on."""


def lost_race(error: BaseException) -> bool:
    """Whether ``error`` is a write that lost to another writer (Delta's Concurrent*, a
    metadata change, or ``Interleaved``): the write may be tried again."""
    text = type(error).__name__ + str(error)[:500]
    return isinstance(error, Interleaved) or "Concurrent" in text or "MetadataChanged" in text \
        or "ProtocolChanged" in text


def _version_of(history: list, tag: str) -> int | None:
    return max((c.version for c in history if c.userMetadata == tag), default=None)


def reset(spark: SparkSession, path: str, base: int | None, tag: str) -> int | None:
    """Bring the table back to the rows of version ``base`` (None: no rows) in one commit tagged
    ``tag``, keeping its current metadata (properties an operator set since stay); the version
    that now holds those rows."""
    since = latest_version(spark, path)
    if base is None:
        tagged(spark, path, tag, lambda: DeltaTable.forPath(spark, path).delete())
    else:
        save(read(spark, path, base), path, tag, "overwrite")
    made = _version_of(history_since(spark, path, since), tag)
    return since if made is None else made  # no commit: nothing needed undoing


def advance(spark: SparkSession, path: str, base: int | None, tag: str, write: Callable[[], None]) -> int | None:
    """Apply ``write`` (at most one commit to ``path``, tagged ``tag``) on top of the content of
    version ``base``, and return a version whose content is exactly that: base plus this write.

    Commits that changed rows since ``base`` (attempts that never committed) are undone first;
    maintenance is kept. If another attempt's commit lands between the undo and this write, the
    write is tried again from the start (``RETRIES`` times, then ``Interleaved`` is raised), so
    the returned version never holds another attempt's rows."""
    for attempt in range(1, RETRIES + 1):
        try:
            return _advance(spark, path, base, tag, write)
        except Exception as e:
            if attempt == RETRIES or not lost_race(e):
                raise


def _advance(spark: SparkSession, path: str, base: int | None, tag: str, write: Callable[[], None]) -> int | None:
    start = base
    if any(changes_rows(c) for c in history_since(spark, path, base)):
        start = reset(spark, path, base, f"{tag}#reset")
    write()
    history = history_since(spark, path, start)
    mine = _version_of(history, tag)
    if any(changes_rows(c) for c in history if c.userMetadata != tag and (mine is None or c.version < mine)):
        raise Interleaved(f"another attempt committed to {path} while this one wrote it")
    return start if mine is None else mine


def commit_point(df: DataFrame, path: str, read_version: int, fence: int, tag: str, mode: str = "append",
                 **options: str) -> int | None:
    """Write ``df`` to the ledger at ``path`` in one commit, unless another batch or replay
    committed to it since this attempt read it (at ``read_version``, with ``fence``, see
    ``ledger_head``). Returns the version this commit made, or None if it was fenced out.

    Delta keeps the last ``txnVersion`` of ``LEDGER_APP`` in the table's log: a write whose
    version is not above it is skipped, and of two racing ones the second fails. Every ledger
    write uses the fence it read + 1, so this is a compare-and-set decided by Delta; maintenance
    commits carry no transaction version and leave the fence as it was."""
    save(df, path, tag, mode, **options, txnAppId=LEDGER_APP, txnVersion=str(fence + 1))
    return _version_of(history_since(df.sparkSession, path, read_version), tag)


def fs_path(spark: SparkSession, path: str):
    """The Hadoop FileSystem and Path of ``path``, as Delta resolves it."""
    jvm = spark._jvm
    hadoop_path = jvm.org.apache.hadoop.fs.Path(path)
    return hadoop_path.getFileSystem(spark._jsc.hadoopConfiguration()), hadoop_path


def put_text(spark: SparkSession, path: str, text: str) -> None:
    """Write a small file (local disk, HDFS or an object store)."""
    fs, hadoop_path = fs_path(spark, path)
    out = fs.create(hadoop_path, True)
    try:
        out.write(bytearray(text.encode("utf-8")))
    finally:
        out.close()


def get_text(spark: SparkSession, path: str) -> str | None:
    """A small file's text, or None if it does not exist."""
    fs, hadoop_path = fs_path(spark, path)
    if not fs.exists(hadoop_path):
        return None
    stream = spark._jvm.java.io.InputStreamReader(fs.open(hadoop_path), "UTF-8")
    reader = spark._jvm.java.io.BufferedReader(stream)
    try:
        return "\n".join(iter(reader.readLine, None))
    finally:
        reader.close()


def stage(df: DataFrame, path: str) -> None:
    """Keep ``df``'s rows at ``path`` for a later publication, as plain Parquet files: only
    their publisher reads them, after a commit point that lands only once they are complete
    (``_SUCCESS``), so a Delta log would add a commit and a snapshot and protect nothing."""
    df.write.mode("overwrite").parquet(path)


def is_staged(spark: SparkSession, path: str) -> bool:
    """Whether ``path`` holds staged rows: complete Parquet files or a Delta table (a replay's)."""
    fs, hadoop_path = fs_path(spark, f"{path}/_SUCCESS")
    return fs.exists(hadoop_path) or exists(spark, path)


def read_staged(spark: SparkSession, path: str) -> DataFrame:
    """The rows ``stage`` (or a replay's publication into its own folder) left at ``path``."""
    return read(spark, path) if exists(spark, path) else spark.read.parquet(path)


def list_names(spark: SparkSession, path: str) -> list[str]:
    """Names of the entries of folder ``path`` (empty if it does not exist)."""
    fs, hadoop_path = fs_path(spark, path)
    if not fs.exists(hadoop_path):
        return []
    return [status.getPath().getName() for status in fs.listStatus(hadoop_path)]


def remove(spark: SparkSession, path: str) -> None:
    """Delete a folder and what it holds, on whatever file system holds it."""
    fs, hadoop_path = fs_path(spark, path)
    fs.delete(hadoop_path, True)
