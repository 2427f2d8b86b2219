"""Exactly-once (docs/design.md#batch-protocol): ordered batches, idempotent re-runs, and a crash at every write
boundary followed by a re-run leaving exactly the tables of a clean run."""

import shutil
import subprocess
import sys
import threading

import pytest
from harness import AGGREGATES, frame, in_parallel, results, rows_of

from framework import (
    BatchOrderError,
    BufferConfig,
    ConcurrentBatchError,
    DefinitionError,
    FingerprintMismatchError,
    Pipeline,
    Runtime,
    SlidingWindows,
    Suppressed,
    TimeWindows,
)
from framework.operations.attempt import WRITE_POINTS
from framework.operations.replay import ReplayBatch
from framework.storage import bookkeeping, state, tables
from framework.storage.state import buffer_path

BATCHES = [
    [("A", 1, 1), ("B", 2, 2), ("A", 12, 3)],
    [("A", 25, 4), ("A", 3, 5), ("B", 14, 6), ("B", 31, 7)],  # ts 3 is late: a late record
    [("A", 70, 8)],
]
IDS = ["b0", "b1", "b2"]


class Crash(Exception):
    pass


RATE_LIMITED = Suppressed.until_time_limit(5, BufferConfig.max_records(2))


def pipeline(name, windows=None, suppressed=Suppressed.until_window_closes(BufferConfig.unbounded())):
    return (
        Pipeline(name, timestamp="ts", arrival="seq")
        .group_by("k")
        .windowed_by(windows or TimeWindows.of_size_and_grace(10, 2))
        .aggregate(*AGGREGATES)
        .suppress(suppressed)
        .to("out")
    )


def run(rt, p, index, batch=None):
    seq = sum(len(b) for b in BATCHES[:index])
    return rt.run_batch(p, IDS[index], frame(rt.spark, batch or BATCHES[index], seq))


def snapshot(rt, p):
    """Every table of the pipeline, read by name, minus what legitimately differs between runs
    (wall-clock times, attempt ids and the table versions they made): distinct rows, sorted."""
    return {name: sorted(set(rows)) for name, rows in rows_of(snapshot_frames(rt, p)).items()}


def snapshot_frames(rt, p):
    """The frames ``snapshot`` reads (the tables that exist)."""
    spark, t = rt.spark, rt.tables(p)
    volatile = ["attempt", "at", "state_version", "records_version", "output_version", "buffer_version"]
    frames = {
        "output": bookkeeping_frame(spark, t.output),
        "late": bookkeeping.read_late(spark, t.root),
        "metrics": _drop(bookkeeping.read_metrics(spark, t.root), "batch_duration_ms"),
        "ledger": _drop(bookkeeping.read_ledger(spark, t.root), *volatile, "output_base", "metrics"),
        "state": state.windows(spark, t.state, tables.latest_version(spark, t.state) or -1),
    }
    if p.emission.buffered:
        frames["buffer"] = bookkeeping_frame(spark, buffer_path(t, p))
    return {name: df for name, df in frames.items() if df is not None}


def bookkeeping_frame(spark, path):
    return tables.read(spark, path) if tables.exists(spark, path) else None


def _drop(df, *columns):
    return None if df is None else df.drop(*columns)


@pytest.mark.parametrize(
    "windows, suppressed",
    [
        (TimeWindows.of_size_and_grace(10, 2), Suppressed.until_window_closes(BufferConfig.unbounded())),
        (SlidingWindows.of_time_difference_and_grace(10, 2), Suppressed.until_window_closes(BufferConfig.unbounded())),
        (TimeWindows.of_size_and_grace(10, 2), RATE_LIMITED),
    ],
    ids=["tumbling", "sliding", "rate_limited"],
)
def test_crash_at_every_write_boundary_then_rerun_equals_a_clean_run(spark, warehouse, windows, suppressed):
    """Batch b0 runs once; each run starts from a copy of its warehouse (a Delta table copied
    with its log is the same table), then b1 either runs cleanly or crashes before one write
    and is re-run, then b2 runs."""
    p = pipeline("crash", windows, suppressed)
    run(Runtime(spark, f"{warehouse}/b0", quality=False), p, 0)

    def from_b0(label, before_write=None):
        shutil.copytree(f"{warehouse}/b0", f"{warehouse}/{label}")
        return Runtime(spark.newSession(), f"{warehouse}/{label}", quality=False, before_write=before_write)

    def clean():
        rt = from_b0("clean")
        run(rt, p, 1)
        run(rt, p, 2)
        return snapshot(rt, p)

    def crash_at(point):
        def fail(at):
            if at == point:
                raise Crash(point)

        with pytest.raises(Crash):
            run(from_b0(point, fail), p, 1)
        rt = Runtime(spark.newSession(), f"{warehouse}/{point}", quality=False)
        assert run(rt, p, 1).status == ("already committed" if point == "publish" else "committed")
        run(rt, p, 2)
        return point, snapshot(rt, p)

    outcomes = in_parallel([clean] + [lambda pt=pt: crash_at(pt) for pt in WRITE_POINTS])
    reference, crashed = outcomes[0], dict(outcomes[1:])
    assert reference["output"] and reference["late"]  # every write point was exercised
    assert ("buffer" in reference) == p.emission.buffered
    for point, after in crashed.items():
        assert after == reference, f"crash before {point!r} write"


def test_input_of_another_session_of_the_same_spark_commits_as_its_own_would(spark, tmp_path):
    """A runtime on one session given input built in another (two replays started in threads
    of the soak did this; so may a job with a session per source): its batches and a replay of
    them commit what the input's own session commits. The MERGEs that write window state and a
    MERGEd sink take their source across sessions, whose temporary views the others do not see."""
    emit_on_update = (
        Pipeline("other_session_upd", timestamp="ts", arrival="seq")
        .group_by("k")
        .windowed_by(TimeWindows.of_size_and_grace(10, 2))
        .aggregate(*AGGREGATES)
        .to("out")
    )
    own, other = (
        Runtime(s, str(tmp_path / name), quality=False) for s, name in ((spark, "own"), (spark.newSession(), "other"))
    )
    offsets = [sum(len(b) for b in BATCHES[:i]) for i in range(len(BATCHES))]
    fixed = [*BATCHES[:1], [(k, ts, v + 100) for k, ts, v in BATCHES[1]], *BATCHES[2:]]
    sliding = pipeline("other_session_sliding", windows=SlidingWindows.of_time_difference_and_grace(10, 2))
    for p in (sliding, emit_on_update):
        for index, batch in enumerate(BATCHES):
            for rt in (own, other):
                rt.run_batch(p, IDS[index], frame(spark, batch, offsets[index]))  # always the first session's input
        for rt in (own, other):
            rt.replay(p, [ReplayBatch(IDS[i], frame(spark, fixed[i], offsets[i])) for i in (1, 2)])
        assert snapshot(other, p) == snapshot(own, p)


def test_rerun_of_a_committed_batch_is_a_reported_noop(spark, warehouse):
    rt, p = Runtime(spark, warehouse, quality=False), pipeline("rerun")
    run(rt, p, 0)
    run(rt, p, 1)
    before = results(rt, p)
    again = run(rt, p, 1)
    assert again.status == "already committed" and again.seq == 2
    assert results(rt, p) == before
    assert rt.read_ledger(p).filter("status = 'committed'").count() == 2


def test_ledger_rows_a_runtime_knows_are_not_trusted_for_a_ledger_created_again(spark, warehouse):
    """A runtime keeps the ledger rows it wrote (by version) to skip reading them back; a ledger
    deleted and created again by another runtime reaches the same version with other rows."""
    p = pipeline("recreated")
    first, second = Runtime(spark, warehouse, quality=False), Runtime(spark, warehouse, quality=False)
    run(first, p, 0)
    shutil.rmtree(first.tables(p).root)
    run(second, p, 1)
    assert tables.latest_version(spark, first.tables(p).state) == 1  # the version `first` knows
    again = run(first, p, 1)
    assert (again.status, again.seq) == ("already committed", 1)


def test_a_runtime_learns_the_fence_from_the_ledger_rows(spark, warehouse):
    """Each commit point's ledger row records the transaction version it was made with, so a
    runtime reading a ledger for the first time (as every DAG run does) takes the fence from the
    rows: no Spark job rebuilds the table's state to answer Delta's ``transactions``."""
    p = pipeline("fence")
    run(Runtime(spark, warehouse, quality=False), p, 0)
    sc, fresh = spark.sparkContext, Runtime(spark, warehouse, quality=False)
    sc.setJobGroup("fence", "a fresh runtime's batch")
    try:
        fresh.run_batch(p, "b1", frame(spark, [("B", 13, 1)], 3))  # closes no window: the sink is not read
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
    ids, jobs = set(sc.statusTracker().getJobIdsForGroup("fence")), spark._jsc.sc().statusStore().jobsList(None)
    names = [j.name() for j in (jobs.apply(i) for i in range(jobs.size())) if j.jobId() in ids]
    assert names and not [n for n in names if n.startswith("transactions")], names
    assert [(r.seq, r.fence) for r in fresh.read_ledger(p).orderBy("seq").collect()] == [(1, 1), (2, 2)]


def test_batches_must_run_in_order(spark, warehouse):
    rt, p = Runtime(spark, warehouse, quality=False), pipeline("order")
    run(rt, p, 1)
    with pytest.raises(BatchOrderError, match=r"'order'.*'b0'.*out of order.*'b1'"):
        run(rt, p, 0)


def test_same_batch_id_with_different_input_fails_loudly(spark, warehouse):
    rt, p = Runtime(spark, warehouse, quality=False), pipeline("fingerprint")
    run(rt, p, 0)
    with pytest.raises(FingerprintMismatchError, match=r"'fingerprint'.*'b0'.*different input"):
        run(rt, p, 0, batch=[("A", 1, 1)])


def test_incompatible_definition_change_is_refused(spark, warehouse):
    rt = Runtime(spark, warehouse, quality=False)
    run(rt, pipeline("redefined"), 0)
    changed = pipeline("redefined", TimeWindows.of_size_and_grace(10, 5))
    with pytest.raises(DefinitionError, match="changed incompatibly"):
        run(rt, changed, 1)


def test_a_changed_state_bucket_is_refused_before_anything_is_written(spark, warehouse):
    """Window state is partitioned by close-time bucket (``Runtime(bucket=...)``). A runtime
    with another width would read the stored partitions as due or not by the wrong numbers: a
    window's partials in the old buckets would be left out of its final row. Refused, loudly."""
    import datetime as dt

    p = pipeline("rebucketed")
    run(Runtime(spark, warehouse, quality=False, bucket=dt.timedelta(milliseconds=10)), p, 0)
    wider = Runtime(spark, warehouse, quality=False, bucket=dt.timedelta(milliseconds=100))
    with pytest.raises(DefinitionError, match=r"'rebucketed'.*'b1'.*bucket.*0:00:00.010000.*0:00:00.100000"):
        run(wider, p, 1)
    assert [r.batch_id for r in wider.read_ledger(p).collect()] == ["b0"]
    same = Runtime(spark, warehouse, quality=False, bucket=dt.timedelta(milliseconds=10))
    run(same, p, 1)
    run(same, p, 2)
    clean = Runtime(spark, f"{warehouse}-clean", quality=False, bucket=dt.timedelta(milliseconds=10))
    for i in range(3):
        run(clean, p, i)
    assert results(same, p) == results(clean, p)


def test_empty_batch_commits_and_advances_nothing(spark, warehouse):
    rt, p = Runtime(spark, warehouse, quality=False), pipeline("empty")
    first = run(rt, p, 0)
    empty = rt.run_batch(p, "b1", frame(spark, [], 3).limit(0))
    assert empty.status == "committed" and empty.stream_time == first.stream_time and empty.emitted == 0


def test_two_runners_of_one_batch_at_once_commit_it_once(spark, warehouse):
    """Both runners plan and write together (separate Spark sessions, as two workers would be)
    and reach the commit point at once: one commits, the other stops with ConcurrentBatchError."""
    p = pipeline("racing")
    run(Runtime(spark, warehouse, quality=False), p, 0)
    gate = threading.Barrier(2)

    def meet():
        try:
            gate.wait(300)
        except threading.BrokenBarrierError:  # the other runner stopped before its commit point
            pass

    def runner():
        rt = Runtime(
            spark.newSession(), warehouse, quality=False, before_write=lambda at: at == "commit_point" and meet()
        )
        try:
            return run(rt, p, 1).status
        except ConcurrentBatchError as e:
            assert "'racing'" in str(e) and "'b1'" in str(e)
            return "refused"
        finally:
            gate.abort()

    outcomes = sorted(in_parallel([runner, runner]))
    assert outcomes == ["committed", "refused"]
    rt = Runtime(spark, warehouse, quality=False)
    ledger = rt.read_ledger(p).filter("status = 'committed'")
    assert sorted(r.seq for r in ledger.collect()) == [1, 2]

    clean = pipeline("calm")
    for i in range(2):
        run(rt, clean, i)
    assert results(rt, p) == results(rt, clean)


# The race of ``test_a_delta_conflict_is_a_lost_race_by_its_class``, in a JVM of its own: the
# first writer's task waits in a UDF while the second writer's job runs, so it needs two task
# slots, and the test workers' sessions have one (tests/conftest.py).
CONFLICT = """
import sys, time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import delta.exceptions
import pytest
from py4j.protocol import Py4JJavaError
from pyspark.errors import AnalysisException
from pyspark.errors.exceptions import captured
from pyspark.sql import functions as F

from framework import spark_session
from framework.storage.writes import lost_race

spark = spark_session("conflict", master="local[2]", conf={"spark.sql.shuffle.partitions": "2"})
tmp_path = Path(sys.argv[1])
path, started, landed = str(tmp_path / "t"), tmp_path / "started", tmp_path / "landed"
spark.createDataFrame([(1, 0)], "p int, v int").write.format("delta").partitionBy("p").save(path)

@F.udf("int")
def held(v):
    started.touch()
    for _ in range(1200):  # at most two minutes
        if landed.exists():
            break
        time.sleep(0.1)
    return v

def replace_partition(rows):
    rows.write.format("delta").mode("overwrite").option("replaceWhere", "p = 1").save(path)

with ThreadPoolExecutor(1) as pool:
    first = spark.createDataFrame([(1, 1)], "p int, v int").select("p", held("v").alias("v"))
    replacing = pool.submit(replace_partition, first)  # its transaction read the table before its record
    for _ in range(1200):
        if started.exists() or replacing.done():
            break
        time.sleep(0.1)
    replace_partition(spark.createDataFrame([(1, 2)], "p int, v int"))
    landed.touch()
    error = replacing.exception(300)
# delta-spark 4.4 converts Delta's conflicts as PySpark raises them (delta.exceptions); before,
# they came as a Py4JJavaError, converted only where asked. lost_race takes both by class.
if isinstance(error, Py4JJavaError):
    assert error.java_exception.getClass().getName() == "io.delta.exceptions.ConcurrentAppendException"
    unconverted = captured.convert_exception
    try:  # importing delta's converter makes PySpark convert Delta's conflicts from then on: undone below
        from delta.exceptions.captured import _convert_delta_exception

        converted = _convert_delta_exception(error.java_exception)
    finally:
        captured.convert_exception = unconverted
    assert isinstance(converted, delta.exceptions.ConcurrentAppendException) and lost_race(converted)
else:
    assert isinstance(error, delta.exceptions.ConcurrentAppendException), error
assert lost_race(error)

with pytest.raises(AnalysisException) as retyped:  # a write refused for its schema
    spark.createDataFrame([("x", 1)], "p string, v int").write.format("delta").mode("append").save(path)
with pytest.raises(Py4JJavaError) as unrelated:
    spark._jvm.java.util.ArrayList().get(0)
assert not lost_race(retyped.value) and not lost_race(unrelated.value)
print("CHECKED", flush=True)
"""


def test_a_delta_conflict_is_a_lost_race_by_its_class(tmp_path):
    """What the runners above meet inside Delta: two writers replace one partition, the second
    committing while the first still writes (its record waits in a UDF until then), so the
    first's commit conflicts. ``lost_race`` takes that for a lost race by its class, as PySpark
    hands it over (a Py4JJavaError) and as delta-spark's converter makes it (``delta.exceptions``);
    other errors are not. The checks run in the child (``CONFLICT``); it prints CHECKED after the last."""
    done = subprocess.run([sys.executable, "-c", CONFLICT, str(tmp_path)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and "CHECKED" in done.stdout, done.stderr[-3000:]
