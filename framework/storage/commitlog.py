"""A table's latest commits, read from their own files in the Delta log.

Every time a batch writes window state or the ledger it asks which commits landed since a
version it knows (``writes.history_since``). Delta's ``history()`` answers by listing the whole
``_delta_log`` folder, three times (the table's version, ``DeltaTable.forPath``, the history
itself), and a local or HDFS listing costs time in proportion to the log's length: 13 us per
entry here (``bench/delta_log.py``), and a log holds a month of commits by default. The commits
after a known version are few, and their files have known names (``<version>.json``), so they
are read one by one until the first that does not exist: no listing. Delta deletes expired
commit files oldest first and never leaves a gap, so the file of the known version itself
tells "no commit since" from "expired".

On S3 the conditional-PUT LogStore (``framework.storage.s3``) writes each commit file whole, in
place, in the request that commits it, so reading by name holds there too. Delta's
``S3DynamoDBLogStore`` commits in DynamoDB first and copies the file into the log afterwards (a
reader's listing completes the copy of a writer that died in between): for its tables Delta's
history is asked instead.
"""

from __future__ import annotations

import posixpath
from urllib.parse import unquote

from pyspark.errors import AnalysisException
from pyspark.sql import SparkSession

from . import backend, locks
from .backend import Commit

MOST = 64  # commit files read one by one at most; past that Delta's history is cheaper


def commits_after(spark: SparkSession, path: str, version: int) -> list[Commit] | None:
    """The commits of the table at ``path`` after ``version``, oldest first, read from their
    files; None when that cannot be done (the caller asks Delta's history): the log no longer
    holds ``version``'s file, there are more than ``MOST``, or the table's commits are
    coordinated (a new version's file may then sit elsewhere until it is backfilled), or its
    LogStore copies commit files into the log after the commit (``S3DynamoDBLogStore``). A
    classic session reads them one by one through Delta's LogStore, with no job; a Spark
    Connect session in one job (``SessionBackend.commits_after``)."""
    if _copied_after_commit(spark, path):
        return None
    return backend.of(spark).commits_after(path, version, MOST)


def _copied_after_commit(spark: SparkSession, path: str) -> bool:
    """Whether the LogStore of ``path``'s scheme commits elsewhere first and copies the commit
    file into the log afterwards (Delta's ``S3DynamoDBLogStore``), as Delta picks the LogStore
    (``SessionBackend.logstore``: from the conf its Spark started with, not the session's)."""
    return not locks.is_local(path) and "DynamoDB" in backend.of(spark).logstore(path)


def files_added(spark: SparkSession, path: str, after: int, upto: int) -> set[str] | None:
    """The names of the data files that commits ``after + 1`` .. ``upto`` of the table at
    ``path`` added (``add`` actions: appends, the files a MERGE, DELETE or OPTIMIZE rewrote),
    whether or not later commits removed them; None when a commit file is gone (Delta's log
    cleanup) or the table's commits are not all in its log folder, so the caller reads the
    whole table. Read with the DataFrame API only (one small Spark job): no JVM handle, so a
    Spark Connect session reads them too."""
    if upto <= after:
        return set()
    log = f"{path.rstrip('/')}/_delta_log"
    names = [f"{log}/{v:020d}.json" for v in range(after + 1, upto + 1)]
    try:
        actions = spark.read.schema("add struct<path: string>").json(names)
    except AnalysisException:  # PATH_NOT_FOUND: expired, or a coordinated commit not yet backfilled
        return None
    return {posixpath.basename(unquote(r[0])) for r in actions.where("add is not null").select("add.path").collect()}
