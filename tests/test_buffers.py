"""Strict bounded buffers for final results: shut_down_when_full stops the batch, commits nothing,
and the same batch continues from the same state once the bound is raised."""

import random

import pytest
import reference as ref
from harness import frame, results

from framework import (
    BufferConfig,
    BufferFullError,
    Pipeline,
    Runtime,
    SessionWindows,
    SlidingWindows,
    Suppressed,
    TimeWindows,
    agg,
)


def pipeline(buffer, windows=TimeWindows.of_size_and_grace(10, 0)):
    return (
        Pipeline("bounded", timestamp="ts", arrival="seq")
        .group_by("k")
        .windowed_by(windows)
        .aggregate(agg.count("n"))
        .suppress(Suppressed.until_window_closes(buffer).with_name("alerts"))
        .to("out")
    )


def test_shut_down_when_full_aborts_the_batch_and_a_larger_bound_continues(spark, warehouse):
    rt = Runtime(spark, warehouse, quality=False)
    tight = pipeline(BufferConfig.max_records(1).shut_down_when_full())
    rt.run_batch(tight, "b0", frame(spark, [("A", 1, 1)]))
    batch = frame(spark, [("B", 2, 1), ("C", 3, 1)], 1)  # three windows held at once
    with pytest.raises(BufferFullError, match=r"'bounded'.*'b1'.*alerts.*3 windows.*max_records=1"):
        rt.run_batch(tight, "b1", batch)
    assert rt.read_ledger(tight).filter("status = 'committed'").count() == 1
    roomy = pipeline(BufferConfig.max_records(3).shut_down_when_full())
    assert rt.run_batch(roomy, "b1", batch).status == "committed"
    rt.run_batch(roomy, "b2", frame(spark, [("A", 10, 1)], 3))
    assert [(r["k"], r["n"]) for r in results(rt, roomy)] == [("A", 1), ("B", 1), ("C", 1)]


def test_the_bound_holds_after_every_record_not_only_after_the_batch(spark, warehouse):
    """B's record holds two windows; C's closes both (grace 0): one is held after the batch, but
    Kafka's buffer held two after B, so max_records(1) stops the batch."""
    rt = Runtime(spark, warehouse, quality=False)
    batch = [("A", 1, 1), ("B", 2, 1), ("C", 15, 1)]
    assert ref.held_until_close(ref.Tumbling(10, 0), [batch]) == [(2, 2)]
    with pytest.raises(BufferFullError, match=r"would hold 2 windows \(2 bytes\).*max_records=1"):
        rt.run_batch(pipeline(BufferConfig.max_records(1).shut_down_when_full()), "b0", frame(spark, batch))
    assert (
        rt.run_batch(pipeline(BufferConfig.max_records(2).shut_down_when_full()), "b0", frame(spark, batch)).status
        == "committed"
    )


@pytest.mark.parametrize(
    "model",
    [ref.Tumbling(10, 5), ref.Tumbling(10, 3, advance=5), ref.Sliding(10, 4), ref.Session(3, 4)],
    ids=["tumbling", "hopping", "sliding", "session"],
)
def test_byte_and_record_bounds_match_the_reference_buffer_after_every_record(spark, warehouse, model):
    """Random stream, random split: the bound that the reference buffer reaches passes, one less
    stops exactly the batch that first exceeds it, and raising it continues from there."""
    seed = {"Tumbling": 7, "Sliding": 9, "Session": 10}[type(model).__name__]
    rng = random.Random(seed + bool(getattr(model, "advance", None)))
    records = [(rng.choice("ABC"), max(0, t + rng.randint(-12, 4)), 1) for t in range(0, 240, 4)]
    cuts = sorted(rng.sample(range(1, len(records)), 3))
    batches = [records[i:j] for i, j in zip([0, *cuts], [*cuts, len(records)])]
    peaks = ref.held_until_close(model, batches)
    most_bytes = max(b for _, b in peaks)
    first_over = next(i for i, (_, b) in enumerate(peaks) if b == most_bytes)
    rt = Runtime(spark, warehouse, quality=False)
    seq = 0
    if isinstance(model, ref.Session):
        windows = SessionWindows.of_inactivity_gap_and_grace(model.gap, model.grace)
    elif isinstance(model, ref.Sliding):
        windows = SlidingWindows.of_time_difference_and_grace(model.size, model.grace)
    else:
        windows = TimeWindows.of_size_and_grace(model.size, model.grace).advance_by(model.advance or model.size)
    for i, batch in enumerate(batches):
        if i == first_over:
            tight = pipeline(BufferConfig.max_bytes(most_bytes - 1).shut_down_when_full(), windows)
            with pytest.raises(BufferFullError, match=rf"\({most_bytes} bytes\).*max_bytes={most_bytes - 1}"):
                rt.run_batch(tight, f"b{i}", frame(spark, batch, seq))
        fits = BufferConfig.max_bytes(most_bytes).with_max_records(max(n for n, _ in peaks)).shut_down_when_full()
        assert rt.run_batch(pipeline(fits, windows), f"b{i}", frame(spark, batch, seq)).status == "committed"
        seq += len(batch)


def test_a_strict_buffer_without_bounds_never_stops_a_batch(spark, warehouse):
    """``unbounded().shut_down_when_full()`` has nothing to exceed: no per-record check runs."""
    rt = Runtime(spark, warehouse, quality=False)
    p = pipeline(BufferConfig.unbounded().shut_down_when_full(), SessionWindows.of_inactivity_gap_and_grace(3, 0))
    assert rt.run_batch(p, "b0", frame(spark, [("A", 1, 1), ("A", 3, 1), ("B", 9, 1)])).status == "committed"
    assert [(r["k"], r["window_start"], r["n"]) for r in results(rt, p)] == [("A", 1, 2)]
