"""Acting on final results once (``framework.downstream``), in-process; the Airflow side, asset
events and a retried task under the real scheduler, is in ``test_airflow_scheduler.py``."""

import datetime as dt
import threading

import pytest
from harness import frame

from framework import BufferConfig, FrameworkError, Pipeline, Runtime, Suppressed, TimeWindows, agg
from framework.operations.downstream import batch_rows, deliver_once

# Two windows close in batch b1; the filter after suppression lets one of them into the sink.
STREAM = {"b0": [("a", 1, 1), ("b", 2, 1), ("b", 3, 1)], "b1": [("c", 15, 1)]}
KEYS = ["k", "window_start", "window_end"]


def _pipeline():
    return (
        Pipeline("ds_alerts", timestamp="ts", arrival="seq")
        .group_by("k")
        .windowed_by(TimeWindows.of_size_and_grace(dt.timedelta(milliseconds=10), dt.timedelta(0)))
        .aggregate(agg.count("n"))
        .suppress(Suppressed.until_window_closes(BufferConfig.unbounded()))
        .filter("n < 2")
        .to("ds_alert_windows")
    )


def _run(spark, warehouse):
    rt, p = Runtime(spark, warehouse, quality=False), _pipeline()
    seq = 0
    for batch_id, rows in STREAM.items():
        rt.run_batch(p, batch_id, frame(spark, rows, seq))
        seq += len(rows)
    return rt, p


def test_a_committed_batch_reports_the_rows_its_sink_received_however_it_is_asked(spark, tmp_path):
    rt, p = _run(spark, str(tmp_path))
    rows = batch_rows(rt, p, ["b1"]).collect()
    assert [(r.k, r.n) for r in rows] == [("a", 1)]  # b's window closed too, filtered out (n = 2)
    assert rt.committed_batch(p, "b1").emitted == 1 == rt.run_batch(p, "b1", frame(spark, STREAM["b1"], 3)).emitted
    assert rt.committed_batch(p, "b0").emitted == 0 and rt.committed_batch(p, "b9") is None
    assert rt.committed_batch(p, "b1").metrics["suppression_emit_total"] == 2  # Kafka's count: windows emitted


def test_deliver_once_adds_each_key_once_even_when_two_deliveries_overlap(spark, tmp_path):
    rt, p = _run(spark, str(tmp_path / "wh"))
    outbox = str(tmp_path / "outbox")
    rows = batch_rows(rt, p, ["b0", "b1"]).select(*KEYS, "n", "emitted_batch_id")
    added = []
    threads = [threading.Thread(target=lambda: added.append(deliver_once(rows, outbox, KEYS))) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(added) == [0, 1]
    assert deliver_once(rows, outbox, KEYS) == 0  # a retry
    delivered = spark.read.format("delta").load(outbox).collect()
    assert [(r.k, r.n, r.emitted_batch_id) for r in delivered] == [("a", 1, "b1")]


def test_deliver_once_needs_its_keys_in_the_rows(spark, tmp_path):
    rows = spark.createDataFrame([(1,)], "x int")
    with pytest.raises(FrameworkError, match=r"missing \['k'\]"):
        deliver_once(rows, str(tmp_path / "outbox"), ["k"])


def test_deliver_once_refuses_rows_it_could_not_deliver_once(spark, tmp_path):
    outbox = str(tmp_path / "outbox")
    twice = spark.createDataFrame([("a", 1, "first"), ("a", 1, "second")], "k string, w int, msg string")
    with pytest.raises(FrameworkError, match=r"2 rows to deliver share the key \{'k': 'a', 'w': 1\}"):
        deliver_once(twice, outbox, ["k", "w"])
    assert deliver_once(twice.limit(1), outbox, ["k", "w"]) == 1
    retyped = spark.createDataFrame([("a", "01", "x")], "k string, w string, msg string")
    with pytest.raises(FrameworkError, match=r"differ from the outbox's in w \(string vs int\)"):
        deliver_once(retyped, outbox, ["k", "w"])
    extra = spark.createDataFrame([("b", 2, "x", 5)], "k string, w int, msg string, more int")
    with pytest.raises(FrameworkError, match=r"in more \(int vs absent\)"):
        deliver_once(extra, outbox, ["k", "w"])
