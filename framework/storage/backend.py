"""One backend per session: what the framework does differently in a classic Spark session and in
a Spark Connect one, behind one face, chosen once per session.

A classic session (``SparkSession.builder.master(...)``, ``spark-submit``) runs Spark in a JVM the
Python process talks to; a Spark Connect session (``sc://host:port``) has only the DataFrame API,
over gRPC, to a server. The protocol is written against what both share. Where the JVM answers
much cheaper (a Delta snapshot without a Spark job, a small file without a write job, a commit
file by name, the LogStore Delta picked), ``ClassicBackend`` asks it (through ``classic``, the one
module that reaches into it); ``ConnectBackend`` asks the server the same questions with reads,
SQL and its conf. ``of`` picks one when a session is first used (a ``Runtime`` asks as it starts)
and keeps it for the session's life: the callers (``files``, ``tables``, ``commitlog``, ``locks``,
``catalog``, the ``Runtime``'s settings) call its methods and never ask which one they hold, as
PySpark's own classic and Connect ``DataFrame`` answer one API.
"""

from __future__ import annotations

import json
import posixpath
import threading
import uuid
import weakref
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import NamedTuple, TypeVar
from urllib.parse import unquote, urlparse

from delta.tables import DeltaTable
from pyspark.errors import AnalysisException, PySparkException
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from ..errors import FrameworkError
from . import classic
from .sqltext import quoted

T = TypeVar("T")


class Commit(NamedTuple):
    """One commit, named as ``DeltaTable.history()`` names its columns."""

    version: int
    operation: str | None
    userMetadata: str | None


# Object stores whose files appear whole when closed (one upload), never half-written; a rename
# there is a copy and a delete, neither atomic nor needed. (ABFS shows a file from its creation.)
OBJECT_STORES = ("s3a", "s3", "gs")

# Delta's LogStore for a scheme none is configured for (its ``DelegatingLogStore``'s defaults).
DELTA_DEFAULT_LOGSTORES = {
    **dict.fromkeys(("s3", "s3a", "s3n"), "io.delta.storage.S3SingleDriverLogStore"),
    **dict.fromkeys(("abfs", "abfss", "adl", "wasb", "wasbs"), "io.delta.storage.AzureLogStore"),
    "gs": "io.delta.storage.GCSLogStore",
}
DELTA_HDFS_LOGSTORE = "io.delta.storage.HDFSLogStore"  # any other scheme's, a local path's too

# What Delta answers, over Spark Connect, for a path with no table: no such path, an empty folder,
# a folder of Parquet files, asked by a read, DESCRIBE HISTORY or DESCRIBE DETAIL (some arrive
# as a generic error: PySpark maps a server exception it does not know, such as Delta's
# FileNotFoundException, to UnknownException, with the condition kept). Any other error is one.
NO_TABLE = (
    "PATH_NOT_FOUND",
    "DELTA_FILE_NOT_FOUND",
    "DELTA_MISSING_DELTA_TABLE",
    "DELTA_PATH_DOES_NOT_EXIST",
    "DELTA_TABLE_NOT_FOUND",
    "DELTA_TABLE_ONLY_OPERATION",
)


class SessionBackend(ABC):
    """How the framework reaches the Spark behind one session: small files beside the tables,
    a table's existence, id and version, its commit files, the LogStore Delta commits with.
    Each method answers the same question in either kind of session; ``files``, ``tables`` and
    ``commitlog`` keep what is common to both around them."""

    def __init__(self, spark: SparkSession):
        # held weakly: ``of`` keeps a backend by its session, and a backend that held its session
        # would keep every session a process ever made alive (and the server's or JVM's side of it)
        self._session = weakref.ref(spark)

    @property
    def spark(self) -> SparkSession:
        session = self._session()
        if session is None:  # a backend kept beyond its session: ``of`` gives the new one's
            raise FrameworkError("this Spark session is gone: ask framework.storage.backend.of for the current one's")
        return session

    @property
    @abstractmethod
    def observes_checkpoints(self) -> bool:
        """Whether a query that checkpoints a frame returns the aggregates it observed on the way
        (``DataFrame.observe``) to this process, so one pass over a batch's input can validate
        and count it."""

    # ---- small files (``files``, ``smallfile``) ------------------------------------------------
    @abstractmethod
    def put_text(self, path: str, text: str) -> None:
        """Write a small file whole, so a reader never finds it created but still empty."""

    @abstractmethod
    def texts(self, path: str) -> dict[str, str] | None:
        """The text of the file at ``path``, or of each file the folder at ``path`` holds
        (hidden ones left out: ``smallfile.visible``), by name; None if nothing is there."""

    @abstractmethod
    def list_names(self, path: str) -> list[str]:
        """Names of the entries of folder ``path`` (empty if it does not exist)."""

    @abstractmethod
    def holds_parquet(self, path: str) -> bool:
        """Whether folder ``path`` holds Parquet files (staged rows)."""

    @abstractmethod
    def first_missing(self, paths: Sequence[str]) -> str | None:
        """The first of the files ``paths`` that does not exist, None if all do."""

    @abstractmethod
    def remove(self, path: str) -> None:
        """Delete a folder (or a small file) and what it holds, as readers here see it."""

    # ---- tables (``tables``) ----------------------------------------------------------------
    @abstractmethod
    def is_table(self, path: str) -> bool:
        """Whether a Delta table is at ``path``."""

    @abstractmethod
    def head(self, path: str) -> tuple[str, int] | None:
        """The table's id and current version, or None if it does not exist yet."""

    @abstractmethod
    def prepare(self, path: str) -> None:
        """Compute ahead, where it can be, what the next commit to the table needs first."""

    @abstractmethod
    def qualified(self, path: str) -> str:
        """``path`` (without a scheme) made absolute as the Spark that runs SQL resolves it."""

    def sql_name(self, path: str) -> str:
        """The Delta table at ``path`` as SQL names it (``delta.`<path>```). SQL takes only an
        absolute path (or a URL) there: a relative one is ``qualified`` first."""
        if not urlparse(path).scheme and not posixpath.isabs(path):
            path = self.qualified(path)
        return f"delta.{quoted(path)}"

    # ---- the Delta log (``commitlog``, ``locks``) -------------------------------------------
    @abstractmethod
    def commits_after(self, path: str, version: int, most: int) -> list[Commit] | None:
        """The commits of the table at ``path`` after ``version``, oldest first, read from their
        files by name; None when that cannot be done (the caller asks Delta's history): the log no
        longer holds ``version``'s file, more than ``most`` follow, or the table's commits are
        coordinated (a new version's file may then sit elsewhere until it is backfilled)."""

    @abstractmethod
    def logstore(self, path: str) -> str:
        """The class of the LogStore Delta commits with at ``path``, as Delta picks it: from the
        conf the Spark that runs the commits started with (``spark.delta.logStore.<scheme>.impl``,
        else ``spark.delta.logStore.class``, else Delta's default for the scheme), not from a
        session's settings, which Delta does not read for it."""


class ClassicBackend(SessionBackend):
    """A classic session's: the JVM in this process answers, mostly without a Spark job."""

    @property
    def observes_checkpoints(self) -> bool:
        return True

    def put_text(self, path: str, text: str) -> None:
        """On an object store the file is written in place: it appears when it is closed, whole,
        replacing the old one in one step. Elsewhere it is written beside and renamed into place
        (a runner racing another attempt of the same batch read a file created but not yet
        written as '')."""
        if urlparse(path).scheme in OBJECT_STORES:
            classic.write_file(self.spark, path, text)
            return
        written = f"{path}.{uuid.uuid4().hex}.tmp"
        classic.write_file(self.spark, written, text)
        classic.move(self.spark, written, path)

    def texts(self, path: str) -> dict[str, str] | None:
        return classic.read_texts(self.spark, path)

    def list_names(self, path: str) -> list[str]:
        return classic.list_names(self.spark, path)

    def holds_parquet(self, path: str) -> bool:
        return any(name.endswith(".parquet") for name in classic.list_names(self.spark, path))

    def first_missing(self, paths: Sequence[str]) -> str | None:
        return next((path for path in paths if not classic.file_exists(self.spark, path)), None)

    def remove(self, path: str) -> None:
        classic.remove(self.spark, path)

    def is_table(self, path: str) -> bool:
        return DeltaTable.isDeltaTable(self.spark, path)

    def head(self, path: str) -> tuple[str, int] | None:
        """From the log's listing, with no Spark job (``DeltaLog.update`` with its default
        arguments, called from Python)."""
        with classic.delta_snapshot(self.spark, path) as current:
            return None if current is None else (current.metadata().id(), current.version())

    def prepare(self, path: str) -> None:
        """The table's current snapshot with its transaction ids: computed ahead, beside other
        work, the next commit starts from a cached snapshot. Best effort: if this fails, the
        commit computes them itself and reports what fails."""
        try:
            with classic.delta_snapshot(self.spark, path) as current:
                if current is not None:
                    current.transactions()
        except classic.JavaError:
            pass

    def qualified(self, path: str) -> str:
        """Against the JVM's working folder, as the session's reads resolve it."""
        return classic.qualified(self.spark, path)

    def commits_after(self, path: str, version: int, most: int) -> list[Commit] | None:
        """Read one by one through the table's own LogStore until the first that does not exist:
        no listing, no Spark job."""
        actions_of = classic.commit_reader(self.spark, path)
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
        while len(found) <= most and (commit := read(version + 1 + len(found))) is not None:
            found.append(commit)
        # Delta's cleanup deletes the oldest files first: if the first file relied on is still
        # there, none after it was deleted while they were read.
        if len(found) <= most and (found or version >= 0) and read(version + 1 if found else version) is not None:
            return found
        return None

    def logstore(self, path: str) -> str:
        """Delta's own pick, asked of the JVM (``classic.delta_logstore``)."""
        return classic.delta_logstore(self.spark, path)


class ConnectBackend(SessionBackend):
    """A Spark Connect session's: no JVM in this process; the server answers reads, SQL and
    conf, and writes files only as a Spark job does. So a small file is a folder holding one
    part file (``smallfile``), listed by the files Spark finds in it; names starting with ``_``
    or ``.`` are hidden from Spark's reads, so no name a reader looks up does."""

    @property
    def observes_checkpoints(self) -> bool:
        """No: a checkpoint's query returns no observed aggregates to a Connect client."""
        return False

    def put_text(self, path: str, text: str) -> None:
        """In the folder form (``smallfile``), written by one job."""
        self._write_lines(path, [json.dumps(text)])

    def texts(self, path: str) -> dict[str, str] | None:
        try:
            rows = self.spark.read.text(path).select("value", F.col("_metadata.file_path")).collect()
        except AnalysisException:  # PATH_NOT_FOUND
            return None
        found: dict[str, list[str]] = {}
        for value, file in rows:
            found.setdefault(posixpath.basename(unquote(urlparse(file).path)), []).append(value)
        return {name: "\n".join(lines) for name, lines in found.items()}

    def list_names(self, path: str) -> list[str]:
        """The entries holding a file Spark reads (not hidden, not empty), so a removed one is left out."""
        return sorted({name.split("/", 1)[0] for name in self._files_in(path)})

    def holds_parquet(self, path: str) -> bool:
        return any(name.endswith(".parquet") for name in self._files_in(path))

    def first_missing(self, paths: Sequence[str]) -> str | None:
        """Asked of the server by analysed reads (Spark checks that each path exists and reads
        none): one of them all, and when one is missing, one of each half in turn (log2 of them)."""

        def absent(some: list[str]) -> bool:
            try:
                self.spark.read.format("binaryFile").load(some).schema  # noqa: B018  (analysis checks the paths)
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

    def remove(self, path: str) -> None:
        """Overwrite it with no rows: an empty part file, which every reader here takes for nothing."""
        self._write_lines(path, [])

    def is_table(self, path: str) -> bool:
        """By analysing a read of it, which resolves the table's last snapshot: no job where that
        version has a checksum file, which commits over Connect write and a classic session of
        ours does not. Not delta-spark's ``DeltaTable``, which needs Delta's Connect plugin on the
        server (Delta 4.4 publishes none for Spark 4.2), nor ``DESCRIBE DETAIL``, which runs a job."""
        return _unless_no_table(lambda: self.spark.read.format("delta").load(path).schema) is not None

    def head(self, path: str) -> tuple[str, int] | None:
        """The last version from ``DESCRIBE HISTORY``, the table's id from that version's checksum
        file (``<version>.crc``, one line of JSON that Delta writes beside each commit), else,
        where there is none, from ``DESCRIBE DETAIL``, which runs a job."""
        table = self.sql_name(path)
        last = _unless_no_table(lambda: self.spark.sql(f"DESCRIBE HISTORY {table} LIMIT 1").select("version").first())
        if last is None:
            return None
        version = int(last[0])
        checksum = _unless_no_table(lambda: self.spark.read.text(f"{path}/_delta_log/{version:020d}.crc").first())
        try:  # a checksum being written (a store without atomic writes) reads as broken JSON
            table_id = json.loads(checksum[0])["metadata"]["id"] if checksum else None
        except (ValueError, KeyError, TypeError):
            table_id = None
        if not table_id:
            detail = _unless_no_table(lambda: self.spark.sql(f"DESCRIBE DETAIL {table}").first())
            if detail is None or detail["format"] != "delta" or not detail["id"]:  # gone since
                return None
            table_id = detail["id"]
        return table_id, version

    def prepare(self, path: str) -> None:
        """Nothing: the server's Delta computes them at the commit; there is no snapshot to ask."""

    def qualified(self, path: str) -> str:
        """Refused when relative: the server would resolve it against its own working folder,
        not against the one a classic session's reads resolve it against."""
        if not posixpath.isabs(path):
            raise FrameworkError(f"{path!r}: over Spark Connect a warehouse path must be absolute (or a URL)")
        return path

    def commits_after(self, path: str, version: int, most: int) -> list[Commit] | None:
        """The files of ``version`` and of the ``most`` versions after it (and one more, to tell
        whether more follow), named in one glob (which finds those that exist: no listing), in one
        job. None when ``version``'s own file is gone (Delta's cleanup, oldest first) or more than
        ``most`` follow."""
        log = f"{path.rstrip('/')}/_delta_log"
        names = ",".join(f"{v:020d}.json" for v in range(max(version, 0), version + most + 2))
        try:
            found = self.spark.read.schema("commitInfo struct<operation: string, userMetadata: string>").json(
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
            else:  # as a classic session reads a file without commitInfo
                info.setdefault(v, Commit(v, None, None))
        if version >= 0 and version not in info:
            return None
        after = sorted(v for v in info if v > version)
        if after != list(range(version + 1, version + 1 + len(after))) or len(after) > most:
            return None  # a gap (a file written while the glob was read), or more than asked for
        return [info[v] for v in after]

    def logstore(self, path: str) -> str:
        """The server's, from the settings its session reads (``spark.conf``, which starts as the
        server's conf): Delta's keys with or without their ``spark.`` prefix, as Delta reads them.
        A client could change them in its own session without reaching Delta; the framework does not."""
        scheme = urlparse(path).scheme.lower()
        for key in (f"delta.logStore.{scheme}.impl", "delta.logStore.class"):
            for name in (f"spark.{key}", key):
                if chosen := self.spark.conf.get(name, None):
                    return chosen
        return DELTA_DEFAULT_LOGSTORES.get(scheme, DELTA_HDFS_LOGSTORE)

    def _write_lines(self, path: str, lines: list[str]) -> None:
        """Replace what is at ``path`` with a folder holding ``lines`` in one part file (one Spark job)."""
        rows = self.spark.createDataFrame([(line,) for line in lines], "value string")
        rows.coalesce(1).write.mode("overwrite").text(path)

    def _files_in(self, path: str) -> list[str]:
        """The files Spark finds under folder ``path`` that are not empty, by their path below it
        (one Spark job; their content is not read); none if there is no such folder."""
        try:
            found = self.spark.read.format("binaryFile").option("recursiveFileLookup", "true").load(path)
            rows = found.where("length > 0").select("path").collect()
        except AnalysisException:  # PATH_NOT_FOUND
            return []
        root = unquote(urlparse(path).path).rstrip("/") + "/"
        return [unquote(urlparse(file).path).removeprefix(root) for (file,) in rows]


def _unless_no_table(ask: Callable[[], T]) -> T | None:
    """``ask()``, or None if it fails because there is no Delta table where it looked; any
    other failure (a server without Delta's extensions, a file it cannot read) is raised."""
    try:
        return ask()
    except PySparkException as e:
        if (e.getCondition() or "").startswith(NO_TABLE):
            return None
        raise


_chosen: weakref.WeakKeyDictionary[SparkSession, SessionBackend] = weakref.WeakKeyDictionary()
_choosing = threading.Lock()


def of(spark: SparkSession) -> SessionBackend:
    """The backend of session ``spark``: chosen the first time it is asked for (a ``Runtime``
    asks as it starts), by whether the session has a JVM in this process, and the same object
    for as long as the session lives."""
    with _choosing:
        chosen = _chosen.get(spark)
        if chosen is None:
            chosen = _chosen[spark] = ClassicBackend(spark) if classic.is_classic(spark) else ConnectBackend(spark)
        return chosen
