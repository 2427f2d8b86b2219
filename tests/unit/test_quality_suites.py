"""Great Expectations suites as the quality gate builds them: the window type's template plus the
pipeline's own file (no Spark; the gate on real tables is in ``tests/test_quality.py``)."""

from datetime import timedelta as td
from pathlib import Path

import great_expectations as gx
import great_expectations.expectations as gxe
from harness import hourly

from framework import Pipeline, SessionWindows, agg
from framework.operations.suites import load_suite, row_by_row
from framework.orchestration.jobs import load_job


def test_suite_is_the_template_for_the_window_type_plus_the_pipeline_file(suites):
    own = load_suite(hourly(), suites)
    kinds = [(e.expectation_type, e.meta["severity"], e.meta["source"]) for e in own.expectations]
    assert ("expect_compound_columns_to_be_unique", "critical", "template") in kinds
    assert ("expect_column_values_to_be_between", "critical", "user_alerts.json") in kinds
    assert ("expect_column_max_to_be_between", "warning", "user_alerts.json") in kinds
    [unique] = [e for e in own.expectations if e.expectation_type == "expect_compound_columns_to_be_unique"]
    assert unique.column_list == ["user_id", "window_start"]  # a time window is named by its start
    not_null = {e.column for e in own.expectations if e.expectation_type == "expect_column_values_to_not_be_null"}
    assert {"user_id", "window_start", "window_end", "emitted_stream_time"} <= not_null

    sessions = (
        Pipeline("visits")
        .group_by("user_id")
        .windowed_by(SessionWindows.of_inactivity_gap_and_grace(td(minutes=5), td(0)))
        .aggregate(agg.count("n"))
        .to("visits_by_session")
    )  # emit-on-update: no close check
    session_suite = load_suite(sessions, suites).expectations
    pairs = {
        (e.column_A, e.column_B): e.or_equal
        for e in session_suite
        if e.expectation_type == "expect_column_pair_values_a_to_be_greater_than_b"
    }
    assert pairs == {("window_end", "window_start"): True}
    [unique] = [e for e in session_suite if e.expectation_type == "expect_compound_columns_to_be_unique"]
    assert unique.column_list == ["user_id", "window_start", "window_end"]  # a session by both bounds


def test_a_table_without_windows_and_one_key_is_unique_by_that_key():
    """GX refuses a compound uniqueness of one column: the template's becomes the key's own, and
    the gate still checks a batch's rows incrementally (against the published rows of its keys)."""
    p = Pipeline("latest").group_by("k").aggregate(agg.count("n")).to("latest_by_key")
    suite = load_suite(p)
    [unique] = [e for e in suite.expectations if "unique" in e.expectation_type]
    assert (unique.expectation_type, unique.column) == ("expect_column_values_to_be_unique", "k")
    assert row_by_row(p, suite)
    two = Pipeline("latest2").group_by("k", "j").aggregate(agg.count("n")).to("latest_by_keys")
    assert row_by_row(two, load_suite(two))
    assert not row_by_row(two, load_suite(p))  # uniqueness of one key of two needs the whole table
    mostly = gxe.ExpectColumnValuesToBeBetween(column="n", min_value=0, mostly=0.9)
    share = gx.ExpectationSuite(name="share", expectations=[*load_suite(p).expectations, mostly])
    assert not row_by_row(p, share)  # a share of the rows: a batch's few bad rows could pass among many


def test_a_rate_limited_log_repeats_windows_so_it_gets_no_uniqueness_or_close_check():
    job = Path(__file__).resolve().parents[2] / "jobs" / "sliding_metric.py"
    suite = load_suite(load_job(str(job)).PIPELINE)  # a rate-limited sliding-window sink
    kinds = {(e.expectation_type, e.meta["source"]) for e in suite.expectations}
    assert ("expect_compound_columns_to_be_unique", "template") not in kinds
    assert ("expect_column_values_to_not_be_null", "template") in kinds
    assert ("expect_column_values_to_be_between", "sliding_metric.json") in kinds
    pairs = {
        (e.column_A, e.column_B)
        for e in suite.expectations
        if e.expectation_type == "expect_column_pair_values_a_to_be_greater_than_b"
    }
    assert pairs == {("window_end", "window_start")}
