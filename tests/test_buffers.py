"""Strict bounded buffers for final results: shut_down_when_full stops the batch, commits nothing,
and the same batch continues from the same state once the bound is raised."""
import pytest

from framework import BufferConfig, BufferFullError, DefinitionError, Pipeline, Runtime, Suppressed, TimeWindows, agg
from harness import frame, results


def pipeline(buffer):
    return (Pipeline("bounded", timestamp="ts", arrival="seq").group_by("k")
            .windowed_by(TimeWindows.of_size_and_grace(10, 0)).aggregate(agg.count("n"))
            .suppress(Suppressed.until_window_closes(buffer).with_name("alerts")).to("out"))


def test_shut_down_when_full_aborts_the_batch_and_a_larger_bound_continues(spark, warehouse):
    rt = Runtime(spark, warehouse, quality=False)
    tight = pipeline(BufferConfig.max_records(1).shut_down_when_full())
    rt.run_batch(tight, "b0", frame(spark, [("A", 1, 1)]))
    batch = frame(spark, [("B", 2, 1), ("C", 3, 1)], 1)       # three windows held at once
    with pytest.raises(BufferFullError, match=r"'bounded'.*'b1'.*alerts.*3 windows.*max_records=1"):
        rt.run_batch(tight, "b1", batch)
    assert rt.ledger(tight).filter("status = 'committed'").count() == 1
    roomy = pipeline(BufferConfig.max_records(3).shut_down_when_full())
    assert rt.run_batch(roomy, "b1", batch).status == "committed"
    rt.run_batch(roomy, "b2", frame(spark, [("A", 10, 1)], 3))
    assert [(r["k"], r["n"]) for r in results(rt, roomy)] == [("A", 1), ("B", 1), ("C", 1)]


def test_byte_bounds_for_final_results_are_refused_explicitly():
    with pytest.raises(DefinitionError, match="max_bytes bound is not supported"):
        Suppressed.until_window_closes(BufferConfig.max_bytes(100).shut_down_when_full())
