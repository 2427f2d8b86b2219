"""Bad input: a clear error naming pipeline, batch and column, and nothing committed."""
import datetime as dt
from pathlib import Path

import pytest
from harness import frame, results
from pyspark.sql import functions as F

from framework import (
    BatchFailedError,
    BufferConfig,
    DefinitionError,
    FingerprintMismatchError,
    InputError,
    Pipeline,
    Runtime,
    Suppressed,
    TimeWindows,
    agg,
)


def _unsunk(name, suppressed=None):
    """The test pipeline up to, not including, ``.to(...)``."""
    return (Pipeline(name, timestamp="ts", arrival="seq").group_by("k")
            .windowed_by(TimeWindows.of_size_and_grace(10, 2)).aggregate(agg.count("n"), agg.sum("v", "total"))
            .suppress(suppressed or Suppressed.until_window_closes(BufferConfig.unbounded())))


def pipeline(name):
    return _unsunk(name).to("out")


def assert_nothing_committed(rt, p):
    assert rt.ledger(p).count() == 0


@pytest.mark.parametrize("case,make,pattern", [
    ("null_time", lambda s: frame(s, [("A", 1, 1)]).withColumn("ts", F.lit(None).cast("timestamp")),
     r"'null_time'.*'b0'.*null event time in column 'ts'"),
    ("bad_time", lambda s: frame(s, [("A", 1, 1)]).withColumn("ts", F.lit("not a time")),
     r"'bad_time'.*'b0'.*unparsable event time in column 'ts'.*not a time"),
    ("null_key", lambda s: frame(s, [("A", 1, 1)]).withColumn("k", F.lit(None).cast("string")),
     r"'null_key'.*'b0'.*null group key 'k'"),
    ("missing", lambda s: frame(s, [("A", 1, 1)]).drop("v"), r"'missing'.*'b0'.*no column 'v'"),
    ("reserved", lambda s: frame(s, [("A", 1, 1)]).withColumn("_part", F.lit(1)),
     r"'reserved'.*'b0'.*\['_part'\] start with '_', which is reserved"),
    ("pre_epoch", lambda s: frame(s, [("A", -5000, 1)]), r"'pre_epoch'.*'b0'.*before 1970"),
    ("future", lambda s: frame(s, [("A", 1, 1), ("A", 4_102_444_800_000, 1)]),   # 2100-01-01
     r"'future'.*'b0'.*1 record\(s\) have an event time .* after .*max_clock_skew.*2100-01-01"),
], ids=lambda x: x if isinstance(x, str) else "")
def test_bad_records_are_refused_before_anything_is_written(spark, warehouse, case, make, pattern):
    rt, p = Runtime(spark, warehouse, quality=False), pipeline(case)
    with pytest.raises(InputError, match=pattern):
        rt.run_batch(p, "b0", make(spark))
    assert_nothing_committed(rt, p)


def test_string_event_times_are_parsed(spark, warehouse):
    rt, p = Runtime(spark, warehouse, quality=False), pipeline("strings")
    df = frame(spark, [("A", 1, 1)]).withColumn("ts", F.lit("2026-01-01 00:00:00"))
    assert rt.run_batch(p, "b0", df).stream_time == dt.datetime(2026, 1, 1)


def _closed_window(n, total):
    """The one final row of key A's window [0, 10), closed by a record at 30 in batch b0."""
    return [{"k": "A", "n": n, "total": total, "emitted_batch_id": "b0",
             "window_start": 0, "window_end": 10, "emitted_stream_time": 30}]


def test_extra_columns_are_accepted_and_change_nothing(spark, warehouse):
    """Landing tables grow columns the pipeline does not read; they must not reach any result."""
    rt, p = Runtime(spark, warehouse, quality=False), pipeline("extra")
    df = frame(spark, [("A", 1, 1), ("A", 2, 2), ("A", 30, 3)]).withColumn("note", F.lit("x")).withColumn("n", F.lit(9))
    rt.run_batch(p, "b0", df)
    assert results(rt, p) == _closed_window(n=2, total=3)


def _with_complex_columns(df, tags):
    """``df`` plus extra columns of map, array and struct type (nested: a struct holding a map),
    the map built from ``tags`` in the order given."""
    tags_map = F.create_map(*[F.lit(x) for kv in tags for x in kv]).cast("map<string,bigint>")
    return (df.withColumn("tags", tags_map)
            .withColumn("labels", F.array(F.lit("a"), F.col("k")))
            .withColumn("meta", F.struct(F.col("seq").alias("id"), F.lit("src").alias("origin"),
                                         tags_map.alias("inner"))))


def test_extra_columns_of_map_array_and_struct_type_are_accepted_and_change_nothing(spark, warehouse):
    """Complex extra columns reach neither the results nor a hash Spark refuses: the input
    fingerprint stays the same for the same content (whatever order a map was built in) and
    changes when a map's content does."""
    rt, p = Runtime(spark, warehouse, quality=False), pipeline("extra_complex")
    plain = frame(spark, [("A", 1, 1), ("A", 2, 2), ("A", 30, 3)])
    df = _with_complex_columns(plain, [("x", 1), ("y", 2)])
    assert {f.name: f.dataType.simpleString() for f in df.schema.fields if f.name in ("tags", "labels", "meta")} == {
        "tags": "map<string,bigint>", "labels": "array<string>",
        "meta": "struct<id:bigint,origin:string,inner:map<string,bigint>>"}
    assert rt.run_batch(p, "b0", df).status == "committed"
    assert results(rt, p) == _closed_window(n=2, total=3)
    same = _with_complex_columns(plain, [("y", 2), ("x", 1)])   # same entries, built in another order
    assert rt.run_batch(p, "b0", same).status == "already committed"
    with pytest.raises(FingerprintMismatchError, match=r"'extra_complex'.*'b0'"):
        rt.run_batch(p, "b0", _with_complex_columns(plain, [("x", 1), ("y", 3)]))
    assert rt.ledger(p).filter("status = 'committed'").count() == 1
    assert results(rt, p) == _closed_window(n=2, total=3)


def test_duplicate_records_are_processed_as_records(spark, warehouse):
    """Dedup is the user's choice (SPEC 4): two identical records count twice."""
    rt, p = Runtime(spark, warehouse, quality=False), pipeline("duplicates")
    twice = frame(spark, [("A", 1, 5)]).union(frame(spark, [("A", 1, 5)]))
    rt.run_batch(p, "b0", twice.union(frame(spark, [("A", 30, 0)], 1)))
    assert results(rt, p) == _closed_window(n=2, total=10)


def test_retyped_column_is_schema_drift(spark, warehouse):
    rt, p = Runtime(spark, warehouse, quality=False), pipeline("drift")
    rt.run_batch(p, "b0", frame(spark, [("A", 1, 1)]))
    retyped = frame(spark, [("A", 2, 1)], 1).withColumn("v", F.col("v").cast("double"))
    with pytest.raises(InputError, match=r"'drift'.*'b1'.*column 'v' was bigint.*double now"):
        rt.run_batch(p, "b1", retyped)
    assert rt.ledger(p).filter("batch_id = 'b1'").count() == 0


@pytest.mark.parametrize("build,pattern", [
    (lambda: Pipeline("bad name!"), r"pipeline name must match"),
    (lambda: Pipeline("p").group_by("k; DROP TABLE x"), r"group_by key must match"),
    (lambda: Pipeline("p").group_by("k").aggregate(), r"aggregate\(\) takes one or more"),
    (lambda: Pipeline("p").group_by("k").windowed_by(TimeWindows.of_size_and_grace(10, 1))
     .aggregate(agg.count()).suppress(Suppressed.until_window_closes(BufferConfig.max_records(5))),
     r"needs a strict buffer.*shut_down_when_full"),
    (lambda: Pipeline("p").group_by("k").aggregate(agg.count())
     .suppress(Suppressed.until_window_closes(BufferConfig.unbounded())), r"needs a windowed aggregation"),
    (lambda: TimeWindows.of_size_and_grace(10, 1).advance_by(20), r"'advance' must be in"),
    (lambda: Pipeline("p").group_by("k").aggregate(agg.count("k")), r"clash"),
    # names that would collide (compared ignoring case, as Spark, Delta and some stores do)
    *[(lambda sink=sink: _unsunk("p").to(sink),
       rf"pipeline 'p': sink name '{sink}' is the name of the pipeline's own .*choose another name for \.to")
      for sink in ("metrics", "_ledger", "window_state", "records", "late_records", "_staging",
                   "Metrics", "LATE_RECORDS")],
    (lambda: _unsunk("p").to("buffer_rate"),
     r"sink name 'buffer_rate' is in the namespace of the pipeline's suppression buffer tables.*another name for \.to"),
    (lambda: _unsunk("p").to("Buffer_anything"), r"sink name 'Buffer_anything' .*suppression buffer tables"),
    *[(lambda name=name: Pipeline(name),
       rf"pipeline name '{name}' is the name of the framework's .* at the warehouse root.*choose another pipeline name")
      for name in ("quality_results", "data_docs", "gx", "GX", "Quality_Results")],
    (lambda: _unsunk("p", Suppressed.until_window_closes(BufferConfig.unbounded()).with_name("metrics")),
     r"suppression name 'metrics' is the name of the pipeline's own metrics table.*Suppressed\.with_name"),
    (lambda: _unsunk("p", Suppressed.until_window_closes(BufferConfig.unbounded()).with_name("Window_State")),
     r"suppression name 'Window_State' is the name of the pipeline's own window state table"),
    (lambda: Pipeline("p").group_by("k").aggregate(agg.count("K")), r"output column names clash: \['K', 'k'\]"),
    (lambda: Pipeline("p").group_by("k").windowed_by(TimeWindows.of_size_and_grace(10, 1))
     .aggregate(agg.count("Window_Start")), r"clash: aggregate 'Window_Start' is the column 'window_start'"),
    (lambda: Pipeline("p").group_by("k").aggregate(agg.count("Emitted_Stream_Time")),
     r"clash: aggregate 'Emitted_Stream_Time' is the column 'emitted_stream_time'"),
    (lambda: Pipeline("p").group_by("k").aggregate(agg.sum("v", "total"), agg.sum("v", "TOTAL")),
     r"output column names clash: \['TOTAL', 'total'\]"),
    (lambda: Pipeline("p").group_by("k").aggregate(agg.avg("v", "a"), agg.sum("v", "a_sum")),
     r"aggregates 'a' and 'a_sum' both keep the state column '_p_a_sum'"),
    (lambda: Pipeline("p").group_by("k", "K"), r"group_by keys clash: \['k', 'K'\]"),
    (lambda: Pipeline("p").group_by("window_end"), r"group_by key 'window_end' clashes with the column 'window_end'"),
    (lambda: _unsunk("p").with_column("N", "n + 1"),
     r"with_column name 'N' differs only in case from the result column 'n'.*with_column\('n', \.\.\.\)"),
    (lambda: _unsunk("p").with_column("Window_End", "window_end"),
     r"with_column name 'Window_End' differs only in case from the result column 'window_end'"),
    (lambda: _unsunk("p").with_column("score", "n * 2").with_column("SCORE", "n * 3"),
     r"with_column name 'SCORE' differs only in case from the result column 'score'"),
    (lambda: _unsunk("p").with_column("emitted_batch_id", "'x'"),
     r"with_column name 'emitted_batch_id' is the column 'emitted_batch_id' the sink stamps"),
    (lambda: _unsunk("p").select("k", "K"), r"select columns \['k', 'K'\] name the same column"),
])
def test_invalid_definitions_are_refused_when_written(build, pattern):
    with pytest.raises(DefinitionError, match=pattern):
        build()


@pytest.mark.parametrize("build", [
    lambda: _unsunk("p").with_column("n", "n + 1").with_column("window_start", "window_start").to("out"),
    lambda: _unsunk("p").with_column("score", "n * 2").with_column("score", "score + 1").to("out"),
    lambda: _unsunk("p").select("K", "n").with_column("k", "upper(k)").to("out"),
    lambda: _unsunk("p").to("metrics_by_user"),
    lambda: _unsunk("p").to("my_records"),
    lambda: Pipeline("gx_alerts").group_by("k").aggregate(agg.count("n")).to("out"),
    lambda: _unsunk("p", Suppressed.until_window_closes(BufferConfig.unbounded()).with_name("buffer")),
], ids=["replace_exact", "replace_added", "after_select", "sink_metrics_by_user", "sink_my_records",
        "pipeline_gx_alerts", "suppression_buffer"])
def test_names_near_reserved_ones_are_accepted(build):
    """Only a collision is refused: exact-name replacement and names merely containing a reserved one pass."""
    build()


def test_a_corrupt_state_table_stops_the_batch_with_an_error_naming_it(spark, warehouse):
    rt, p = Runtime(spark, warehouse, quality=False), pipeline("corrupt")
    rt.run_batch(p, "b0", frame(spark, [("A", 1, 1)]))
    log = Path(rt.tables(p).state) / "_delta_log"
    latest = max(log.glob("*.json"))
    latest.write_text("{ this is not a Delta commit")
    spark._jvm.org.apache.spark.sql.delta.DeltaLog.clearCache()   # as a new process would start
    with pytest.raises(BatchFailedError, match=r"'corrupt'.*'b1'.*failed while reading state") as failure:
        rt.run_batch(p, "b1", frame(spark, [("A", 2, 1)], 1))
    assert "window_state" in str(failure.value) or "window_state" in str(failure.value.__cause__)
    assert rt.ledger(p).filter("status = 'committed'").count() == 1
