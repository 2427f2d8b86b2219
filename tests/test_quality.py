"""Great Expectations quality gate (docs/design.md#quality-gate): real Spark, Delta and GX, no mocks."""

import datetime as dt
import json
import os
from datetime import timedelta as td

import pytest
from harness import frame, hourly
from pyspark.sql import functions as F

from framework import BufferConfig, Pipeline, QualityGateError, Runtime, SessionWindows, Suppressed, TimeWindows, agg
from framework.operations import quality

T = dt.datetime
FINAL = (
    "user_id string, window_start timestamp, window_end timestamp, events long, "
    "emitted_batch_id string, emitted_stream_time timestamp"
)


def row(user, hour, events, batch, emitted_at):
    """A final row of the hourly pipeline: window [hour, hour + 1h)."""
    return (user, T(2026, 1, 1, hour), T(2026, 1, 1, hour + 1), events, batch, emitted_at)


def failed(report):
    return sorted(c.expectation for c in report.checks if not c.success)


@pytest.mark.parametrize("in_memory_rows", [quality.IN_MEMORY_ROWS, 0], ids=["pandas", "spark"])
def test_template_checks_bounds_nulls_counts_and_emission_after_close(spark, monkeypatch, in_memory_rows):
    """The same findings whether GX validates the rows in memory (pandas) or in Spark."""
    monkeypatch.setattr(quality, "IN_MEMORY_ROWS", in_memory_rows)
    sessions = (
        Pipeline("visits")
        .group_by("user_id")
        .windowed_by(SessionWindows.of_inactivity_gap_and_grace(td(minutes=5), td(minutes=1)))
        .aggregate(agg.count("events"))
        .suppress(Suppressed.until_window_closes(BufferConfig.unbounded()))
        .to("visits_by_session")
    )
    close = td(minutes=6, milliseconds=1)  # a session closes at end + 1 ms + gap + grace
    end = T(2026, 1, 1, 0, 30)
    df = spark.createDataFrame(
        [
            ("single", end, end, 1, "b1", end + close),  # fine: start == end
            ("early", T(2026, 1, 1, 0, 10), end, 2, "b1", end + close - td(milliseconds=1)),
            ("reversed", end, T(2026, 1, 1, 0, 10), 2, "b1", end + close),
            (None, T(2026, 1, 1, 0, 10), end, 0, "b1", end + close),
        ],
        FINAL,
    )

    report = quality.validate(spark, sessions, df, "b1")

    assert not report.success
    assert failed(report) == [
        "expect_column_pair_values_a_to_be_greater_than_b(column_A=emitted_stream_time, column_B=close_time, "
        "or_equal=True)",
        "expect_column_pair_values_a_to_be_greater_than_b(column_A=window_end, column_B=window_start, or_equal=True)",
        "expect_column_values_to_be_between(column=events, min_value=1)",
        "expect_column_values_to_not_be_null(column=user_id)",
    ]
    [late] = [c for c in report.checks if "close_time" in c.expectation]
    assert late.observed == "1 of 4 rows unexpected" and late.examples[0]["user_id"] == "early"


def test_gate_records_warnings_and_refuses_a_batch_failing_a_critical_expectation(spark, warehouse, suites):
    p = hourly()
    published = spark.createDataFrame([row("a", 0, 2, "b1", T(2026, 1, 1, 1, 10))], FINAL)

    passed = quality.gate(
        spark,
        p,
        spark.createDataFrame([row("b", 0, 3, "b2", T(2026, 1, 1, 1, 30))], FINAL),
        published,
        "b2",
        warehouse,
        expectations_dir=suites,
    )
    assert passed.success
    assert [c.expectation for c in passed.failed_warnings] == [
        "expect_column_max_to_be_between(column=events, max_value=2)"
    ]
    with pytest.raises(QualityGateError) as error:
        quality.gate(
            spark,
            p,
            spark.createDataFrame([row("c", 1, 50, "b3", T(2026, 1, 1, 2, 10))], FINAL),
            published,
            "b3",
            warehouse,
            expectations_dir=suites,
        )

    message = str(error.value)
    assert "batch 'b3'" in message and "1 critical expectation(s) failed" in message
    assert "Nothing was published or committed" in message
    assert "expect_column_values_to_be_between(column=events, max_value=10)" in message
    assert '"user_id": "c"' in message and "expect_column_max_to_be_between" not in message
    results = spark.read.format("delta").load(os.path.join(warehouse, "quality_results"))
    assert {(r.batch_id, r.severity, r.success) for r in results.filter("NOT success").collect()} == {
        ("b2", "warning", False),
        ("b3", "warning", False),
        ("b3", "critical", False),
    }
    assert results.filter("batch_id = 'b2'").count() == len(passed.checks) == 10
    index = os.path.join(warehouse, "data_docs", "index.html")
    assert not os.path.exists(index)  # no audit builds GX's index: its cost grows with the results it lists
    assert str(quality.document_index(warehouse)) == index and "user_alerts" in open(index).read()
    assert passed.docs.startswith("file://") and os.path.isfile(passed.docs[len("file://") :])


def test_a_warehouse_given_as_a_file_url_keeps_results_and_data_docs_inside_it(spark, warehouse, suites):
    """Before, the URL went through ``os.path.abspath``: results landed under ``./file:/...``."""
    p = hourly()
    report = quality.validate(
        spark,
        p,
        spark.createDataFrame([row("a", 0, 2, "b1", T(2026, 1, 1, 1, 10))], FINAL),
        "b1",
        warehouse_root=f"file://{warehouse}",
        expectations_dir=suites,
    )
    results = spark.read.format("delta").load(os.path.join(warehouse, "quality_results"))
    assert results.filter("batch_id = 'b1'").count() == len(report.checks) == 10
    assert report.docs is not None and report.docs.startswith(f"file://{warehouse}/data_docs/")
    assert os.path.isfile(report.docs[len("file://") :])


def test_a_window_published_by_an_earlier_batch_fails_the_gate_and_the_table_check(spark, warehouse):
    p = hourly("hourly_counts")
    rt = Runtime(spark, warehouse)
    records = [("a", 0, 1), ("a", 60_000, 1), ("b", 90_000, 1), ("a", 2 * 3_600_000, 1)]  # closes hour 0
    rt.run_batch(p, "b1", frame(spark, records).withColumnRenamed("k", "user_id"))
    table = rt.read_output(p)
    assert table.count() == 2 and quality.validate_table(spark, p, table).success

    again = table.filter("user_id = 'a'").withColumn("emitted_batch_id", F.lit("b3"))
    assert quality.validate(spark, p, again, "b3").success  # within the batch alone nothing is wrong
    with pytest.raises(
        QualityGateError,
        match=r"expect_compound_columns_to_be_unique.*2 of 2 rows unexpected"
        r"(?s:.*)\"_origin\": \"published\"",
    ):
        quality.gate(spark, p, again, table, "b3", warehouse)

    again.write.format("delta").mode("append").save(rt.tables(p).output)  # as a broken writer would
    report = quality.validate_table(spark, p, spark.read.format("delta").load(rt.tables(p).output))
    assert [(c.expectation, c.observed) for c in report.failed_critical] == [
        (
            "expect_compound_columns_to_be_unique(column_list=['user_id', 'window_start'])",
            "2 of 3 rows unexpected",
        )
    ]
    with pytest.raises(QualityGateError, match=r"pipeline 'hourly_counts': 1 critical expectation\(s\) failed"):
        report.raise_for_failures()


def test_run_batch_publishes_nothing_when_a_critical_expectation_fails_and_reruns_once_fixed(spark, tmp_path):
    """Write-audit-publish inside run_batch: a failing critical expectation stops the batch (no
    output, no state, no commit); after the suite is fixed the same batch runs and publishes."""
    strict, fixed = tmp_path / "strict", tmp_path / "fixed"
    for path, cap in ((strict, 1), (fixed, 10)):
        path.mkdir()
        (path / "gated.json").write_text(
            json.dumps(
                {
                    "name": "gated",
                    "expectations": [
                        {
                            "type": "expect_column_values_to_be_between",
                            "kwargs": {"column": "n", "max_value": cap},
                            "meta": {"severity": "critical"},
                        }
                    ],
                }
            )
        )
    p = (
        Pipeline("gated", timestamp="ts", arrival="seq")
        .group_by("k")
        .windowed_by(TimeWindows.of_size_and_grace(10, 0))
        .aggregate(agg.count("n"))
        .suppress(Suppressed.until_window_closes(BufferConfig.unbounded()))
        .to("out")
    )
    warehouse = str(tmp_path / "lake")
    batch = frame(spark, [("A", 1, 1), ("A", 2, 1), ("A", 30, 1)])
    with pytest.raises(QualityGateError, match=r"expect_column_values_to_be_between.*n"):
        Runtime(spark, warehouse, expectations=str(strict)).run_batch(p, "b0", batch)
    rt = Runtime(spark, warehouse, expectations=str(fixed))
    assert rt.read_ledger(p).filter("status = 'committed'").count() == 0
    assert not os.path.exists(rt.tables(p).output) and not os.path.exists(rt.tables(p).state)
    assert rt.run_batch(p, "b0", batch).status == "committed"
    assert [(r.k, r.n) for r in rt.read_output(p).collect()] == [("A", 2)]


def test_frames_gx_would_judge_differently_in_memory_are_validated_in_spark(spark, monkeypatch):
    """NaN (pandas reads it as null, Spark as a number) and engine-bound expectations (type
    names, regex dialects) keep a frame in Spark, as do more than IN_MEMORY_ROWS rows."""
    import great_expectations as gx

    from framework.operations.suites import load_suite

    suite = load_suite(hourly(), None)
    rows = spark.createDataFrame([(1.5,), (float("nan"),)], "x double")
    numbers = rows.filter(~F.isnan("x"))
    assert quality._in_memory(numbers, suite).to_dict("list") == {"x": [1.5]}
    assert quality._in_memory(rows, suite) is None
    monkeypatch.setattr(quality, "IN_MEMORY_ROWS", 1)
    assert quality._in_memory(numbers, suite) is not None and quality._in_memory(numbers.union(numbers), suite) is None
    monkeypatch.undo()
    suite.add_expectation(gx.expectations.ExpectColumnValuesToBeOfType(column="x", type_="DoubleType"))
    assert quality._in_memory(numbers, suite) is None
