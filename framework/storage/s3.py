"""What a Spark session needs to keep a warehouse on S3 (``s3a://`` paths): the s3a file system
(``hadoop-aws`` of Spark's own Hadoop version, which brings the AWS SDK bundle) and a Delta
LogStore whose commits are atomic across processes (docs/s3.md).

Delta commits a table's version N by creating ``_delta_log/N.json`` only if it is absent; on a
local disk the framework holds a file lock around each commit for that (``locks.committing``).
On S3 the LogStore does it: ``S3ConditionalPutLogStore`` (``java/``, built into a small jar by
``make install``) writes each commit file with one conditional PUT (``If-None-Match: *``), so of
two writers of one version exactly one wins, whatever process or machine they run on. The PUT is
built by s3a's request factory (the bucket's encryption, ACL and storage class apply) and carries
an id: any answer that leaves its outcome open (a 5xx, a 409, a timeout, a reset) is settled by
reading the commit back (its own id, another writer's, or none: the same PUT again), so a commit
is never reported failed and then lands. It is sent only to a store seen to let one of two
racing conditional PUTs win. Delta's own ``S3DynamoDBLogStore`` (artifact
``io.delta:delta-storage-s3-dynamodb``) does the same with a DynamoDB table; set
``spark.delta.logStore.s3a.impl`` to it where that artifact can be installed. Any other LogStore
is refused on S3 (``require_atomic_logstore``) unless the user names it (``ATOMIC_LOGSTORES_CONF``).
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path
from urllib.parse import urlparse

import pyspark
from pyspark.sql import SparkSession

from ..errors import FrameworkError

JAVA = Path(__file__).parent / "java"
LOGSTORE_CLASS = "io.finalresults.S3ConditionalPutLogStore"
LOGSTORE_JAR = JAVA / "finalresults-s3-logstore.jar"  # built by `make install` (build_logstore)
S3_SCHEMES = ("s3a", "s3", "s3n")
#: The LogStores known to commit atomically on S3 across processes: a put-if-absent of the
#: commit file that exactly one of two writers wins. Delta's default there
#: (``S3SingleDriverLogStore``) is atomic within one driver only, and a local, HDFS or other
#: file-system LogStore pointed at ``s3a://`` renames or overwrites: both are refused. A user
#: adds a LogStore that is atomic on their store (a lock service of their own, say) by naming
#: its class in ``ATOMIC_LOGSTORES_CONF`` (comma-separated), as docs/s3.md says.
ATOMIC_LOGSTORES = (LOGSTORE_CLASS, "io.delta.storage.S3DynamoDBLogStore")
ATOMIC_LOGSTORES_CONF = "spark.finalresults.s3.atomicLogStores"


def hadoop_version() -> str:
    """The Hadoop version Spark ships (its ``hadoop-client-api`` jar): ``hadoop-aws`` must match it."""
    jars = Path(pyspark.__file__).parent / "jars"
    names = sorted(p.name for p in jars.glob("hadoop-client-api-*.jar"))
    if not names:
        raise RuntimeError(f"no hadoop-client-api jar in {jars}: cannot tell which hadoop-aws to use")
    return names[0][len("hadoop-client-api-") : -len(".jar")]


def packages() -> list[str]:
    """Maven coordinates a session adds for S3 (resolved into ``~/.ivy2`` by ``make install``)."""
    return [f"org.apache.hadoop:hadoop-aws:{hadoop_version()}"]


def conf() -> dict[str, str]:
    """Session settings for S3: the LogStore for ``s3a://`` tables, the jar that holds it, and
    reads that survive a GET cut short (s3a's classic input stream, no vectored Parquet reads).
    Endpoint and credentials are the user's, as ``spark.hadoop.fs.s3a.*`` settings (docs/s3.md)."""
    if not LOGSTORE_JAR.is_file():
        raise RuntimeError(f"{LOGSTORE_JAR} is missing: `make install` builds it (framework.storage.s3.build_logstore)")
    return {
        "spark.delta.logStore.s3a.impl": LOGSTORE_CLASS,
        "spark.jars": str(LOGSTORE_JAR),
        # s3a's classic input stream re-opens a GET cut in the middle of its body and reads on;
        # hadoop-aws 3.5's default (the analytics accelerator's) failed Delta's read of a commit
        # file on one such cut, and the batch with it (tests/test_s3_faults.py, docs/s3.md#faults).
        "spark.hadoop.fs.s3a.input.stream.type": "classic",
        # Parquet's vectored reads fetch column chunks as ranged GETs that s3a does not re-open
        # when one is cut mid-body (S3AInputStream.readVectored): a soak behind the fault proxy
        # failed a batch on one, twice. Read through the classic stream above, which does.
        "spark.hadoop.parquet.hadoop.vectored.io.enabled": "false",
    }


def require_atomic_logstore(spark: SparkSession, warehouse: str, logstore: str) -> None:
    """Refuse warehouse ``warehouse`` on S3 unless ``logstore``, the LogStore Delta commits with there, is
    one of ``ATOMIC_LOGSTORES`` or of those the session's ``ATOMIC_LOGSTORES_CONF`` adds: any
    other lets two runners of one batch both commit one table version, and no lock here stops
    them. Whether the store behind it honours conditional writes atomically is the LogStore's
    to check (``S3ConditionalPutLogStore`` races a probe before its first commit to a store)."""
    added = [name.strip() for name in (spark.conf.get(ATOMIC_LOGSTORES_CONF, "") or "").split(",")]
    if logstore in ATOMIC_LOGSTORES or logstore in added:
        return
    raise FrameworkError(
        f"warehouse {warehouse!r} is on S3, but Delta commits there with {logstore}, which is not known to "
        "commit atomically across processes on S3: two runners of one batch could both commit. Start the "
        "session with spark_session(..., s3=True) (or FINALRESULTS_S3=1), or start it with "
        f"spark.delta.logStore.{urlparse(warehouse).scheme}.impl set to one of {', '.join(ATOMIC_LOGSTORES)}; "
        "setting it on a running session does not reach Delta. A LogStore you know to be atomic on your "
        f"store is added with {ATOMIC_LOGSTORES_CONF}=<class> (docs/s3.md)."
    )


def build_logstore(classpath: list[str]) -> Path:
    """Compile ``java/*.java`` against ``classpath`` (Delta, hadoop-aws, the AWS SDK, Hadoop's
    client jars) into ``LOGSTORE_JAR``."""
    hadoop = Path(pyspark.__file__).parent / "jars" / f"hadoop-client-api-{hadoop_version()}.jar"
    with tempfile.TemporaryDirectory() as classes:
        path = os.pathsep.join([*classpath, str(hadoop)])
        javac = ["javac", "--release", "17", "-nowarn", "-d", classes, "-cp", path]
        subprocess.run(javac + [str(source) for source in sorted(JAVA.glob("*.java"))], check=True)
        subprocess.run(["jar", "cf", str(LOGSTORE_JAR), "-C", classes, "."], check=True)
    return LOGSTORE_JAR


def install() -> None:
    """What ``make install`` runs: resolve Delta's and the S3 jars into ``~/.ivy2`` through a
    session (and record them: ``framework.storage.jars``), then build the LogStore jar against them."""
    from delta import configure_spark_with_delta_pip
    from pyspark.sql import SparkSession

    from . import classic, jars

    builder = SparkSession.builder.master("local[1]").appName("install").config("spark.ui.enabled", "false")
    spark = configure_spark_with_delta_pip(builder, extra_packages=packages()).getOrCreate()
    try:
        resolved = classic.started_conf(spark, "spark.jars")
    finally:
        spark.stop()
    jars.record([jars.DELTA_PACKAGE, *packages()], resolved)
    build_logstore([j.removeprefix("file://") for j in resolved.split(",") if j])


if __name__ == "__main__":
    install()
