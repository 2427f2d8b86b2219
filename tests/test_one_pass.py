"""One pass over the input of a batch of time windows judged per batch (lateness="batch"): the
input's validation, the plan's partials, its counters and its late records come from one read of
the records (docs/design.md#one-pass). What that pass counts and keeps must equal what separate
reads of the input count and keep, also when Spark counted a task's records twice. The frames a
batch keeps for its later reads leave no ERROR in the driver's log."""

import gc

import pytest
from harness import frame, results
from pyspark.sql import functions as F

from framework import BufferConfig, InputError, Pipeline, Runtime, Suppressed, TimeWindows, agg
from framework.operations import attempt, planning
from framework.operations.planning import Kept
from framework.storage import classic


def _pipeline(name, bad_records="quarantine"):
    return (
        Pipeline(name, timestamp="ts", arrival="seq", lateness="batch", bad_records=bad_records)
        .group_by("k")
        .windowed_by(TimeWindows.of_size_and_grace(10, 2).advance_by(5))
        .aggregate(agg.count("n"), agg.sum("v", "total"))
        .suppress(Suppressed.until_window_closes(BufferConfig.unbounded()))
        .to("out")
    )


def _batches(spark):
    """Three batches: late records (two identical ones among them), a record late for one of its
    two windows, a record with a null key (rejected), a window closing in each batch."""
    late = frame(spark, [("A", 2, 4)], 10)
    return [
        frame(spark, [("A", 1, 1), ("B", 3, 2), ("A", 12, 3), ("B", 14, 5)]),
        late.union(late).union(frame(spark, [("B", 8, 6), (None, 20, 7), ("A", 21, 8)], 11)),
        frame(spark, [("A", 3, 9), ("B", 40, 10)], 20),
    ]


def _outcome(spark, warehouse, name):
    """What a pipeline's batches counted, published and kept."""
    rt, p = Runtime(spark, warehouse, quality=False), _pipeline(name)
    ran = [rt.run_batch(p, f"b{i}", df) for i, df in enumerate(_batches(spark))]
    counted = [{k: v for k, v in r.metrics.items() if k != "batch_duration_ms"} for r in ran]
    ledger = sorted((r.seq, r.fingerprint, r.records_in) for r in rt.read_ledger(p).collect())
    late = sorted(tuple(r) for r in rt.read_late(p).drop("batch_id").collect())
    rejected = sorted((r.reason, r.record) for r in rt.read_rejected(p).collect())
    return counted, ledger, results(rt, p), late, rejected


def _spied(monkeypatch, change=lambda values: values):
    """Count the pass's observations (and change what they return)."""
    seen, observed = [], classic.observed

    def spy(obs):
        values = observed(obs)
        seen.append(values)
        return change(values) if values is not None else None

    monkeypatch.setattr(classic, "observed", spy)
    return seen


def test_one_pass_counts_and_keeps_what_separate_reads_do(spark, warehouse, monkeypatch):
    with monkeypatch.context() as m:
        seen = _spied(m)
        once = _outcome(spark, warehouse, "one_pass")
    assert len(seen) == 6 and all(v is not None for v in seen)  # three batches, two observations each
    with monkeypatch.context() as m:
        m.setattr(attempt, "reading_for", lambda s, p, checked: planning.SeparateReads(checked))
        apart = _outcome(spark, warehouse, "separate_reads")
    assert once == apart
    counted, _, _, late, rejected = once
    assert [c["late_records"] for c in counted] == [0, 2, 1] and len(late) == 3
    assert late[0] == late[1]  # the identical late records, kept twice
    assert [c["rejected_records_total"] for c in counted] == [0, 1, 0] and len(rejected) == 1


def test_a_pass_whose_records_were_counted_twice_is_counted_again(spark, warehouse, monkeypatch):
    """Spark runs a lost task again and its observed aggregates count twice: the batch finds the
    count unequal to the records its kept rows hold, and validates and counts in queries of their own."""
    twice = ("n", "h", "late_record_drop_total", "late_records")  # sums; the largest and smallest stay
    with monkeypatch.context() as m:
        _spied(m, lambda values: {k: v * 2 if k in twice and v else v for k, v in values.items()})
        doubled = _outcome(spark, warehouse, "counted_twice")
    assert doubled == _outcome(spark, warehouse, "counted_once")


def test_records_the_pass_finds_bad_refuse_the_batch_before_anything_is_written(spark, warehouse):
    """The pass reads before the batch's attempt is marked: a refused batch does not hold up
    the next batch id, as a batch refused by a separate read does not."""
    rt, p = Runtime(spark, warehouse, quality=False), _pipeline("refused", bad_records="refuse")
    bad = frame(spark, [("A", 1, 1), ("B", 2, 2)]).withColumn(
        "ts", F.when(F.col("k") == "B", None).otherwise(F.col("ts"))
    )
    with pytest.raises(
        InputError, match=r"'refused'.*'b0'.*1 record\(s\) have a null event time .*seq=1, k='B', ts=None"
    ):
        rt.run_batch(p, "b0", bad)
    assert rt.read_ledger(p).count() == 0
    assert rt.run_batch(p, "b1", frame(spark, [("A", 1, 1)])).status == "committed"


def test_the_plan_of_a_kept_frame_stays_until_the_batch_releases_it(spark):
    """A frame kept lazily (``Kept``) is checkpointed when the first job that reads it ends, and
    Spark then drops its lineage: the only hold on the metrics of the plan it was kept from,
    which Spark's registry holds weakly. In a batch's counts the broadcast of the stored windows
    ended while the scalar subquery of the same query still read them, and its tasks reported to
    the metrics of their Delta scan; once a garbage collection had dropped those, the driver
    logged "ERROR DAGScheduler: Failed to update accumulator N (Unknown class)" for each (40
    lines in 84 batches of the sample jobs). Here: the metrics are still there after that first
    job and a full collection, until the release."""
    registered = getattr(spark._jvm, "org.apache.spark.util.AccumulatorContext")
    kept = Kept()
    source = spark.range(0, 100, 1, 2).selectExpr("id % 5 AS k").groupBy("k").count()
    ids = _metric_ids(spark, source._jdf.queryExecution().executedPlan())
    checkpointed = kept(source)
    del source
    gc.collect()  # py4j lets go of the JVM objects of the Python ones collected
    assert checkpointed.count() == 5  # the first job that reads the frame: it is checkpointed as it ends
    spark._jvm.java.lang.System.gc()
    try:
        assert len(ids) > 10 and [i for i in ids if not registered.get(i).isDefined()] == []
    finally:
        kept.release()


def _metric_ids(spark, plan) -> list[int]:
    """The ids of the accumulators of every metric of a physical plan (``plan``, a JVM SparkPlan)."""
    todo, ids = [getattr(spark._jvm, "org.apache.spark.sql.execution.SparkPlanInfo").fromSparkPlan(plan)], []
    while todo:
        node = todo.pop()
        metrics, children = node.metrics(), node.children()
        ids += [metrics.apply(i).accumulatorId() for i in range(metrics.length())]
        todo += [children.apply(i) for i in range(children.length())]
    return ids
