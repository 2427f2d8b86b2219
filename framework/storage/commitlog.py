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
from typing import NamedTuple
from urllib.parse import unquote, urlparse

from pyspark.errors import AnalysisException
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from . import classic, locks


class Commit(NamedTuple):
    """One commit, named as ``DeltaTable.history()`` names its columns."""

    version: int
    operation: str | None
    userMetadata: str | None


MOST = 64  # commit files read one by one at most; past that Delta's history is cheaper


def commits_after(spark: SparkSession, path: str, version: int) -> list[Commit] | None:
    """The commits of the table at ``path`` after ``version``, oldest first, read from their
    files; None when that cannot be done (the caller asks Delta's history): the log no longer
    holds ``version``'s file, there are more than ``MOST``, or the table's commits are
    coordinated (a new version's file may then sit elsewhere until it is backfilled), or its
    LogStore copies commit files into the log after the commit (``S3DynamoDBLogStore``)."""
    if _copied_after_commit(spark, path):
        return None
    if not classic.is_classic(spark):
        return _read_at_once(spark, path, version)
    actions_of = classic.commit_reader(spark, path)
    if actions_of is None:
        return None

    def read(v: int) -> Commit | None:
        """Commit ``v`` from its file's ``commitInfo`` (Delta writes it first), None if no file."""
        actions = actions_of(v)
        if actions is None:
            return None
        info = next((a["commitInfo"] for a in actions if "commitInfo" in a), None)
        if info is None:  # no commitInfo: counted as changing rows, as Delta's history does
            return Commit(v, None, None)
        return Commit(v, info.get("operation"), info.get("userMetadata"))

    found: list[Commit] = []
    while len(found) <= MOST and (commit := read(version + 1 + len(found))) is not None:
        found.append(commit)
    # Delta's cleanup deletes the oldest files first: if the first file relied on is still
    # there, none after it was deleted while they were read.
    if len(found) <= MOST and (found or version >= 0) and read(version + 1 if found else version) is not None:
        return found
    return None


def _read_at_once(spark: SparkSession, path: str, version: int) -> list[Commit] | None:
    """``commits_after`` for a Spark Connect session, which reads a file only in a Spark job: the
    files of ``version`` and of the ``MOST`` versions after it (and one more, to tell whether more
    follow), named in one glob (which finds those that exist: no listing), in one job. None when
    ``version``'s own file is gone (Delta's cleanup, oldest first) or more than ``MOST`` follow."""
    log = f"{path.rstrip('/')}/_delta_log"
    names = ",".join(f"{v:020d}.json" for v in range(max(version, 0), version + MOST + 2))
    try:
        found = spark.read.schema("commitInfo struct<operation: string, userMetadata: string>").json(
            f"{log}/{{{names}}}"
        )
        rows = found.select(F.col("_metadata.file_name").alias("name"), "commitInfo").collect()
    except AnalysisException:  # PATH_NOT_FOUND: none of them is there
        return None
    info: dict[int, Commit] = {}
    for name, commit in rows:  # a row per action: commitInfo is one of a file's lines
        v = int(name.split(".")[0])
        if commit is not None:
            info[v] = Commit(v, commit.operation, commit.userMetadata)
        else:  # as ``commits_after`` reads a file without commitInfo
            info.setdefault(v, Commit(v, None, None))
    if version >= 0 and version not in info:
        return None
    after = sorted(v for v in info if v > version)
    if after != list(range(version + 1, version + 1 + len(after))) or len(after) > MOST:
        return None  # a gap (a file written while the glob was read), or more than asked for
    return [info[v] for v in after]


def _copied_after_commit(spark: SparkSession, path: str) -> bool:
    """Whether the LogStore of ``path``'s scheme commits elsewhere first and copies the commit
    file into the log afterwards (Delta's ``S3DynamoDBLogStore``), as Delta picks the LogStore
    (``classic.delta_logstore``: from the SparkContext's conf, not the session's; over Spark
    Connect, the server's conf as the session reads it)."""
    if locks.is_local(path):
        return False
    if not classic.is_classic(spark):
        scheme = urlparse(path).scheme
        keys = (f"spark.delta.logStore.{scheme}.impl", "spark.delta.logStore.class")
        return any("DynamoDB" in (spark.conf.get(key, "") or "") for key in keys)
    return "DynamoDB" in classic.delta_logstore(spark, path)


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
