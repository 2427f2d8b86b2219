"""Exactly once as operators run it (docs/design.md#crashes-and-re-runs): overlapping attempts of one
batch, other
writers' commits between or during attempts, a failed gate or bad input followed by corrected
input (two replays at once: test_replay). Each case ends with the tables of a clean run, or
with a clean error and nothing that needs editing by hand."""

import json
import threading
from pathlib import Path

import pytest
from harness import frame
from pyspark.sql import functions as F
from test_exactly_once import BATCHES, Crash, pipeline, run, snapshot

from framework import (
    BatchFailedError,
    BatchOrderError,
    BufferConfig,
    ConcurrentBatchError,
    Pipeline,
    PublicationError,
    QualityGateError,
    Runtime,
    Suppressed,
    TimeWindows,
    agg,
)
from framework.storage import tables

FIXED_B1 = [("A", 25, 40), ("A", 3, 5), ("B", 14, 6), ("B", 31, 7)]  # b1 with A@25 corrected: 4 -> 40


def _offset(index):
    return sum(len(b) for b in BATCHES[:index])


_CLEAN = {}
# The pipeline of the tests that compare with a clean run: one name, so that the clean runs of
# the same input are one run (``_clean``), not one per test.
SHARED = "ops"


def _clean(spark, tmp_path_factory, p, batches=BATCHES):
    """The tables of a clean run of ``batches`` (run once per pipeline name and input)."""
    key = (p.name, repr(batches))
    if key not in _CLEAN:
        rt = Runtime(spark.newSession(), str(tmp_path_factory.mktemp("clean")), quality=False)
        for i, batch in enumerate(batches):
            run(rt, p, i, batch)
        _CLEAN[key] = snapshot(rt, p)
    return _CLEAN[key]


def _committed(rt, p):
    return [(r.seq, r.batch_id) for r in rt.read_ledger(p).filter("status = 'committed'").orderBy("seq").collect()]


class _Paused:
    """A ``before_write`` hook that stops its attempt at ``point`` until released."""

    def __init__(self, point):
        self.point, self.reached, self.go = point, threading.Event(), threading.Event()

    def __call__(self, at):
        if at == self.point and not self.reached.is_set():
            self.reached.set()
            assert self.go.wait(300)


def _in_thread(work):
    """Start ``work`` in a thread; the returned callable joins it and gives its outcome or error."""
    outcome = {}

    def target():
        try:
            outcome["value"] = work()
        except BaseException as e:  # noqa: BLE001 - handed to the test
            outcome["error"] = e

    thread = threading.Thread(target=target)
    thread.start()

    def join():
        thread.join(600)
        return outcome

    return join


def _maintain(spark, path, vacuum=True):
    """What an operator (docs/operations.md) does to a table: properties, compaction, VACUUM within retention."""
    spark.conf.set("spark.sql.sources.parallelPartitionDiscovery.parallelism", "2")  # VACUUM's listing tasks
    spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('delta.logRetentionDuration' = 'interval 60 days')")
    spark.sql(f"OPTIMIZE delta.`{path}`")
    if vacuum:
        spark.sql(f"VACUUM delta.`{path}` RETAIN 168 HOURS")


def _tables(rt, p):
    t = rt.tables(p)
    return [path for path in (t.state, t.output) if tables.exists(rt.spark, path)]


# ---- 1. a failed quality gate, then corrected input -------------------------------------------
def test_a_batch_failing_its_gate_reruns_with_corrected_input_and_holds_off_the_next(spark, tmp_path):
    suites = tmp_path / "suites"
    suites.mkdir()
    (suites / "gated.json").write_text(
        json.dumps(
            {
                "name": "gated",
                "expectations": [
                    {
                        "type": "expect_column_values_to_be_between",
                        "kwargs": {"column": "total", "max_value": 100},
                        "meta": {"severity": "critical"},
                    }
                ],
            }
        )
    )
    p = (
        Pipeline("gated", timestamp="ts", arrival="seq")
        .group_by("k")
        .windowed_by(TimeWindows.of_size_and_grace(10, 0))
        .aggregate(agg.sum("v", "total"))
        .suppress(Suppressed.until_window_closes(BufferConfig.unbounded()))
        .to("out")
    )
    rt = Runtime(spark, str(tmp_path / "lake"), expectations=str(suites))
    bad, good = [("A", 1, 1), ("A", 2, 500), ("A", 30, 1)], [("A", 1, 1), ("A", 2, 5), ("A", 30, 1)]
    with pytest.raises(QualityGateError, match="Fix the input or the suite"):
        rt.run_batch(p, "b0", frame(spark, bad))
    with pytest.raises(BatchOrderError, match=r"batch 'b0' \(seq 1\) was attempted and has not committed"):
        rt.run_batch(p, "b1", frame(spark, [("A", 40, 1)], 3))  # b0's records would be skipped
    assert rt.run_batch(p, "b0", frame(spark, good)).status == "committed"
    assert [(r.k, r.total) for r in rt.read_output(p).collect()] == [("A", 6)]
    assert rt.run_batch(p, "b1", frame(spark, [("A", 40, 1)], 3)).seq == 2
    assert _committed(rt, p) == [(1, "b0"), (2, "b1")]


# ---- 2. a retry beside a live first attempt ---------------------------------------------------
@pytest.mark.parametrize("paused_at, retry_input", [("commit_point", "same"), ("buffer", "corrected")])
def test_a_retry_beside_a_live_first_attempt_writes_the_batch_once(
    spark, warehouse, tmp_path_factory, paused_at, retry_input
):
    """The first attempt stops before ``paused_at`` (a zombie); the retry runs the batch to its
    end; then the zombie goes on: it finds itself fenced out, and the tables are one attempt's."""
    p = pipeline(SHARED)
    retry_batch = FIXED_B1 if retry_input == "corrected" else BATCHES[1]
    shared = f"{warehouse}/shared"
    run(Runtime(spark, shared, quality=False), p, 0)
    zombie = _Paused(paused_at)
    first = _in_thread(lambda: run(Runtime(spark.newSession(), shared, quality=False, before_write=zombie), p, 1))
    assert zombie.reached.wait(300)
    rt = Runtime(spark.newSession(), shared, quality=False)
    assert run(rt, p, 1, retry_batch).status == "committed"
    zombie.go.set()
    outcome = first()
    assert isinstance(outcome.get("error"), ConcurrentBatchError), outcome
    assert f"'{SHARED}', batch 'b1'" in str(outcome["error"])
    run(rt, p, 2)
    assert _committed(rt, p) == [(1, "b0"), (2, "b1"), (3, "b2")]
    assert snapshot(rt, p) == _clean(spark, tmp_path_factory, p, [BATCHES[0], retry_batch, BATCHES[2]])


# ---- 3. other writers between a crash and its re-run, and during a batch ----------------------
@pytest.mark.parametrize("crash_at", ["commit_point", "publish"])
def test_maintenance_between_a_crash_and_the_rerun_changes_nothing(spark, warehouse, tmp_path_factory, crash_at):
    p = pipeline(SHARED)
    lake = f"{warehouse}/lake"
    run(Runtime(spark, lake, quality=False), p, 0)

    def crash(at):
        if at == crash_at:
            raise Crash(at)

    with pytest.raises(Crash):
        run(Runtime(spark, lake, quality=False, before_write=crash), p, 1)
    rt = Runtime(spark.newSession(), lake, quality=False)
    for path in _tables(rt, p):
        _maintain(rt.spark, path)
    assert run(rt, p, 1).status == ("already committed" if crash_at == "publish" else "committed")
    run(rt, p, 2)
    assert snapshot(rt, p) == _clean(spark, tmp_path_factory, p)
    assert rt.read_metrics(p).groupBy("seq").count().filter("count > 1").count() == 0


def test_maintenance_during_a_batch_changes_nothing(spark, warehouse, tmp_path_factory):
    """Properties and compaction land on every table while b1 plans, writes and commits."""
    p = pipeline(SHARED)
    lake = f"{warehouse}/lake"
    run(Runtime(spark, lake, quality=False), p, 0)
    other = spark.newSession()

    def meanwhile(at):
        if at in ("buffer", "commit_point", "publish"):
            for path in _tables(Runtime(other, lake, quality=False), p):
                _maintain(other, path, vacuum=at == "publish")

    rt = Runtime(spark.newSession(), lake, quality=False, before_write=meanwhile)
    assert run(rt, p, 1).status == "committed"
    run(rt, p, 2)
    assert snapshot(rt, p) == _clean(spark, tmp_path_factory, p)


# ---- 5. input that fails deep in Spark, after validation --------------------------------------
def test_an_overflow_found_while_planning_fails_cleanly_and_corrected_input_runs(spark, warehouse):
    p = (
        Pipeline("overflow", timestamp="ts", arrival="seq")
        .group_by("k")
        .windowed_by(TimeWindows.of_size_and_grace(10, 0))
        .aggregate(agg.sum("v", "total"))
        .suppress(Suppressed.until_window_closes(BufferConfig.unbounded()))
        .to("out")
    )
    rt = Runtime(spark, warehouse, quality=False)
    huge = 2**62
    with pytest.raises(BatchFailedError, match=r"pipeline 'overflow', batch 'b0': failed while .*overflow"):
        rt.run_batch(p, "b0", frame(spark, [("A", 1, huge), ("A", 2, huge), ("A", 30, 1)]))
    assert rt.run_batch(p, "b0", frame(spark, [("A", 1, 1), ("A", 2, 2), ("A", 30, 1)])).status == "committed"
    assert [(r.k, r.total) for r in rt.read_output(p).collect()] == [("A", 3)]


def test_spark_failing_while_a_rerun_s_input_is_checked_is_named_so(spark, warehouse):
    """A committed batch id run again with input that fails in Spark while it is read (here when
    its fingerprint is computed, in the check against the ledger row): the error names that
    check and says the batch stands committed, not that a publication failed (as it did when
    errors were told apart by the text of their step)."""
    p = (
        Pipeline("rerun_check", timestamp="ts", arrival="seq", lateness="batch")
        .group_by("k")
        .windowed_by(TimeWindows.of_size_and_grace(10, 0))
        .aggregate(agg.sum("v", "total"))
        .suppress(Suppressed.until_window_closes(BufferConfig.unbounded()))
        .to("out")
    )
    rt, batch = Runtime(spark, warehouse, quality=False), [("A", 1, 1), ("A", 30, 2)]
    assert rt.run_batch(p, "b0", frame(spark, batch)).status == "committed"
    failing = frame(spark, batch).withColumn(
        "v", F.when(F.col("v") > 1, F.raise_error(F.lit("boom"))).otherwise(F.col("v"))
    )
    with pytest.raises(BatchFailedError) as failure:
        rt.run_batch(p, "b0", failing)
    message = str(failure.value)
    assert "failed while checking the input against committed batch 'b0' (seq 1)" in message, message
    assert "committed already; nothing was written" in message and "stay staged" not in message, message
    assert rt.run_batch(p, "b0", frame(spark, batch)).status == "already committed"


def test_a_crashed_attempt_reruns_with_corrected_input(spark, warehouse, tmp_path_factory):
    """A batch that died after writing its state, before its commit point, is not pinned to its
    first input: the corrected input runs as if the first attempt had never been."""
    p = pipeline(SHARED)
    lake = f"{warehouse}/lake"
    run(Runtime(spark, lake, quality=False), p, 0)

    def crash(at):
        if at == "commit_point":
            raise Crash(at)

    with pytest.raises(Crash):
        run(Runtime(spark, lake, quality=False, before_write=crash), p, 1)
    rt = Runtime(spark.newSession(), lake, quality=False)
    assert run(rt, p, 1, FIXED_B1).status == "committed"
    run(rt, p, 2)
    assert snapshot(rt, p) == _clean(spark, tmp_path_factory, p, [BATCHES[0], FIXED_B1, BATCHES[2]])


def test_a_maintenance_commit_between_two_attempts_reads_lets_only_one_commit(spark, warehouse, tmp_path_factory):
    """Attempt 1 reads the ledger; OPTIMIZE and a property land on it; attempt 2 reads it (a
    later version, the same batches); attempt 1 commits, then attempt 2 tries: it is fenced out."""
    p = pipeline(SHARED)
    lake = f"{warehouse}/lake"
    run(Runtime(spark, lake, quality=False), p, 0)
    first_paused, second_paused = _Paused("commit_point"), _Paused("commit_point")
    first = _in_thread(lambda: run(Runtime(spark.newSession(), lake, quality=False, before_write=first_paused), p, 1))
    assert first_paused.reached.wait(300)
    rt = Runtime(spark.newSession(), lake, quality=False)
    _maintain(rt.spark, rt.tables(p).state, vacuum=False)
    second = _in_thread(
        lambda: run(Runtime(spark.newSession(), lake, quality=False, before_write=second_paused), p, 1, FIXED_B1)
    )
    assert second_paused.reached.wait(300)
    first_paused.go.set()
    assert first().get("value").status == "committed"
    second_paused.go.set()
    assert isinstance(second().get("error"), ConcurrentBatchError)
    assert _committed(rt, p) == [(1, "b0"), (2, "b1")]
    run(rt, p, 2)
    assert snapshot(rt, p) == _clean(spark, tmp_path_factory, p)


# ---- 6. maintenance during publication --------------------------------------------------------
class _SlotsHeld:
    """Every task slot of the local Spark held by a job whose tasks wait for a file, so jobs
    submitted meanwhile queue: a Delta write that has read its snapshot waits before writing
    its files, and a commit made meanwhile lands between its snapshot and its commit."""

    def __init__(self, spark, folder):
        self.sc, self.release_file = spark.sparkContext, str(folder / "release")
        self.holding, self.mine = None, set()

    def hold(self):
        sc, release, slots = self.sc, self.release_file, self.sc.defaultParallelism

        def wait(_):
            import os
            import time

            deadline = time.monotonic() + 300
            while not os.path.exists(release) and time.monotonic() < deadline:
                time.sleep(0.05)
            return []

        self.holding = _in_thread(lambda: sc.parallelize(range(slots), slots).mapPartitions(wait).count())
        tracker = self.sc.statusTracker()
        while not any(
            getattr(tracker.getStageInfo(s), "numActiveTasks", 0) == slots for s in tracker.getActiveStageIds()
        ):
            threading.Event().wait(0.05)
        self.mine = set(tracker.getActiveJobsIds())

    def others_queued(self):
        """Wait until a job other than the holding one is submitted."""
        tracker = self.sc.statusTracker()
        while not set(tracker.getActiveJobsIds()) - self.mine:
            threading.Event().wait(0.05)

    def release(self):
        open(self.release_file, "w").close()
        return self.holding()


def test_maintenance_during_publication_is_retried_past(spark, warehouse, tmp_path):
    """Table properties change on the results table after b1's publication read its snapshot
    and before it commits: b1 committed, so publication goes on (each
    table once) instead of failing as if the batch had not committed."""
    p = pipeline("published")
    lake = f"{warehouse}/lake"
    run(Runtime(spark, lake, quality=False), p, 0)
    other, held, watched = spark.newSession(), _SlotsHeld(spark, tmp_path), {}

    def set_properties_meanwhile():
        held.others_queued()  # publication has started its commits
        t = Runtime(other, lake, quality=False).tables(p)
        for path in (t.output,):
            if tables.exists(other, path):
                other.sql(
                    f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('delta.logRetentionDuration' = 'interval 60 days')"
                )
        return held.release()

    def meanwhile(at):
        if at == "publish":
            held.hold()
            watched["join"] = _in_thread(set_properties_meanwhile)

    rt = Runtime(spark.newSession(), lake, quality=False, before_write=meanwhile)
    result = run(rt, p, 1)
    assert result.status == "committed"
    assert "error" not in watched["join"](), watched
    t = rt.tables(p)
    assert [r.seq for r in rt.read_metrics(p).orderBy("seq").collect()] == [1, 2]
    assert sorted((r.k, r.seq) for r in rt.read_late(p).collect()) == [("A", 2), ("B", 2)]
    assert rt.read_output(p).filter("emitted_batch_id = 'b1'").count() == result.emitted >= 1
    for path in (t.output,):
        history = rt.spark.sql(f"DESCRIBE HISTORY delta.`{path}`").orderBy("version").collect()
        assert [h.operation for h in history][-2:] == ["SET TBLPROPERTIES", "WRITE"]  # it landed in between


def test_an_error_after_the_commit_point_says_the_batch_is_committed(spark, warehouse):
    """b1's publication fails (a damaged results log) after its commit point: the error says b1
    is committed and will be published; once the log is repaired, the re-run publishes it."""
    p = pipeline("unpublished")
    lake = f"{warehouse}/lake"
    run(Runtime(spark, lake, quality=False), p, 0)
    log = Path(Runtime(spark, lake).tables(p).output) / "_delta_log"
    damaged = log / f"{int(max(log.glob('*.json')).stem) + 1:020d}.json"

    def damage(at):
        if at == "publish":
            damaged.write_text("{ this is not a Delta commit")

    with pytest.raises(PublicationError) as failure:
        run(Runtime(spark, lake, quality=False, before_write=damage), p, 1)
    assert "pipeline 'unpublished', batch 'b1': publishing the batch stopped" in str(failure.value)
    assert "The batch IS committed (seq 2); its rows stay staged and the next run" in str(failure.value)
    damaged.unlink()
    spark._jvm.org.apache.spark.sql.delta.DeltaLog.clearCache()
    rt = Runtime(spark, lake, quality=False)
    assert run(rt, p, 1).status == "already committed"
    assert [r.seq for r in rt.read_metrics(p).orderBy("seq").collect()] == [1, 2]
    assert rt.read_output(p).filter("emitted_batch_id = 'b1'").count() >= 1
