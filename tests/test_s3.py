"""Exactly once on S3 (docs/s3.md): the scenarios of test_exactly_once, test_concurrency,
test_operations and test_replay, run again with the warehouse in a bucket of an S3 server on
127.0.0.1 (moto, tests/s3server.py). There Delta's commits rest on the S3 LogStore's conditional
PUT, not on the file lock of a local disk, and the framework's own files (staging folders,
publication specs, gate outcomes) are objects. Each scenario is checked through the public API
(results, late records, metrics, ledger) against a clean run of the same batches on the store.

A batch on this server takes about twice as long as on a local disk, so the scenarios start
from copies of one warehouse (a Delta table copied with its log is the same table) and stop
after the batch they test."""

from base64 import b64encode
from hashlib import md5

import pytest
from harness import frame, in_parallel, results
from s3faults import Fault, proxy
from test_concurrency import race
from test_exactly_once import BATCHES, Crash, pipeline, run
from test_operations import _in_thread, _Paused

from framework import ConcurrentBatchError, FrameworkError, Runtime
from framework.operations import outcome, quality, validation
from framework.operations.attempt import WRITE_POINTS
from framework.operations.replay import ReplayBatch
from framework.storage import s3 as s3_support

P = pipeline("on_s3")


def seen(rt, p=P):
    """What a reader of the pipeline sees, minus wall-clock values."""
    return {
        "output": results(rt, p),
        "late": sorted(map(str, rt.read_late(p).collect())),
        "metrics": sorted(map(str, rt.read_metrics(p).drop("batch_duration_ms").collect())),
        "committed": [
            (r.seq, r.batch_id) for r in rt.read_ledger(p).filter("status = 'committed'").orderBy("seq").collect()
        ],
    }


@pytest.fixture(scope="module")
def after_b0(spark, s3):
    """A warehouse on S3 where batch b0 of ``P`` committed."""
    run(Runtime(spark, s3.url("b0"), quality=False), P, 0)
    return "b0"


@pytest.fixture(scope="module")
def clean(spark, s3, after_b0):
    """What a reader sees after a clean run of b0 and b1 on S3 (the "batch" scenario)."""
    rt = Runtime(spark, s3.copy(after_b0, "clean"), quality=False)
    assert run(rt, P, 1).status == "committed"
    assert run(rt, P, 1).status == "already committed"
    found = seen(rt)
    assert found["output"] and found["late"] and found["committed"] == [(1, "b0"), (2, "b1")]
    return found


def test_the_s3_logstore_refuses_to_overwrite_a_commit(spark, s3, clean):
    """Delta's put-if-absent of a commit file is the S3 LogStore's conditional PUT, and no lock
    file is left beside the pipeline's tables (locks.committing is a no-op there)."""
    table = s3.url("logstore")
    spark.range(1).write.format("delta").save(table)
    jvm = spark._jvm
    log = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, table)
    store = jvm.io.finalresults.S3ConditionalPutLogStore(log.newDeltaHadoopConf())
    first = jvm.org.apache.hadoop.fs.Path(log.logPath(), f"{0:020d}.json")
    with pytest.raises(Exception, match="FileAlreadyExistsException"):
        store.write(first, jvm.java.util.Collections.emptyIterator(), False, log.newDeltaHadoopConf())
    assert spark.read.format("delta").load(table).count() == 1  # the commit is intact
    assert not [k for k in s3.keys("clean") if k.endswith(".lock")]


def test_the_guard_accepts_only_logstores_known_atomic_on_s3_as_delta_picks_them(spark, s3):
    """Delta picks its LogStore from the conf the SparkContext started with (SparkEnv's), never
    from a session's: a ``spark.conf.set`` naming one neither fools the guard nor trips it. Of
    the LogStores Delta would commit with, only those on the allow-list (``s3.ATOMIC_LOGSTORES``)
    pass: Delta's single-driver default for S3 and a file-system LogStore (HDFS's rename) are
    refused, unless the session names one in ``ATOMIC_LOGSTORES_CONF``. A context started
    without the conditional-PUT LogStore is stood in for by setting the started conf for the
    length of the test."""
    key, single = "spark.delta.logStore.s3a.impl", "io.delta.storage.S3SingleDriverLogStore"
    session = spark.newSession()
    session.conf.set(key, single)
    Runtime(session, s3.url("accepted"), quality=False)  # Delta still commits with the conditional PUT
    started = spark._jvm.org.apache.spark.SparkEnv.get().conf()
    chosen = started.get(key)
    try:
        session.conf.set(key, chosen)
        for store in (single, "io.delta.storage.HDFSLogStore"):
            started.set(key, store)
            with pytest.raises(FrameworkError, match=rf"Delta commits there with {store}, which is not known.*s3=True"):
                Runtime(session, s3.url("refused"), quality=False)
        session.conf.set(s3_support.ATOMIC_LOGSTORES_CONF, "io.delta.storage.HDFSLogStore")
        Runtime(session, s3.url("declared"), quality=False)  # the user's word for their store
    finally:
        started.set(key, chosen)


def test_a_crash_before_each_write_then_a_rerun_equals_a_clean_run_on_s3(spark, s3, after_b0, clean):
    def crash_at(point):
        def fail(at):
            if at == point:
                raise Crash(point)

        lake = s3.copy(after_b0, f"crash_{point}")
        with pytest.raises(Crash):
            run(Runtime(spark.newSession(), lake, quality=False, before_write=fail), P, 1)
        rt = Runtime(spark.newSession(), lake, quality=False)
        assert run(rt, P, 1).status == ("already committed" if point == "publish" else "committed")
        return point, seen(rt)

    for point, after in in_parallel([lambda pt=pt: crash_at(pt) for pt in WRITE_POINTS], workers=3):
        assert after == clean, f"crash before {point!r} write"


@pytest.mark.slow
def test_two_processes_racing_on_one_batch_on_s3_commit_it_once(spark, s3, tmp_path):
    """Both runners reach the commit point before either commits, so both PUT the same commit
    file: the proxy in front of the server sees two PUTs of one version, one created (200) and
    one refused (412), and the loser committed nothing (``race``)."""
    from s3server import child_env

    with proxy(s3.endpoint) as (endpoint, log):
        raced = s3.behind(endpoint, "race")
        raced.reach_from(spark)
        race(spark, raced.url("shared"), raced.url("clean"), tmp_path / "gate", env=child_env(raced))
    contested = [sorted(answers) for answers in log.answers().values() if len(answers) > 1]
    assert contested and all(answers == [200, 412] for answers in contested), log.commits


def test_a_zombie_attempt_resumed_after_the_retry_committed_is_fenced_out_on_s3(spark, s3, after_b0, clean):
    lake = s3.copy(after_b0, "zombie")
    zombie = _Paused("commit_point")
    first = _in_thread(lambda: run(Runtime(spark.newSession(), lake, quality=False, before_write=zombie), P, 1))
    assert zombie.reached.wait(300)
    rt = Runtime(spark.newSession(), lake, quality=False)
    assert run(rt, P, 1).status == "committed"
    zombie.go.set()
    found = first()
    assert isinstance(found.get("error"), ConcurrentBatchError), found
    assert seen(rt) == clean


def test_a_replay_on_s3_of_the_same_input_changes_nothing_a_reader_sees(spark, s3, after_b0, clean):
    rt = Runtime(spark, s3.copy("clean", "replay"), quality=False)
    result = rt.replay(P, [ReplayBatch("b1", frame(spark, BATCHES[1], len(BATCHES[0])))])
    assert (result.first, result.last) == ("b1", "b1")
    assert seen(rt) == clean


def test_the_quality_gate_outcome_on_s3_is_read_without_spark(spark, s3, after_b0, clean, monkeypatch):
    """The job leaves the outcome in the bucket through Spark; the gate task reads it with
    pyarrow (s3a:// as s3://), with the worker's own endpoint and credentials."""
    lake = s3.copy("clean", "gate")
    rt = Runtime(spark, lake, quality=False)
    left = validation.after_run(spark, P, lake, rt.committed_batch(P, "b1"))
    for key, value in s3.env().items():
        monkeypatch.setenv(key, value)
    read = outcome.read(lake, P.name, "batch")
    assert read == left and read.success and read.batch_id == "b1"
    assert outcome.read(lake, P.name, "replay") is None


def test_commits_that_landed_but_were_answered_as_failed_stand_once_on_s3(spark, s3, after_b0, clean):
    """A PUT can land and still be reported as failed (a 5xx after the SDK's retries, here none),
    or fail with nothing applied (a reset mid-body): the LogStore reads each commit file back
    and finds its own id, or nothing and sends the PUT again. Taken for a conflict, Delta would
    commit the actions again at the next version (a blind append twice); taken for a failure, a
    batch that committed would be refused. Every commit file's first PUT is reset, its second
    applied and answered 500; the batch, and a replay of it (a blind append), then leave exactly
    a clean run's tables. (Each fault alone, on the LogStore itself: test_s3_faults.py.)"""
    with proxy(s3.endpoint, [Fault("reset"), Fault("5xx-applied")]) as (endpoint, log):
        faulty = s3.behind(endpoint, "faults")
        faulty.reach_from(spark)
        spark._jsc.hadoopConfiguration().set(f"fs.s3a.bucket.{faulty.bucket}.attempts.maximum", "0")
        rt = Runtime(spark, s3.copy(after_b0, "lake", to=faulty), quality=False)
        assert run(rt, P, 1).status == "committed"
        rt.replay(P, [ReplayBatch("b1", frame(spark, BATCHES[1], len(BATCHES[0])))])
        assert seen(rt) == clean
    assert log.kinds()["reset"] == log.kinds()["5xx-applied"] == len(log.answers()) > 0, log.commits
    assert all(answers == ["reset", 500] for answers in log.answers().values()), log.commits


def test_a_retried_audit_appends_its_quality_results_once_on_s3(spark, s3, after_b0, clean):
    """``quality_results`` takes blind appends: an audit retried (after a failure, or after a
    commit of it that landed although its answer said it failed) finds the same and appends
    nothing more, by a Delta transaction id of its own; an operator's validations of the whole
    table are each kept."""
    rows = Runtime(spark, s3.url("clean"), quality=False).read_output(P)
    lake = s3.url("audit")
    audit = quality.validate(spark, P, rows, "b1", warehouse_root=lake)
    assert quality.validate(spark, P, rows, "b1", warehouse_root=lake).checks == audit.checks
    for _ in range(2):
        table = quality.validate(spark, P, rows, warehouse_root=lake)
    kept = spark.read.format("delta").load(f"{lake}/quality_results")
    assert kept.filter("batch_id = 'b1'").count() == len(audit.checks) > 0
    assert kept.filter("batch_id IS NULL").count() == 2 * len(table.checks)


def test_a_store_that_ignores_if_none_match_is_refused_before_its_first_commit(spark, s3, after_b0):
    """Where a second conditional PUT of a key succeeds, two writers of one Delta version would
    both succeed and one commit would vanish: the LogStore's probe (two PUTs of a marker raced)
    refuses the store before the batch's first commit, and every table's log is as it was."""
    with proxy(s3.endpoint, store="ignores") as (endpoint, log):
        faulty = s3.behind(endpoint, "unconditional")
        faulty.reach_from(spark)
        lake = s3.copy(after_b0, "lake", to=faulty)
        logs = [k for k in faulty.keys() if "/_delta_log/" in k]
        with pytest.raises(Exception, match=r"not atomic on If-None-Match.*No commit was written"):
            run(Runtime(spark.newSession(), lake, quality=False), P, 1)
    assert [k for k in faulty.keys() if "/_delta_log/" in k] == logs  # no commit, no marker left
    assert log.commits == []


def test_commit_files_get_the_buckets_s3a_write_settings(spark, s3):
    """The bucket's s3a write settings apply to its Delta commit files as to the data files s3a
    writes, since the LogStore's PUT is built by s3a's request factory: SSE-KMS, the storage class
    and the canned ACL (as the server keeps them), and SSE-C (checked by the proxy as S3 checks
    it), without which s3a could not read the commit back: a commit PUT whose answer is lost is
    settled by reading it back, which needs the customer key too."""

    def bucket(name, via, **settings):
        made = s3.behind(via, name)
        made.reach_from(spark)
        for key, value in settings.items():
            spark._jsc.hadoopConfiguration().set(f"fs.s3a.bucket.{made.bucket}.{key}", value)
        spark.range(2).write.format("delta").save(made.url("t"))
        return made

    kms = "arn:aws:kms:us-east-1:123456789012:key/finalresults-test"
    managed = bucket(
        "kms",
        s3.endpoint,  # straight to the server
        **{
            "encryption.algorithm": "SSE-KMS",
            "encryption.key": kms,
            "create.storage.class": "standard_ia",
            "acl.default": "PublicRead",
        },
    )
    client = managed.client()

    def written(key):
        head = client.head_object(Bucket=managed.bucket, Key=key)
        grants = client.get_object_acl(Bucket=managed.bucket, Key=key)["Grants"]
        permissions = sorted(g["Permission"] + " " + g["Grantee"].get("URI", "owner") for g in grants)
        return head.get("ServerSideEncryption"), head.get("SSEKMSKeyId"), head.get("StorageClass"), permissions

    data = next(k for k in managed.keys("t/") if k.endswith(".parquet"))
    commit = written("t/_delta_log/00000000000000000000.json")
    assert commit == written(data), (commit, written(data))
    assert commit[:3] == ("aws:kms", kms, "STANDARD_IA") and any("AllUsers" in g for g in commit[3]), commit

    key = bytes(range(32))
    with proxy(s3.endpoint, [Fault("lost")]) as (endpoint, log):  # the proxy checks SSE-C as S3 does
        customer = bucket(
            "ssec", endpoint, **{"encryption.algorithm": "SSE-C", "encryption.key": b64encode(key).decode()}
        )
        assert spark.read.format("delta").load(customer.url("t")).count() == 2
        first = f"/{customer.bucket}/t/_delta_log/00000000000000000000.json"
        assert [r for r in log.requests if r[2] in (400, 403)] == []  # every read carried the key
        with pytest.raises(Exception, match=r"\(400\)"):  # a read without it is refused, as by S3
            customer.client(proxied=True).head_object(Bucket=customer.bucket, Key=first.split("/", 2)[2])
    assert log.answers()[first][0] == "lost" and log.kinds() == {"lost": 1}
    assert ("HEAD", first, 200) in log.requests  # settled by reading it back, with the key
    sent = log.sent[first]
    assert sent["x-amz-server-side-encryption-customer-algorithm"] == "AES256", sent
    assert sent["x-amz-server-side-encryption-customer-key-md5"] == b64encode(md5(key).digest()).decode(), sent
