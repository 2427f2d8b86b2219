"""The quality gate's invariants: result rows in, the number of rows breaking each check out."""
from datetime import datetime as T
from datetime import timedelta as td

import pytest

from framework import BufferConfig, Pipeline, SessionWindows, Suppressed, TimeWindows, agg
from framework import Runtime
from framework.errors import FrameworkError, QualityGateError
from framework.invariants import Check, Report, check_table, validate


def final(name, windows):
    return (Pipeline(name).group_by("user").windowed_by(windows).aggregate(agg.count("events"))
            .suppress(Suppressed.until_window_closes(BufferConfig.unbounded())))


HOURLY = final("hourly", TimeWindows.of_size_and_grace(td(hours=1), td(minutes=10))).to("out")
SESSIONS = final("sessions", SessionWindows.of_inactivity_gap_and_grace(td(minutes=30), td(minutes=5))).to("out")
SCHEMA = ("user string, window_start timestamp, window_end timestamp, events long, "
          "emitted_batch_id string, emitted_stream_time timestamp")


def verdicts(spark, pipeline, rows, schema=SCHEMA):
    _, checks = check_table(spark.createDataFrame(rows, schema), pipeline)
    return {c.name: c.failures for c in checks}


def test_hourly_windows_each_violation_counted(spark):
    rows = [
        ("a", T(2026, 1, 1, 0), T(2026, 1, 1, 1), 2, "b1", T(2026, 1, 1, 1, 10)),  # closed exactly at end + grace
        ("a", T(2026, 1, 1, 0), T(2026, 1, 1, 1), 3, "b2", T(2026, 1, 1, 1, 20)),  # same window again
        (None, T(2026, 1, 1, 1), T(2026, 1, 1, 2), 1, "b2", T(2026, 1, 1, 2, 20)),  # null key
        ("c", T(2026, 1, 1, 2), T(2026, 1, 1, 2), 1, "b2", T(2026, 1, 1, 2, 20)),  # empty window
        ("d", T(2026, 1, 1, 1), T(2026, 1, 1, 2), 1, "b2", T(2026, 1, 1, 2, 9, 59, 999000)),  # 1 ms early
    ]
    assert verdicts(spark, HOURLY, rows) == {
        "unique (key, window)": 1, "no null keys or bounds": 1,
        "window_end > window_start": 1, "emitted_stream_time >= close time": 1}


def test_sessions_close_one_ms_plus_gap_plus_grace_after_their_last_record(spark):
    rows = [
        ("a", T(2026, 1, 1, 0), T(2026, 1, 1, 0), 1, "b1", T(2026, 1, 1, 0, 35, 0, 1000)),  # single record: ok
        ("b", T(2026, 1, 1, 0), T(2026, 1, 1, 0, 10), 2, "b1", T(2026, 1, 1, 0, 45)),  # 1 ms early
    ]
    assert verdicts(spark, SESSIONS, rows) == {
        "unique (key, window)": 0, "no null keys or bounds": 0,
        "window_end >= window_start": 0, "emitted_stream_time >= close time": 1}


def test_checks_on_columns_a_select_removed_are_skipped(spark):
    counts_only = final("counts", TimeWindows.of_size_and_grace(td(hours=1), td(0))).select("events").to("out")
    rows = [(1, "b1", T(2026, 1, 1, 1)), (1, "b1", T(2026, 1, 1, 1))]
    found = verdicts(spark, counts_only, rows, "events long, emitted_batch_id string, emitted_stream_time timestamp")
    assert set(found.values()) == {None}


def test_a_failed_check_stops_the_gate_naming_it():
    Report("hourly", "/lake/hourly/out", 5, (Check("no null keys", 0), Check("unique key", None))).raise_for_failures()
    failing = Report("hourly", "/lake/hourly/out", 5, (Check("unique (key, window)", 2), Check("no null keys", 0)))
    with pytest.raises(QualityGateError, match=r"unique \(key, window\) \(2 rows\)"):
        failing.raise_for_failures()


def test_a_pipeline_that_emitted_nothing_yet_passes_but_one_never_run_fails(spark, warehouse):
    with pytest.raises(FrameworkError, match="no committed batch"):
        validate(spark, HOURLY, warehouse)
    rows = [("a", T(2026, 1, 1, 0, 5), 1)]
    Runtime(spark, warehouse).run_batch(HOURLY, "b1", spark.createDataFrame(rows, "user string, ts timestamp, seq long"))
    report = validate(spark, HOURLY, warehouse)
    assert report.rows == 0 and report.ok and "nothing to check" in report.text()
