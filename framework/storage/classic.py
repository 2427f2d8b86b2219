"""What only a classic Spark session can do: reach the JVM behind it through py4j.

A classic session (``SparkSession.builder.master(...)``, ``spark-submit``) runs Spark in a JVM
the Python process talks to; a Spark Connect session (``sc://host:port``) has no JVM in the
client's process, only the DataFrame API, over gRPC, to a server. The framework is written
against that shared API. Where the JVM answers much cheaper (a Delta snapshot without a Spark
job, a small file without a write job, a commit file by name), the classic way is here, in this
one module, and a classic session's backend (``backend.ClassicBackend``, chosen once per session
by ``is_classic``) calls it; the session factory and the one-pass read too, which a classic
session alone runs. No other module reaches into the JVM
(``_jvm``, ``_jsc``, ``_jdf``, ``sparkContext``, py4j): ``tests/unit/test_layers.py`` checks.
"""

from __future__ import annotations

import json
from contextlib import contextmanager
from typing import Any, Callable, Iterator

from py4j.java_gateway import JavaClass, JVMView
from py4j.protocol import Py4JJavaError
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.observation import Observation

from ..errors import FrameworkError
from .smallfile import visible

JavaError = Py4JJavaError  # how a classic session raises what Spark has not converted


def is_classic(spark: SparkSession) -> bool:
    """Whether ``spark`` is a classic session, with its JVM in reach (not Spark Connect)."""
    return getattr(spark, "_jvm", None) is not None


def _jvm(spark: SparkSession) -> Any:
    jvm = getattr(spark, "_jvm", None)
    if jvm is None:
        raise FrameworkError(
            "this needs a classic Spark session (its JVM): over Spark Connect the framework reads tables "
            "only so far (docs/operations.md#spark-connect)"
        )
    return jvm


def _java(spark: SparkSession, name: str) -> Any:
    """The JVM class of fully qualified ``name``, found in one py4j lookup. py4j resolves an
    attribute chain (``jvm.org.apache.hadoop.fs.Path``) a name at a time, and the JVM answers
    each package prefix by failing to load it as a class, searching every jar: 2.5 ms for that
    chain, 0.12 ms this way, and a batch asked for a few dozen."""
    return getattr(_jvm(spark), name)


class _RememberingView(JVMView):
    """py4j's view of the JVM that keeps each class it resolved.

    PySpark looks its helper classes up by short name at every use: ``functions`` for each
    column function, ``PythonUtils``, ``PythonRDD``, ``SerDeUtil``: about 500 lookups in a tiny
    rate-limited batch. py4j asks the JVM each time, and the JVM first tries the short name as a
    top-level class, which fails only after searching every jar. A class once found stays that
    class in that JVM, so keeping it is exact; packages and failed names are asked for again.
    It cuts the class loader's work to about a third
    (bench/README.md#where-the-suites-cpu-goes-and-cold-jvms-without-bytecode-verification-2026-12-01)."""

    def __getattr__(self, name: str) -> Any:
        found = super().__getattr__(name)
        if isinstance(found, JavaClass):
            self.__dict__[name] = found
        return found


# ---- the session -----------------------------------------------------------------------------
def remember_classes(spark: SparkSession) -> None:
    """Make the session's py4j view of the JVM keep the classes it resolves (``_RememberingView``).
    The view is the process's one gateway's, shared by every session and SparkContext of it."""
    jvm = _jvm(spark)
    if type(jvm) is JVMView:
        jvm.__class__ = _RememberingView


def started_conf(spark: SparkSession, key: str) -> str:
    """A setting of the conf the session's SparkContext started with ('' if unset)."""
    return spark.sparkContext.getConf().get(key, "") or ""


def quiet(spark: SparkSession, level: str) -> None:
    """Set the JVM's log level."""
    spark.sparkContext.setLogLevel(level)


def set_system_property(spark: SparkSession, key: str, value: str) -> None:
    _java(spark, "java.lang.System").setProperty(key, value)


def release(frames: list[DataFrame]) -> None:
    """Drop the blocks of local checkpoints now, not when the JVM's garbage collector finds them.
    (A Spark Connect server drops a checkpoint's blocks once its client lets go of the frame.)"""
    for df in frames:
        if hasattr(df, "_jdf"):
            df._jdf.queryExecution().analyzed().rdd().unpersist(False)


def observation() -> Observation:
    """An ``Observation`` for a classic session's frames: aggregates a query computes on its way
    (``DataFrame.observe``), read with ``observed``. PySpark's own constructor makes a Connect
    one, which a classic frame refuses, once the process has had a Connect session."""
    obs = object.__new__(Observation)
    obs.__init__()  # type: ignore[misc]
    return obs


def observed(obs: Observation) -> dict | None:
    """What ``obs`` observed, or None when no query that computes it has finished (``get``
    would wait for one for ever: a plan the optimizer found empty computes nothing)."""
    jo = getattr(obs, "_jo", None)
    if jo is None or not jo.future().isCompleted():
        return None
    return obs.get


# ---- files, through the Hadoop file system Delta uses ---------------------------------------
def _hadoop_path(spark: SparkSession, path: str) -> tuple[Any, Any]:
    """The Hadoop FileSystem and Path of ``path``, as Delta resolves it."""
    located = _java(spark, "org.apache.hadoop.fs.Path")(path)
    return located.getFileSystem(spark._jsc.hadoopConfiguration()), located


def write_file(spark: SparkSession, path: str, text: str) -> None:
    """Create (or overwrite) the file at ``path`` with ``text``."""
    fs, located = _hadoop_path(spark, path)
    try:
        out = fs.create(located, True)
    except Py4JJavaError:
        if not fs.isDirectory(located):  # the form a Spark Connect session writes (``smallfile``) is a folder
            raise
        fs.delete(located, True)
        out = fs.create(located, True)
    try:
        out.write(bytearray(text.encode("utf-8")))
    finally:
        out.close()


def move(spark: SparkSession, source: str, target: str) -> None:
    """Replace ``target`` with the file at ``source``."""
    fs, to = _hadoop_path(spark, target)
    _, written = _hadoop_path(spark, source)
    fs.delete(to, True)  # a file, or the folder a Spark Connect session writes (``smallfile``)
    if not fs.rename(written, to):
        raise OSError(f"could not move {source} to {target}")


def read_texts(spark: SparkSession, path: str) -> dict[str, str] | None:
    """The text of the file at ``path``, or of each file the folder at ``path`` holds (hidden
    ones left out: ``smallfile.visible``), by name; None if nothing is there."""
    fs, located = _hadoop_path(spark, path)
    try:
        status = fs.getFileStatus(located)
    except Py4JJavaError as e:
        if raised_java(e, "java.io.FileNotFoundException"):
            return None
        raise
    if not status.isDirectory():
        return {located.getName(): _read(spark, fs, located)}
    return {
        entry.getPath().getName(): _read(spark, fs, entry.getPath())
        for entry in fs.listStatus(located)
        if entry.isFile() and visible(entry.getPath().getName())
    }


def _read(spark: SparkSession, fs: Any, located: Any) -> str:
    stream = _java(spark, "java.io.InputStreamReader")(fs.open(located), "UTF-8")
    reader = _java(spark, "java.io.BufferedReader")(stream)
    try:
        return "\n".join(iter(reader.readLine, None))
    finally:
        reader.close()


def file_exists(spark: SparkSession, path: str) -> bool:
    fs, located = _hadoop_path(spark, path)
    return bool(fs.exists(located))


def list_names(spark: SparkSession, path: str) -> list[str]:
    """Names of the entries of folder ``path`` (empty if it does not exist)."""
    fs, located = _hadoop_path(spark, path)
    if not fs.exists(located):
        return []
    return [status.getPath().getName() for status in fs.listStatus(located)]


def remove(spark: SparkSession, path: str) -> None:
    """Delete a folder (or file) and what it holds."""
    fs, located = _hadoop_path(spark, path)
    fs.delete(located, True)


def qualified(spark: SparkSession, path: str) -> str:
    """``path`` made absolute the way Hadoop resolves it (against the JVM's working folder)."""
    fs, located = _hadoop_path(spark, path)
    return fs.makeQualified(located).toUri().getPath()


# ---- Delta's log -------------------------------------------------------------------------------
@contextmanager
def delta_snapshot(spark: SparkSession, path: str) -> Iterator[Any]:
    """The current Delta snapshot (JVM object) of the table at ``path``, None if there is no table
    there yet, to use inside the block, where ``spark`` is the calling JVM thread's active session. PySpark sets
    that only in the thread that built the session, and a snapshot whose version has a
    checkpoint reads it through a lazy provider that needs it: from a batch's worker thread,
    the ledger read failed with ``DELTA_SPARK_SESSION_NOT_SET`` (batch 550 of
    ``bench/retention.py``; under Airflow, any batch after a checkpointed ledger commit)."""
    sessions = _java(spark, "org.apache.spark.sql.SparkSession")
    before = sessions.getActiveSession()
    sessions.setActiveSession(spark._jsparkSession)
    try:
        # asked first, as delta-spark's DeltaTable.isDeltaTable asks: a DeltaLog made for a path
        # without a table stays cached, and isDeltaTable would then miss a table created later
        if not _java(spark, "io.delta.tables.DeltaTable").isDeltaTable(spark._jsparkSession, path):
            yield None
            return
        log = _java(spark, "org.apache.spark.sql.delta.DeltaLog").forTable(spark._jsparkSession, path)
        yield log.update(False, getattr(log, "update$default$2")(), getattr(log, "update$default$3")())
    finally:
        if before.isDefined():
            sessions.setActiveSession(before.get())
        else:
            sessions.clearActiveSession()


def commit_reader(spark: SparkSession, path: str) -> Callable[[int], list[dict] | None] | None:
    """A function reading commit ``v`` of the table at ``path`` from its file in the log, through
    the table's own LogStore: its actions, or None if there is no such file. None instead of the
    function when the table's commits are coordinated or catalog-owned (a new version's file may
    then sit elsewhere until it is backfilled)."""
    log = _java(spark, "org.apache.spark.sql.delta.DeltaLog").forTable(spark._jsparkSession, path)
    known = log.unsafeVolatileSnapshot()
    if known.tableCommitCoordinatorClientOpt().isDefined() or known.isCatalogOwned():
        return None
    store, conf, folder = log.store(), log.newDeltaHadoopConf(), log.logPath()
    missing = _java(spark, "java.lang.Class").forName("java.io.FileNotFoundException")
    path_class = _java(spark, "org.apache.hadoop.fs.Path")

    def read(v: int) -> list[dict] | None:
        try:
            lines = store.readAsIterator(path_class(folder, f"{v:020d}.json"), conf)
        except Py4JJavaError as e:
            if missing.isInstance(e.java_exception):  # Hadoop's local FS says so for "permission denied" too
                return None
            raise
        try:
            actions = []
            while lines.hasNext():
                actions.append(json.loads(lines.next()))
                if "commitInfo" in actions[-1]:  # Delta writes it first: the rest is not needed
                    break
            return actions
        finally:
            lines.close()

    return read


def delta_logstore(spark: SparkSession, path: str) -> str:
    """The class of the LogStore Delta commits with at ``path``, as Delta picks it: from the
    SparkContext's conf (``LogStore(spark)``; the scheme's store when that is Delta's
    scheme-delegating default)."""
    store = getattr(_java(spark, "org.apache.spark.sql.delta.storage.LogStore$"), "MODULE$").apply(spark._jsparkSession)
    if store.getClass().getSimpleName() == "DelegatingLogStore":
        store = store.getDelegate(_java(spark, "org.apache.hadoop.fs.Path")(path))
    if store.getClass().getSimpleName() == "LogStoreAdaptor":  # a LogStore of io.delta.storage (Java)
        store = store.logStoreImpl()
    return store.getClass().getName()


# ---- errors --------------------------------------------------------------------------------------
def raised_java(error: BaseException, class_name: str) -> bool:
    """Whether ``error`` is a Py4JJavaError whose Java exception, or a cause of it, is of class
    ``class_name`` or extends it (read by name: no class is loaded)."""
    if not isinstance(error, Py4JJavaError):
        return False
    throwable = error.java_exception
    for _ in range(16):  # a cause chain is short; this bounds a cyclic one
        if throwable is None:
            return False
        cls = throwable.getClass()
        while cls is not None:
            if cls.getName() == class_name:
                return True
            cls = cls.getSuperclass()
        throwable = throwable.getCause()
    return False


def message(error: BaseException) -> str:
    """What ``error`` says: a Py4JJavaError's Java exception (class and message), not py4j's wrapper."""
    return str(error.java_exception) if isinstance(error, Py4JJavaError) else str(error)
