"""Retention: window state holds open windows only. A closed window's partial rows leave the
state table in the batch that emits it, so state does not grow with the number of batches."""

from delta.tables import DeltaTable
from harness import in_parallel, run_stream

from framework import BufferConfig, Pipeline, Runtime, SlidingWindows, Suppressed, TimeWindows, agg

BATCHES = 5


def _pipeline(name, windows):
    return (
        Pipeline(name, timestamp="ts", arrival="seq")
        .group_by("k")
        .windowed_by(windows)
        .aggregate(agg.count("n"))
        .suppress(Suppressed.until_window_closes(BufferConfig.unbounded()))
        .to("out")
    )


def _sizes(rt, p, windows):
    """After each of BATCHES batches (two keys, a new window each): the open windows the batch
    reported, and the rows and live files of window state (or, for sliding windows, whose
    windows are derived from them, of the records kept)."""
    sizes = []
    for i in range(BATCHES):
        result = run_stream(rt, p, [[("A", 10 * i + 1, 1), ("B", 10 * i + 2, 1)]], ids=[f"b{i:04d}"])[0]
        t = rt.tables(p)
        path = t.records if isinstance(windows, SlidingWindows) else t.state
        sizes.append(
            {
                "open": result.metrics["windows_open"],
                "rows": rt.spark.read.format("delta").load(path).count(),
                "files": DeltaTable.forPath(rt.spark, path).detail().first().numFiles,
            }
        )
    return sizes


def test_window_state_holds_only_open_windows_however_many_batches_ran(spark, warehouse):
    cases = {
        "tumbling": TimeWindows.of_size_and_grace(10, 2),
        "sliding": SlidingWindows.of_time_difference_and_grace(10, 2),
    }
    got = dict(
        in_parallel(
            [
                lambda kind=kind, w=w: (
                    kind,
                    _sizes(Runtime(spark.newSession(), warehouse, quality=False), _pipeline(kind, w), w),
                )
                for kind, w in cases.items()
            ]
        )
    )
    for row in got["tumbling"]:
        assert row["rows"] == row["open"] == 2  # one partial row per open window
        assert row["files"] <= 4
    steady = got["sliding"][2]
    assert steady["rows"] <= 6  # the records of the windows still open
    assert all(row == steady for row in got["sliding"][2:]), got["sliding"]  # nothing accumulates
