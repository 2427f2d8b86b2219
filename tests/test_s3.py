"""Exactly once on S3 (docs/s3.md): the scenarios of test_exactly_once, test_concurrency,
test_operations and test_replay, run again with the warehouse in a bucket of an S3 server on
127.0.0.1 (moto, tests/s3server.py). There Delta's commits rest on the S3 LogStore's conditional
PUT, not on the file lock of a local disk, and the framework's own files (staging folders,
publication specs, gate outcomes) are objects. Each scenario is checked through the public API
(results, late records, metrics, ledger) against a clean run of the same batches on the store.

A batch on this server takes about twice as long as on a local disk, so the scenarios start
from copies of one warehouse (a Delta table copied with its log is the same table) and stop
after the batch they test."""

import pytest
from harness import frame, in_parallel, results
from test_concurrency import race
from test_exactly_once import BATCHES, Crash, pipeline, run
from test_operations import _in_thread, _Paused

from framework import ConcurrentBatchError, FrameworkError, Runtime
from framework.operations import outcome, validation
from framework.operations.attempt import WRITE_POINTS
from framework.operations.replay import ReplayBatch

P = pipeline("on_s3")


def seen(rt, p=P):
    """What a reader of the pipeline sees, minus wall-clock values."""
    return {
        "output": results(rt, p),
        "late": sorted(map(str, rt.read_late(p).collect())),
        "metrics": sorted(map(str, rt.read_metrics(p).drop("batch_duration_ms").collect())),
        "committed": [
            (r.seq, r.batch_id) for r in rt.ledger(p).filter("status = 'committed'").orderBy("seq").collect()
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


def test_a_session_with_deltas_single_driver_s3_logstore_is_refused(spark, s3):
    session = spark.newSession()
    session.conf.set("spark.delta.logStore.s3a.impl", "io.delta.storage.S3SingleDriverLogStore")
    with pytest.raises(FrameworkError, match=r"atomic within one driver only.*s3=True"):
        Runtime(session, s3.url("refused"), quality=False)


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
    from s3server import child_env

    race(spark, s3.url("race", "shared"), s3.url("race", "clean"), tmp_path / "gate", env=child_env(s3))


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
