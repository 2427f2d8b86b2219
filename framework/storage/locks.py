"""Commit locks: Delta's optimistic commits need a store whose "create the next log file if
absent" is atomic. Object stores and HDFS have one (with the right LogStore); a local disk does
not across processes (a rename overwrites, and Delta's local LogStore locks within one JVM only),
so on a local warehouse every commit holds an OS file lock beside its table (``committing``) for
the length of that commit only.

Anywhere else (``s3a://``, ``hdfs://``, ...) ``committing`` is a no-op: no lock file, no
``flock`` (an object store has neither rename nor locks). There the LogStore makes each commit a
put-if-absent: on S3, ``framework.storage.s3``'s conditional-PUT LogStore (or Delta's
``S3DynamoDBLogStore``), which ``spark_session(s3=True)`` configures; a session left with Delta's
default S3 LogStore is safe for one driver only (docs/s3.md).
"""

from __future__ import annotations

import fcntl
import os
import threading
import time
from contextlib import AbstractContextManager, contextmanager, nullcontext
from urllib.parse import urlparse

from pyspark.sql import SparkSession

from ..errors import CommitLockTimeout
from . import backend, s3

LOCK_WAIT_S = 600.0  # how long a commit waits for another writer's commit to the same table


class _FileLock:
    """An exclusive lock on one file, across processes (``flock``) and threads, re-entrant
    within a thread. A wait for it, by a thread of this process or another process, ends after
    ``LOCK_WAIT_S`` with ``CommitLockTimeout``."""

    def __init__(self, path: str):
        self.path, self.guard, self.depth, self.fd = path, threading.RLock(), 0, -1

    def __enter__(self) -> None:
        deadline = time.monotonic() + LOCK_WAIT_S
        if not self.guard.acquire(timeout=LOCK_WAIT_S):
            raise self._timed_out("another thread of this process")
        try:
            if self.depth == 0:
                self.fd = self._flock(deadline)
        except BaseException:
            self.guard.release()
            raise
        self.depth += 1

    def _flock(self, deadline: float) -> int:
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        fd = os.open(self.path, os.O_CREAT | os.O_RDWR)
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return fd
            except BlockingIOError:
                if time.monotonic() > deadline:
                    os.close(fd)
                    raise self._timed_out("another process") from None
                time.sleep(0.02)

    def _timed_out(self, holder: str) -> CommitLockTimeout:
        return CommitLockTimeout(
            f"{holder} has held the commit lock {self.path} for over {LOCK_WAIT_S:.0f} s: its commit to the "
            "table is still running, or it is frozen inside it (a stopped process, a paused VM), and holds the "
            "lock until it is resumed or killed. The write waiting for it was not made"
        )

    def __exit__(self, *exc) -> None:
        self.depth -= 1
        if self.depth == 0:
            os.close(self.fd)  # closing the only descriptor releases the flock
        self.guard.release()


_locks: dict[str, _FileLock] = {}


conf_guard = threading.RLock()  # held while session confs tag commits (``session_conf``)


_locks_guard = threading.Lock()


def is_local(path: str) -> bool:
    """Whether ``path`` is on a local disk (a plain path or a ``file:`` URL)."""
    return urlparse(path).scheme in ("", "file")


def local_path(path: str) -> str | None:
    """``path`` as an absolute path on the local disk, or None if it is elsewhere."""
    if not is_local(path):
        return None
    parsed = urlparse(path)
    return os.path.abspath(parsed.path if parsed.scheme else path)


def check_atomic_commits(spark: SparkSession, warehouse: str) -> None:
    """Refuse a warehouse on S3 whose LogStore is not known to commit atomically there
    (``s3.require_atomic_logstore``: an allow-list, docs/s3.md).

    The LogStore is Delta's own pick for the warehouse's path, as the session's backend learns
    it (``SessionBackend.logstore``: a classic session asks Delta in its JVM; over Spark Connect
    it is the server's, read from the conf the server started with), not a session setting:
    Delta reads ``spark.delta.logStore.*`` from the conf its SparkContext started with, so a
    ``spark.conf.set`` of it afterwards changes nothing Delta does."""
    if urlparse(warehouse).scheme in s3.S3_SCHEMES:
        s3.require_atomic_logstore(spark, warehouse, backend.of(spark).logstore(warehouse))


def committing(path: str) -> AbstractContextManager:
    """A lock to hold while committing to the Delta table at ``path``: ``<table>.lock`` beside
    it on a local disk; nothing elsewhere, where the LogStore's put-if-absent is atomic (on S3:
    ``framework.storage.s3``)."""
    local = local_path(path)
    if local is None:
        return nullcontext()
    lock_file = local.rstrip("/") + ".lock"
    with _locks_guard:
        return _locks.setdefault(lock_file, _FileLock(lock_file))


@contextmanager
def session_conf(spark: SparkSession, confs: dict[str, str]):
    """Set session confs for the writes inside the block only. A conf is seen by every
    thread of the session, so such blocks run one at a time (writes of one batch run
    concurrently; ``save`` passes its tag as a write option and needs no conf)."""
    with conf_guard:
        for key, value in confs.items():
            spark.conf.set(key, value)
        try:
            yield
        finally:
            for key in confs:
                spark.conf.unset(key)
