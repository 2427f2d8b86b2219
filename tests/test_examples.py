"""The worked examples of the source documents, as tests: input rows in, expected rows out."""

from datetime import timedelta as td

import pytest
import reference as ref
from harness import AGGREGATES, expected, frame, results, run_stream

from framework import BufferConfig, Pipeline, Runtime, SessionWindows, SlidingWindows, Suppressed, TimeWindows, agg

FINAL = Suppressed.until_window_closes(BufferConfig.unbounded())
MIN = 60_000


def pipeline(name, windows, *aggs):
    return (
        Pipeline(name, timestamp="ts", arrival="seq")
        .group_by("k")
        .windowed_by(windows)
        .aggregate(*(aggs or AGGREGATES))
        .suppress(FINAL)
        .to("out")
    )


def test_blog_w10_final_count_is_3_and_w12_waits_until_it_closes(spark, warehouse):
    # Blog: 2-minute windows, 2 minutes grace. Arrivals at 10, 11, 12, 13 (ts 11), 14 (ts 10).
    rt = Runtime(spark, warehouse, quality=False)
    p = pipeline("blog", TimeWindows.of_size_and_grace(td(minutes=2), td(minutes=2)), agg.count("events"))
    arrivals = [
        ("A", 10 * MIN, 1),
        ("A", 11 * MIN, 1),
        ("A", 12 * MIN, 1),
        ("A", 11 * MIN, 1),
        ("A", 14 * MIN, 1),
        ("A", 10 * MIN, 1),
    ]
    first = run_stream(rt, p, [arrivals])
    rows = results(rt, p)
    assert [(r["window_start"], r["events"]) for r in rows] == [(10 * MIN, 3)]  # w10 final = 3
    assert first[0].dropped_late == 1  # the event at 14, ts 10
    assert rt.read_late(p).count() == 1
    # w12 (count 1 so far) is emitted only once stream time reaches its close time, 16.
    run_stream(rt, p, [[("A", 15 * MIN, 1)]], ids=["b0001"])
    assert [r["window_start"] for r in results(rt, p)] == [10 * MIN]
    run_stream(rt, p, [[("A", 16 * MIN, 1)]], ids=["b0002"])
    rows = results(rt, p)
    assert [(r["window_start"], r["events"], r["emitted_batch_id"]) for r in rows] == [
        (10 * MIN, 3, "b0000"),
        (12 * MIN, 1, "b0002"),
    ]


def test_blog_alert_when_fewer_than_3_events_in_an_hour(spark, warehouse):
    rt = Runtime(spark, warehouse)  # with the write-audit-publish quality gate
    alerts = (
        Pipeline("user_alerts", timestamp="ts", arrival="seq")
        .group_by("k")
        .windowed_by(TimeWindows.of_size_and_grace(td(hours=1), td(minutes=10)))
        .aggregate(agg.count("events"))
        .suppress(FINAL)
        .filter("events < 3")
        .to("user_alert_windows")
    )
    h = 60 * MIN
    batch = [
        ("alice", 1 * MIN, 1),
        ("bob", 2 * MIN, 1),
        ("alice", 3 * MIN, 1),
        ("bob", 4 * MIN, 1),
        ("bob", 5 * MIN, 1),
        ("carol", 59 * MIN, 1),
        ("bob", h + 5 * MIN, 1),
        ("bob", h + 11 * MIN, 1),
    ]
    run_stream(rt, alerts, [batch])
    rows = results(rt, alerts)
    assert [(r["k"], r["events"]) for r in rows] == [("alice", 2), ("carol", 1)]  # bob had 3: no alert
    assert all(r["emitted_stream_time"] >= h + 10 * MIN for r in rows)


def test_kip450_four_records_make_seven_sliding_windows(spark, warehouse):
    # KIP-450 figure 1: window size 10 ms, 4 records, 7 windows (each record's left window and
    # the right windows that hold records). The figure's exact times are not in the text; these
    # four records are within 10 ms of their neighbours, as drawn.
    rt = Runtime(spark, warehouse, quality=False)
    p = pipeline("kip450", SlidingWindows.of_time_difference_and_grace(10, 0), agg.count("n"))
    records = [("A", 10, 1), ("A", 14, 1), ("A", 18, 1), ("A", 22, 1)]
    run_stream(rt, p, [records, [("A", 100, 1)]])
    rows = [r for r in results(rt, p) if r["window_end"] <= 32]
    assert [(r["window_start"], r["window_end"], r["n"]) for r in rows] == [
        (0, 10, 1),
        (4, 14, 2),
        (8, 18, 3),
        (11, 21, 2),
        (12, 22, 3),
        (15, 25, 2),
        (19, 29, 1),
    ]


# Out-of-order records on sliding windows (size 10, grace 90, one key), in arrival order, and
# the windows Kafka Streams' KStreamSlidingWindowAggregate makes of them: it finds a record's
# previous record only through the windows it holds, so a record that landed in no window
# defines none, and later records do not see it (docs/design.md#windows).
KAFKA_SLIDING = {
    "late record's right window": ([("x", 200), ("p", 105), ("q", 108)], [(190, 200, ["x"])]),
    "current record's right window": ([("x", 200), ("q", 108), ("p", 105)], [(190, 200, ["x"])]),
    "previous record through a held window": (
        [("a", 100), ("x", 200), ("p", 104), ("q", 107)],
        [(90, 100, ["a"]), (101, 111, ["p", "q"]), (190, 200, ["x"])],
    ),
    "dropped record defines nothing": ([("x", 200), ("p", 99), ("q", 105)], [(190, 200, ["x"])]),
}


@pytest.mark.parametrize("case", list(KAFKA_SLIDING))
def test_sliding_windows_are_the_ones_kafka_creates_for_out_of_order_records(spark, warehouse, case):
    arrivals, kafka = KAFKA_SLIDING[case]
    stream = [("k", ts, value) for value, ts in arrivals] + [("z", 1000, "end")]  # closes them all
    model = ref.run(ref.Sliding(10, 90), [stream])
    assert [(r["start"], r["end"], r["values"]) for r in model if r["key"] == "k"] == kafka
    p = pipeline("kafka_sliding", SlidingWindows.of_time_difference_and_grace(10, 90), agg.collect_list("v", "vs"))
    for split in ([stream], [[r] for r in stream]):
        rt = Runtime(spark.newSession(), f"{warehouse}/{len(split)}", quality=False)
        run_stream(rt, p, split, value_type="string")
        got = [(r["window_start"], r["window_end"], r["vs"]) for r in results(rt, p) if r["k"] == "k"]
        assert got == kafka, f"{case}, {len(split)} batches"


def test_kip450_hopping_with_1ms_advance_makes_more_windows_than_sliding(spark, warehouse):
    rt = Runtime(spark, warehouse, quality=False)
    p = pipeline("hop1", TimeWindows.of_size_and_grace(10, 0).advance_by(1), agg.count("n"))
    run_stream(rt, p, [[("A", 10, 1), ("A", 14, 1), ("A", 18, 1), ("A", 22, 1)], [("A", 100, 1)]])
    rows = [r for r in results(rt, p) if r["window_end"] <= 33]
    assert len(rows) == 22 and len({tuple(r["vs"]) if "vs" in r else r["n"] for r in rows}) < len(rows)


def test_kip94_a_record_between_two_sessions_merges_exactly_those_two(spark, warehouse):
    # KIP-94: sessions [0,99] [150,200] [250,300] [350,400] (gap 30); a record at 225 falls within
    # the gap of the 2nd and 3rd only, which merge into [150,300]; the others stay as they were.
    rt = Runtime(spark, warehouse, quality=False)
    p = pipeline(
        "kip94", SessionWindows.of_inactivity_gap_and_grace(30, 1000), agg.count("n"), agg.collect_list("v", "vs")
    )
    sessions = [("A", t, t) for t in (0, 30, 60, 90, 99, 150, 175, 200, 250, 275, 300, 350, 375, 400)]
    run_stream(rt, p, [sessions, [("A", 225, 225)], [("A", 5000, 0)]])
    rows = results(rt, p)
    assert [(r["window_start"], r["window_end"], r["n"]) for r in rows if r["window_start"] < 5000] == [
        (0, 99, 5),
        (150, 300, 7),
        (350, 400, 3),
    ]
    merged = next(r for r in rows if r["window_start"] == 150)
    assert merged["vs"] == [150, 175, 200, 250, 275, 300, 225]  # arrival order


def test_an_updated_session_table_holds_each_session_as_it_is_now(spark, warehouse):
    """Without suppression a session table is updated in place (emit-on-update). A session is
    named by both bounds: a record that extends it forwards a tombstone for the session it
    replaced and the new one (as Kafka does), whether the start moves or only the end."""
    rt = Runtime(spark, warehouse, quality=False)
    p = (
        Pipeline("visits", timestamp="ts", arrival="seq")
        .group_by("k")
        .windowed_by(SessionWindows.of_inactivity_gap_and_grace(5, 100))
        .aggregate(agg.count("n"))
        .to("out")
    )
    seen = []
    for i, batch in enumerate([[("A", 10, 1), ("B", 0, 1)], [("A", 12, 1)], [("A", 5, 1)]]):
        done = rt.run_batch(p, f"b{i}", frame(spark, batch, 10 * i))
        seen.append((done.emitted, [(r["k"], r["window_start"], r["window_end"], r["n"]) for r in results(rt, p)]))
    assert seen == [
        (2, [("A", 10, 10, 1), ("B", 0, 0, 1)]),
        (2, [("A", 10, 12, 2), ("B", 0, 0, 1)]),  # the end moved: [10, 10] deleted, [10, 12] put
        (2, [("A", 5, 12, 3), ("B", 0, 0, 1)]),  # the start moved
    ]


@pytest.mark.parametrize(
    "windows,model",
    [
        (TimeWindows.of_size_and_grace(10, 5), ref.Tumbling(10, 5)),
        (TimeWindows.of_size_and_grace(10, 3).advance_by(4), ref.Tumbling(10, 3, 4)),
        (SlidingWindows.of_time_difference_and_grace(10, 4), ref.Sliding(10, 4)),
        (SessionWindows.of_inactivity_gap_and_grace(5, 3), ref.Session(5, 3)),
    ],
    ids=["tumbling", "hopping", "sliding", "session"],
)
def test_out_of_order_and_late_records_match_the_reference_model(spark, warehouse, windows, model):
    rt = Runtime(spark, warehouse, quality=False)
    p = pipeline("ooo", windows)
    batches = [
        [("A", 3, 1), ("B", 12, 2), ("A", 9, None), ("A", 1, 4)],
        [("B", 25, 5), ("A", 14, 6), ("A", 11, 7), ("B", 7, 8), ("A", 30, 9)],
        [("A", 60, 10), ("B", 61, 11)],
    ]
    run_stream(rt, p, batches)
    assert results(rt, p) == expected(ref.run(model, batches))
