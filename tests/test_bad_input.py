"""Bad input: a clear error naming pipeline, batch, column and the first offending records, and
nothing committed; or, for a pipeline that quarantines bad records, those records set aside."""

import datetime as dt
import json
import os
import re
from pathlib import Path

import pytest
from harness import frame, results, unsunk
from pyspark.sql import functions as F

from framework import (
    BatchFailedError,
    FingerprintMismatchError,
    FrameworkError,
    InputError,
    Pipeline,
    Runtime,
    TimeWindows,
    agg,
)
from framework.operations import status


def pipeline(name):
    return unsunk(name).to("out")


def assert_nothing_committed(rt, p):
    assert rt.read_ledger(p).count() == 0


@pytest.mark.parametrize(
    "case,make,pattern",
    [
        (
            "null_time",
            lambda s: frame(s, [("A", 1, 1)]).withColumn("ts", F.lit(None).cast("timestamp")),
            r"'null_time'.*'b0'.*null event time in column 'ts' \(first by arrival order: seq=0, k='A', ts=None\)",
        ),
        (
            "bad_time",
            lambda s: frame(s, [("A", 1, 1)]).withColumn("ts", F.lit("not a time")),
            r"'bad_time'.*'b0'.*unparsable event time in column 'ts' \(.*seq=0, k='A', ts='not a time'\)",
        ),
        (
            "null_key",
            lambda s: frame(s, [("A", 1, 1)]).withColumn("k", F.lit(None).cast("string")),
            r"'null_key'.*'b0'.*null group key 'k' \(first by arrival order: seq=0, k=None, ts=",
        ),
        ("missing", lambda s: frame(s, [("A", 1, 1)]).drop("v"), r"'missing'.*'b0'.*no column 'v'"),
        (
            "collated",
            lambda s: frame(s, [("A", 1, 1), ("a", 2, 1)]).withColumn("k", F.expr("collate(k, 'UTF8_LCASE')")),
            r"'collated'.*'b0'.*group key 'k' has collation UTF8_LCASE; keys compare byte for byte",
        ),
        (
            "reserved",
            lambda s: frame(s, [("A", 1, 1)]).withColumn("_part", F.lit(1)),
            r"'reserved'.*'b0'.*\['_part'\] start with '_', which is reserved",
        ),
        (
            "pre_epoch",
            lambda s: frame(s, [("A", -5000, 1)]),
            r"'pre_epoch'.*'b0'.*before 1970.*\(.*seq=0, k='A', ts='1969-12-31 23:59:55'\)",
        ),
        (
            "future",
            lambda s: frame(s, [("A", 1, 1), ("A", 4_102_444_800_000, 1)]),  # 2100-01-01
            r"'future'.*'b0'.*1 record\(s\) have an event time .* after .*max_clock_skew"
            r".*seq=1, k='A', ts='2100-01-01 00:00:00'\)",
        ),
    ],
    ids=lambda x: x if isinstance(x, str) else "",
)
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
    return [
        {
            "k": "A",
            "n": n,
            "total": total,
            "emitted_batch_id": "b0",
            "window_start": 0,
            "window_end": 10,
            "emitted_stream_time": 30,
        }
    ]


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
    return (
        df.withColumn("tags", tags_map)
        .withColumn("labels", F.array(F.lit("a"), F.col("k")))
        .withColumn("meta", F.struct(F.col("seq").alias("id"), F.lit("src").alias("origin"), tags_map.alias("inner")))
    )


def test_extra_columns_of_map_array_and_struct_type_are_accepted_and_change_nothing(spark, warehouse):
    """Complex extra columns reach neither the results nor a hash Spark refuses: the input
    fingerprint stays the same for the same content (whatever order a map was built in) and
    changes when a map's content does."""
    rt, p = Runtime(spark, warehouse, quality=False), pipeline("extra_complex")
    plain = frame(spark, [("A", 1, 1), ("A", 2, 2), ("A", 30, 3)])
    df = _with_complex_columns(plain, [("x", 1), ("y", 2)])
    assert {f.name: f.dataType.simpleString() for f in df.schema.fields if f.name in ("tags", "labels", "meta")} == {
        "tags": "map<string,bigint>",
        "labels": "array<string>",
        "meta": "struct<id:bigint,origin:string,inner:map<string,bigint>>",
    }
    assert rt.run_batch(p, "b0", df).status == "committed"
    assert results(rt, p) == _closed_window(n=2, total=3)
    same = _with_complex_columns(plain, [("y", 2), ("x", 1)])  # same entries, built in another order
    assert rt.run_batch(p, "b0", same).status == "already committed"
    with pytest.raises(FingerprintMismatchError, match=r"'extra_complex'.*'b0'"):
        rt.run_batch(p, "b0", _with_complex_columns(plain, [("x", 1), ("y", 3)]))
    assert rt.read_ledger(p).filter("status = 'committed'").count() == 1
    assert results(rt, p) == _closed_window(n=2, total=3)


def test_duplicate_records_are_processed_as_records(spark, warehouse):
    """Dedup is the user's choice (docs/design.md#input-checks): two identical records count twice."""
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
    assert rt.read_ledger(p).filter("batch_id = 'b1'").count() == 0


def test_a_corrupt_state_table_stops_the_batch_with_an_error_naming_it(spark, warehouse):
    rt, p = Runtime(spark, warehouse, quality=False), pipeline("corrupt")
    rt.run_batch(p, "b0", frame(spark, [("A", 1, 1), ("A", 20, 1)]))
    published = rt.read_output(p).count()
    log = Path(rt.tables(p).state) / "_delta_log"
    latest = max(log.glob("*.json"))
    latest.write_text("{ this is not a Delta commit")
    spark._jvm.org.apache.spark.sql.delta.DeltaLog.clearCache()  # as a new process would start
    with pytest.raises(BatchFailedError, match=r"'corrupt'.*'b1'.*failed while reading the ledger") as failure:
        rt.run_batch(p, "b1", frame(spark, [("A", 40, 1)], 2))
    assert "_state" in str(failure.value) or "_state" in str(failure.value.__cause__)
    assert rt.read_output(p).count() == published == 1


def test_an_error_about_records_names_the_first_few_by_arrival_order(spark, warehouse):
    rt, p = Runtime(spark, warehouse, quality=False), pipeline("named")
    rows = [("A", 5, 1), (None, 6, 2), ("B", 7, 3), (None, 8, 4), (None, 9, 5), (None, 10, 6)]
    with pytest.raises(InputError) as refused:
        rt.run_batch(p, "b0", frame(spark, rows))
    message = str(refused.value)
    assert "pipeline 'named', batch 'b0': 4 record(s) have a null group key 'k' (first by arrival order: " in message
    named = re.search(r"\(first by arrival order: (.*)\)\. ", message).group(1).split("; ")
    assert [record.split(",")[0] for record in named] == [
        "seq=1",
        "seq=3",
        "seq=4",
    ]
    assert "bad_records='quarantine'" in message
    assert_nothing_committed(rt, p)


def _bad_batch(spark):
    """Batch b0 with event times as text: A@1, A@2 and A@30 (closes A's window [0, 10)) are
    good; the others each fail one per-record check."""
    good = [("A", 1, 1), ("A", 2, 2), ("A", 30, 3)]
    df = frame(spark, [good[0], ("A", 3, 10), (None, 4, 20), good[1], ("A", -5000, 40), ("A", 4_102_444_800_000, 50)])
    df = df.union(frame(spark, [("A", 5, 60), good[2]], 6)).withColumn("ts", F.col("ts").cast("string"))
    return df.withColumn(
        "ts", F.when(F.col("seq") == 1, None).when(F.col("seq") == 6, "not a time").otherwise(F.col("ts"))
    )


REJECTED = [  # (seq in the input, reason)
    (1, "null event time"),
    (2, "null group key k"),
    (4, "event time before 1970"),
    (5, "event time beyond the allowed clock skew"),
    (6, "unparsable event time"),
]


def test_quarantined_records_are_rejected_after_the_commit_point_and_the_batch_goes_on(spark, warehouse):
    """Five records fail five checks: the batch commits with the other three, and the five
    reach the rejected-records table only once the batch committed, once, whatever crashes."""
    p = unsunk("quarantined", bad_records="quarantine").to("out")
    assert "bad_records=quarantine" in p.describe() and "rejected records" in p.describe()

    def crash(point):
        def at(where):
            if where == point:
                raise RuntimeError(f"crash before {where}")

        return Runtime(spark, warehouse, quality=False, before_write=at)

    with pytest.raises(RuntimeError, match="crash before commit_point"):
        crash("commit_point").run_batch(p, "b0", _bad_batch(spark))
    with pytest.raises(FrameworkError, match="no batch has rejected records yet"):
        Runtime(spark, warehouse, quality=False).read_rejected(p)
    with pytest.raises(RuntimeError, match="crash before publish"):  # after the commit point: kept with it
        crash("publish").run_batch(p, "b0", _bad_batch(spark))
    assert Runtime(spark, warehouse, quality=False).read_rejected(p).count() == len(REJECTED)
    rt = Runtime(spark, warehouse, quality=False)
    again = rt.run_batch(p, "b0", _bad_batch(spark))  # publishes what the crashed attempt committed
    assert (again.status, again.stream_time) == ("already committed", dt.datetime(1970, 1, 1, 0, 0, 0, 30_000))
    assert results(rt, p) == _closed_window(n=2, total=3)  # the future record closed nothing
    rejected = rt.read_rejected(p).orderBy("record").collect()
    assert [(json.loads(r.record)["seq"], r.reason, r.batch_id, r.seq) for r in rejected] == [
        (seq, reason, "b0", 1) for seq, reason in REJECTED
    ]
    assert json.loads(rejected[0].record) == {"seq": 1, "k": "A", "v": 10, "ts": None}
    metrics = rt.read_metrics(p).collect()
    assert [(m.records_in, m.rejected_records_total) for m in metrics] == [(8, 5)]
    assert status.read(spark, warehouse, p.name).batches[-1]["rejected_records_total"] == 5
    with pytest.raises(InputError, match=r"'quarantined'.*'b1'.*no column 'v'"):  # whole-batch checks refuse
        rt.run_batch(p, "b1", frame(spark, [("A", 40, 1)], 8).drop("v"))


def test_a_refused_first_batch_leaves_nothing_and_changes_nothing(spark, warehouse):
    """What a new pipeline's refused first batch leaves (docs/design.md#input-checks): nothing;
    the next run, of any batch id and any definition, starts afresh."""
    rt, p = Runtime(spark, warehouse, quality=False), pipeline("fresh")
    with pytest.raises(InputError, match="null group key"):
        rt.run_batch(p, "b0", frame(spark, [(None, 1, 1)]))
    root = rt.tables(p).root
    assert not os.path.exists(root)
    assert_nothing_committed(rt, p)
    assert "no batch has run yet" in status.text(status.read(spark, warehouse, p.name))
    other = (
        Pipeline("fresh", timestamp="ts", arrival="seq")
        .group_by("k")
        .windowed_by(TimeWindows.of_size_and_grace(20, 0))
        .aggregate(agg.max("v", "top"))
        .to("elsewhere")
    )
    assert rt.run_batch(other, "a0", frame(spark, [("A", 1, 1)])).seq == 1


def test_a_replay_replaces_the_rejected_records_of_its_range(spark, warehouse):
    rt, p = Runtime(spark, warehouse, quality=False), unsunk("requarantined", bad_records="quarantine").to("out")
    rt.run_batch(p, "b0", frame(spark, [("A", 1, 1), (None, 2, 2), ("A", 30, 3)]))
    assert [(r.reason, r.seq) for r in rt.read_rejected(p).collect()] == [("null group key k", 1)]
    rt.replay(p, [("b0", frame(spark, [("A", 1, 1), ("A", 2, 2), ("A", 30, 3)]))])  # the key filled in
    assert rt.read_rejected(p).count() == 0
    assert results(rt, p) == _closed_window(n=2, total=3)
    assert [(m.seq, m.rejected_records_total) for m in rt.read_metrics(p).collect()] == [(1, 0)]
