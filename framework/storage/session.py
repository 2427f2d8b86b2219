"""The SparkSession factory: Delta enabled, sized for the machine, quiet.

Delta's jars (and, for ``s3=True``, ``hadoop-aws`` and the AWS SDK) are resolved from Maven
Central by ``configure_spark_with_delta_pip`` and cached in ``~/.ivy2``; ``make install`` does it
once, so nothing is downloaded at run time. The files Ivy resolved are recorded then
(``framework.storage.jars``) and later sessions start with them, without resolving again.
"""

from __future__ import annotations

import os
import sys

from pyspark.sql import SparkSession

from . import classic, jars
from . import s3 as s3_support

DEFAULT_CONF = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
    "spark.sql.session.timeZone": "UTC",
    # Spark's default of 200 shuffle partitions made a small batch many times slower (figures:
    # bench/README.md#figures-behind-the-codes-choices, as for each setting below).
    "spark.sql.shuffle.partitions": str(max(2, 2 * (os.cpu_count() or 2))),
    "spark.databricks.delta.snapshotPartitions": "2",
    # Adaptive execution runs each shuffle stage as a job of its own, nearly doubling a batch's
    # jobs; with 2 * cores shuffle partitions there is little left for it to coalesce. Streaming
    # queries never use it.
    "spark.sql.adaptive.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.log.structuredLogging.enabled": "false",
    "spark.databricks.delta.optimizeMetadataQuery.enabled": "true",
    # A commit's .crc file costs a third of a small append; readers do not need it, and a batch
    # makes several small commits.
    "spark.databricks.delta.writeChecksumFile.enabled": "false",
    # Spark keeps 100 compiled query classes; one batch needs more (its own plans and Delta's),
    # so each batch recompiled most of them again.
    "spark.sql.codegen.cache.maxEntries": "2000",
}
# What of DEFAULT_CONF a Spark Connect session sends: the settings a session may change, except
# the shuffle partitions, which the server's cores size (docs/operations.md#spark-connect), and
# the checksum files, which over Connect are what answers a table's id without a job
# (``tables.head``). Left at the server's defaults, a tiny batch ran 50 tasks per Delta snapshot
# and a job per adaptive stage.
SESSION_CONF = (
    "spark.sql.session.timeZone",
    "spark.databricks.delta.snapshotPartitions",
    "spark.sql.adaptive.enabled",
    "spark.databricks.delta.optimizeMetadataQuery.enabled",
)


def spark_session(
    app_name: str = "finalresults",
    master: str | None = None,
    conf: dict[str, str] | None = None,
    ui: bool = False,
    metastore: str | None = None,
    s3: bool | None = None,
    remote: str | None = None,
) -> SparkSession:
    """A SparkSession with Delta Lake enabled.

    ``remote`` (default: ``$SPARK_REMOTE``, as PySpark reads it), a Spark Connect URL
    (``sc://host:port``), gives a Connect session of that server instead: the server has Delta's
    extensions and catalog (docs/operations.md#spark-connect), this process starts no JVM, and
    of the settings only the session settings of ``SESSION_CONF`` and ``conf`` are sent (the
    server's own settings size it).

    The master is ``master``, else ``$SPARK_MASTER``, else spark-submit's ``--master`` when run
    under spark-submit, else ``local[*]``; ``conf`` overrides any setting. The Spark UI is off
    unless ``ui=True`` (tests and CI never need it). ``metastore`` is a folder for an embedded
    (Derby) Hive metastore, so that catalog schemas and tables (``Runtime(catalog=...)``) outlive
    the session on one machine; one process at a time may use it. Leave it out where the
    deployment configures its own metastore. ``s3=True`` (default: whether ``$FINALRESULTS_S3``
    is set, and not to 0) loads what a warehouse on S3 needs: the s3a file system and the LogStore that makes
    its commits atomic (``framework.storage.s3``, docs/s3.md); endpoint and credentials go in
    ``conf`` as ``spark.hadoop.fs.s3a.*`` settings.

    Example::

        spark = spark_session("my-app")                            # local[*]
        spark = spark_session("my-app", master="spark://127.0.0.1:7077")
    """
    from delta import configure_spark_with_delta_pip

    url = remote_url(remote)
    if url:
        return _connect(app_name, url, conf or {})
    # Python workers must run the interpreter that has pyarrow/pandas (this virtualenv).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name)
    chosen = master or os.environ.get("SPARK_MASTER")
    if chosen is None and "PYSPARK_GATEWAY_PORT" not in os.environ:
        chosen = "local[*]"  # under spark-submit (gateway already up) its --master is kept
    if chosen:
        builder = builder.master(chosen)
    on_s3 = os.environ.get("FINALRESULTS_S3", "") not in ("", "0") if s3 is None else s3
    settings = dict(
        DEFAULT_CONF,
        **{"spark.ui.enabled": str(ui).lower()},
        **_metastore_conf(metastore),
        **(s3_support.conf() if on_s3 else {}),
        **(conf or {}),
    )
    packages = [jars.DELTA_PACKAGE, *(s3_support.packages() if on_s3 else [])]
    given = [j for j in settings.get("spark.jars", "").split(",") if j]
    resolving = False
    if "PYSPARK_GATEWAY_PORT" in os.environ:  # spark-submit's --jars/--packages gave the jars
        settings.pop("spark.jars", None)  # it would replace the list spark-submit gave the executors
    elif (resolved := jars.recorded(packages)) is not None:  # the files Ivy gave before: no resolution
        settings["spark.jars"] = ",".join([*resolved, *given])
    else:
        resolving = True
    for key, value in settings.items():
        builder = builder.config(key, value)
    if resolving:
        builder = configure_spark_with_delta_pip(builder, extra_packages=packages[1:])
    spark = builder.getOrCreate()
    if resolving:  # Ivy resolved them as this JVM started: record them
        # Beside jars given in spark.jars, Spark lists the ones Ivy added in spark.repl.local.jars only.
        found = [classic.started_conf(spark, key) for key in ("spark.jars", "spark.repl.local.jars")]
        jars.record(packages, ",".join(j for j in found if j), given)
    classic.quiet(spark, os.environ.get("SPARK_LOG_LEVEL", "ERROR"))
    classic.remember_classes(spark)
    if metastore:  # Derby's log goes beside its database, not into the working folder
        derby_log = os.path.join(os.path.abspath(metastore), "derby.log")
        classic.set_system_property(spark, "derby.stream.error.file", derby_log)
    return spark


def remote_url(remote: str | None = None) -> str | None:
    """The Spark Connect server a session is of: ``remote``, else ``$SPARK_REMOTE``, as PySpark
    reads it; None for a classic session."""
    return remote or os.environ.get("SPARK_REMOTE") or None


def _connect(app_name: str, url: str, conf: dict[str, str]) -> SparkSession:
    """A Spark Connect session of the server at ``url``, with the session settings of a classic
    one (``SESSION_CONF``: windows are bounded in UTC, Delta's snapshots are small jobs).
    Delta's conflicts arrive as delta-spark's classes (``delta.connect.exceptions`` registers
    them with PySpark's conversion of the server's errors)."""
    import delta.connect.exceptions  # noqa: F401  (registers Delta's exception classes)

    builder = SparkSession.builder.remote(url).appName(app_name)
    for key, value in {**{k: DEFAULT_CONF[k] for k in SESSION_CONF}, **conf}.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


def _metastore_conf(metastore: str | None) -> dict[str, str]:
    if not metastore:
        return {}
    folder = os.path.abspath(metastore)
    return {
        "spark.sql.catalogImplementation": "hive",
        "spark.hadoop.javax.jdo.option.ConnectionURL": f"jdbc:derby:;databaseName={folder}/metastore_db;create=true",
        "spark.sql.warehouse.dir": os.path.join(folder, "managed"),
    }
