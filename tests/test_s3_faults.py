"""The S3 LogStore under the faults S3 has (docs/s3.md#faults), each injected by the proxy of
tests/s3faults.py between s3a and the test server: the LogStore's own calls (a commit's
conditional PUT, an overwrite), Delta's checkpoint and reads of a table, the atomicity probe.

The buckets here let no fault be hidden by a retry below the LogStore: the AWS SDK does not
retry (``attempts.maximum`` 0), s3a's own retries are few and quick, and a request times out
after a second or two (s3a's floor on timeouts is lowered for the module), so a slow apply lands
after the client gave up on it. Tests of whole batches under faults are in test_s3.py."""

import json
import re
from contextlib import contextmanager

import pytest
from py4j.protocol import Py4JJavaError
from s3faults import CHECKPOINT, COMMIT, KINDS, PROBE, Fault, proxy

from framework.storage import classic

TRIES = 6  # S3ConditionalPutLogStore.TRIES
FIRST = "t/_delta_log/00000000000000000000.json"
FAULT_BUCKET = {
    "attempts.maximum": "0",
    "connection.request.timeout": "1500ms",
    "connection.timeout": "1500ms",
    "retry.limit": "2",
    "retry.interval": "50ms",
    "retry.throttle.limit": "2",
    "retry.throttle.interval": "50ms",
}


@pytest.fixture(scope="module", autouse=True)
def quick_timeouts(spark):
    """s3a raises every network timeout to at least 15 s; its own tests lower that floor so."""
    config = spark._jvm.org.apache.hadoop.fs.s3a.impl.AWSClientConfig
    config.setMinimumOperationDuration(spark._jvm.java.time.Duration.ofSeconds(1))
    yield
    config.resetMinimumOperationDuration()


@contextmanager
def faulty(spark, s3, name, faults=(), store="atomic"):
    """A new bucket s3a reaches through a proxy giving ``faults`` (``FAULT_BUCKET``'s settings):
    yields (the bucket, what the proxy saw)."""
    with proxy(s3.endpoint, faults, store) as (endpoint, seen):
        bucket = s3.behind(endpoint, name)
        bucket.reach_from(spark)
        hadoop = spark._jsc.hadoopConfiguration()
        for key, value in FAULT_BUCKET.items():
            hadoop.set(f"fs.s3a.bucket.{bucket.bucket}.{key}", value)
        yield bucket, seen


def write(spark, url, lines, overwrite=False):
    """Write ``lines`` to ``url`` with the S3 LogStore, as Delta writes a commit (``overwrite``
    False) or ``_last_checkpoint`` (True)."""
    jvm, conf = spark._jvm, spark._jsc.hadoopConfiguration()
    actions = jvm.java.util.ArrayList()
    for line in lines:
        actions.add(line)
    store = jvm.io.finalresults.S3ConditionalPutLogStore(conf)
    store.write(jvm.org.apache.hadoop.fs.Path(url), actions.iterator(), overwrite, conf)


def stored(bucket, key):
    """The object's body and commit id, read from the server itself."""
    found = bucket.client().get_object(Bucket=bucket.bucket, Key=key)
    return found["Body"].read().decode(), found["Metadata"].get("finalresults-commit")


def objects(bucket):
    """The bucket's keys but s3a's directory markers (the probe's deleted marker leaves one)."""
    return [key for key in bucket.keys() if not key.endswith("/")]


#: How many PUTs of the commit file get the fault. Faults that leave nothing on the server are
#: given twice (the LogStore must send the PUT a third time); a 409 after the write applied, to
#: every try (the earlier LogStore gave up after six 409s although its own commit was there).
TIMES = {"5xx": 2, "5xx-applied": 1, "409": 2, "409-applied": TRIES + 1, "lost": 1, "slow": 2, "reset": 2}


@pytest.mark.parametrize("kind", KINDS)
def test_a_commit_whose_answer_leaves_its_outcome_open_is_settled_as_made(spark, s3, kind):
    """A 5xx, a 409, a lost answer, a timeout or a reset says nothing certain about a PUT: the
    LogStore reads the commit file back and finds its own id (committed), or nothing (it sends
    the same conditional PUT again). A slow PUT that lands after the client gave up lands as
    this commit, or is refused (never replacing it); a second writer of the version meets a
    conflict."""
    with faulty(spark, s3, f"made-{kind}", [Fault(kind, times=TIMES[kind])]) as (bucket, seen):
        write(spark, bucket.url(FIRST), ['{"a":1}'])
        body, mine = stored(bucket, FIRST)
        with pytest.raises(Py4JJavaError) as other:
            write(spark, bucket.url(FIRST), ['{"b":2}'])
        seen.wait_idle()  # a slow PUT has landed, or was refused
    assert classic.raised_java(other.value, "java.nio.file.FileAlreadyExistsException"), other.value
    assert body == '{"a":1}\n' and mine, (body, mine)
    assert stored(bucket, FIRST) == (body, mine)
    assert kind in seen.kinds(), seen.requests


#: Faults on the losing writer's PUT: its commit was never written, another writer's is there.
@pytest.mark.parametrize("kind", ["5xx", "5xx-applied", "409", "lost", "slow", "reset"])
def test_a_losing_writers_open_outcome_is_settled_as_a_conflict(spark, s3, kind):
    """Delta tries the next version on a conflict (FileAlreadyExistsException); reported as an
    I/O error, a blind append that merely lost a race would fail."""
    with faulty(spark, s3, f"lost-{kind}", [Fault(kind)]) as (bucket, seen):
        write(spark, bucket.url("t/_delta_log/x.json"), ["probe"])  # the store's probe, unfaulted
        bucket.client().put_object(Bucket=bucket.bucket, Key=FIRST, Body=b"theirs\n")
        with pytest.raises(Py4JJavaError) as lost:
            write(spark, bucket.url(FIRST), ["mine"])
    assert classic.raised_java(lost.value, "java.nio.file.FileAlreadyExistsException"), lost.value
    assert stored(bucket, FIRST) == ("theirs\n", None)
    assert seen.kinds() == {kind: 1}, seen.requests


def test_an_outcome_left_open_is_reported_so_with_the_first_answer_as_its_cause(spark, s3):
    """Every PUT answered 503 and every read-back reset: after its tries the LogStore says the
    commit may still appear, and the cause is the PUT's 503 (the read-backs' errors are
    suppressed beside it), not a bare error of the read-back."""
    faults = [Fault("5xx", times=TRIES), Fault("reset", op="HEAD", on=COMMIT, times=100)]
    with faulty(spark, s3, "unsettled", faults) as (bucket, seen):
        with pytest.raises(Py4JJavaError) as error:
            write(spark, bucket.url(FIRST), ["x"])
    thrown = error.value.java_exception
    assert "unsettled after 6 conditional PUTs" in thrown.getMessage() and "run the batch again" in thrown.getMessage()
    cause = thrown.getCause()
    assert cause.getClass().getSimpleName() == "S3Exception" and cause.statusCode() == 503, str(cause)
    assert len(thrown.getSuppressed()) == TRIES, [str(s) for s in thrown.getSuppressed()]
    assert FIRST not in bucket.keys()
    assert seen.kinds()["5xx"] == TRIES, seen.requests


def test_overwrites_take_s3as_write_path_with_its_retries_and_its_errors(spark, s3):
    """``_last_checkpoint`` (Delta's one overwrite besides compacted logs) is written by s3a:
    two 503s are retried by s3a's policy (the SDK does not retry here), and a store that keeps
    answering 503 ends in an IOException Delta can handle, not an SDK exception."""
    faults = [
        Fault("5xx", on="/a/_delta_log/_last_checkpoint$", times=2),
        Fault("5xx", on="/b/_delta_log/_last_checkpoint$", times=100),
    ]
    with faulty(spark, s3, "overwrite", faults) as (bucket, seen):
        write(spark, bucket.url("a/_delta_log/_last_checkpoint"), ['{"version":1}'], overwrite=True)
        write(spark, bucket.url("a/_delta_log/_last_checkpoint"), ['{"version":2}'], overwrite=True)
        with pytest.raises(Py4JJavaError) as error:
            write(spark, bucket.url("b/_delta_log/_last_checkpoint"), ['{"version":1}'], overwrite=True)
    assert stored(bucket, "a/_delta_log/_last_checkpoint")[0] == '{"version":2}\n'
    assert classic.raised_java(error.value, "java.io.IOException"), error.value
    assert seen.kinds()["5xx"] > 2, seen.requests


def test_a_table_checkpoints_and_reads_back_through_faults_on_its_log(spark, s3):
    """Delta's checkpoint (its Parquet file and ``_last_checkpoint``) and its reads of the log
    and data (GETs of a commit and of Parquet files cut mid-body, LIST and HEAD answered 503)
    meet faults and retry them: the table reads back whole from its checkpoint."""
    faults = [
        Fault("5xx", on=CHECKPOINT, times=2),
        Fault("reset", op="GET", on=COMMIT),
        Fault("reset", op="GET", on=r"\.parquet$"),
        Fault("5xx", op="LIST", on="/_delta_log/"),
        Fault("5xx", op="HEAD", on="_last_checkpoint$"),
    ]
    with faulty(spark, s3, "checkpoint", faults) as (bucket, seen):
        table = bucket.url("t")
        spark.range(3).write.format("delta").save(table)
        spark.range(3, 5).write.format("delta").mode("append").save(table)
        jvm = spark._jvm
        jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, table).checkpoint()
        jvm.org.apache.spark.sql.delta.DeltaLog.clearCache()
        assert sorted(r.id for r in spark.read.format("delta").load(table).collect()) == [0, 1, 2, 3, 4]
    assert json.loads(stored(bucket, "t/_delta_log/_last_checkpoint")[0])["version"] == 1
    assert "t/_delta_log/00000000000000000001.checkpoint.parquet" in bucket.keys()
    given = {(kind, op, key.rsplit(".", 1)[-1] if op == "GET" else "") for kind, op, key in seen.given}
    assert given == {
        ("5xx", "PUT", ""),
        ("reset", "GET", "json"),
        ("reset", "GET", "parquet"),
        ("5xx", "LIST", ""),
        ("5xx", "HEAD", ""),
    }, seen.given


def test_parquet_reads_cut_mid_body_are_read_again_not_failed(spark, s3):
    """A table's Parquet files read with half their GETs cut mid-body (a reset, as S3 does) read
    whole: s3a's classic stream re-opens a cut GET and reads on, and the framework's S3 settings
    turn off Parquet's vectored reads, whose ranged GETs s3a does not re-open (a soak behind the
    proxy failed a batch on one). With vectored reads on, the same read fails."""
    from pyspark.sql import functions as F

    faults = [Fault("reset", op="GET", on=r"/t/part-[^/]*\.parquet$", times=10**6, chance=0.5)]
    with faulty(spark, s3, "cut-reads", faults) as (bucket, seen):
        table = bucket.url("t")
        rows = spark.range(0, 4000, numPartitions=8).selectExpr("id", "id * 2 AS twice", "CAST(id AS STRING) AS name")
        rows.write.format("delta").save(table)
        total = spark.read.format("delta").load(table).agg(F.sum("twice"), F.count("name")).first()
        assert tuple(total) == (2 * sum(range(4000)), 4000)
        cut = seen.kinds()["reset"]
        vectored = spark.newSession()
        vectored.conf.set("parquet.hadoop.vectored.io.enabled", "true")
        with pytest.raises(Exception, match="Premature end of Content-Length|FAILED_READ_FILE"):
            vectored.read.format("delta").load(table).agg(F.sum("twice"), F.count("name")).collect()
    assert cut > 4, seen.given  # the whole read met cuts, and s3a read on through them


@pytest.mark.parametrize("store", ["ignores", "racy"])
def test_a_store_whose_conditional_put_is_not_atomic_is_refused(spark, s3, store):
    """Two conditional PUTs of a new marker are raced before the first commit to a store:
    one that ignores If-None-Match, or checks it and then writes (both checks pass before
    either write), lets both succeed and is refused; nothing is left in the bucket."""
    with faulty(spark, s3, f"store-{store}", store=store) as (bucket, seen):
        with pytest.raises(Py4JJavaError, match=r"not atomic on If-None-Match: 2 of 2 .*No commit was written"):
            write(spark, bucket.url(FIRST), ["x"])
    assert objects(bucket) == []
    assert [answer for op, key, answer in seen.requests if op == "PUT" and re.search(PROBE, key)] == [200, 200]


def test_faults_on_the_probe_marker_are_settled_like_a_commits(spark, s3):
    """The probe's racing PUTs are conditional PUTs as commits are: the one applied but
    answered 500 is read back as its writer's (one winner), the other's lost answer as a
    conflict; a 503 on deleting the marker is retried. The store is accepted, the commit made."""
    faults = [Fault("5xx-applied", on=PROBE), Fault("lost", on=PROBE), Fault("5xx", op="DELETE", on=PROBE)]
    with faulty(spark, s3, "probe", faults) as (bucket, seen):
        write(spark, bucket.url(FIRST), ['{"a":1}'])
    assert objects(bucket) == [FIRST]
    assert seen.kinds() == {"5xx-applied": 1, "lost": 1, "5xx": 1}, seen.requests
