"""Validating committed results (after a job's run, for the Airflow quality gate, and
``finalresults validate``)."""

import json
from datetime import datetime as T

import pytest

from framework import Runtime
from framework.errors import FrameworkError
from framework.operations import outcome
from framework.operations.validation import after_run, validate_results
from framework.orchestration.cli import main
from framework.orchestration.jobs import load_job

JOB = """
from datetime import timedelta as td
from framework import BufferConfig, Pipeline, Suppressed, TimeWindows, agg

LANDING = "events"
PIPELINE = (Pipeline("hourly", arrival="seq").group_by("user")
            .windowed_by(TimeWindows.of_size_and_grace(td(hours=1), td(minutes=10)))
            .aggregate(agg.count("events"))
            .suppress(Suppressed.until_window_closes(BufferConfig.unbounded())).to("out"))
"""


def records(spark, *rows):
    return spark.createDataFrame(list(rows), "user string, ts timestamp, seq long")


@pytest.mark.slow
def test_nothing_to_validate_then_valid_then_a_duplicate_fails_the_gate(spark, tmp_path, capsys):
    job = tmp_path / "hourly.py"
    job.write_text(JOB)
    pipeline, warehouse = load_job(str(job)).PIPELINE, str(tmp_path / "lake")
    rt = Runtime(spark, warehouse)
    with pytest.raises(FrameworkError, match="no committed batch"):
        validate_results(spark, pipeline, warehouse)

    b1 = rt.run_batch(pipeline, "b1", records(spark, ("a", T(2026, 1, 1, 0, 5), 1)))
    assert validate_results(spark, pipeline, warehouse) is None  # no window closed yet
    left = after_run(spark, pipeline, warehouse, b1)  # what the job leaves for the quality gate
    assert not left.validated and left.success and outcome.read(warehouse, "hourly", "batch") == left

    b2 = rt.run_batch(pipeline, "b2", records(spark, ("b", T(2026, 1, 1, 1, 20), 2)))  # closes a's [00:00, 01:00)
    assert validate_results(spark, pipeline, warehouse).success
    left = after_run(spark, pipeline, warehouse, b2)
    assert (left.batch_id, left.seq, left.rows_published, left.validated, left.success) == ("b2", 2, 1, True, True)

    output = rt.tables(pipeline).output  # someone appends a copy by hand
    spark.read.format("delta").load(output).write.format("delta").mode("append").save(output)
    b3 = rt.run_batch(pipeline, "b3", records(spark, ("c", T(2026, 1, 1, 2, 30), 3)))  # publishes b's window
    assert main(["validate", str(job), "--warehouse", warehouse]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("finalresults: error: ")
    assert "expect_compound_columns_to_be_unique" in err[0]
    left = after_run(spark, pipeline, warehouse, b3, run_id="run-3")
    assert outcome.read(warehouse, "hourly", "batch") == left and left.validated and left.run_id == "run-3"
    assert len(left.failures) == 1 and "expect_compound_columns_to_be_unique" in left.failures[0]

    # a batch that publishes nothing does not pass a table whose last validation failed
    b4 = rt.run_batch(pipeline, "b4", records(spark, ("c", T(2026, 1, 1, 2, 40), 4)))
    assert b4.emitted == 0
    left = after_run(spark, pipeline, warehouse, b4)
    assert left.validated and len(left.failures) == 1
    spark.read.format("delta").load(output).dropDuplicates().write.format("delta").mode("overwrite").save(output)
    b5 = rt.run_batch(pipeline, "b5", records(spark, ("c", T(2026, 1, 1, 2, 45), 5)))
    left = after_run(spark, pipeline, warehouse, b5)  # the fix by hand is a new version: validated, passes
    assert (b5.emitted, left.validated, left.success) == (0, True, True)
    b6 = rt.run_batch(pipeline, "b6", records(spark, ("c", T(2026, 1, 1, 2, 50), 6)))
    left = after_run(spark, pipeline, warehouse, b6)  # unchanged since that validation: not again
    assert (b6.emitted, left.validated, left.success) == (0, False, True)

    # the next batch's rows are validated with the rows they could duplicate, not the whole table
    b7 = rt.run_batch(pipeline, "b7", records(spark, ("d", T(2026, 1, 1, 3, 30), 7)))  # closes c's hour
    assert rt.read_output(pipeline).count() > b7.emitted == 1
    results = spark.read.format("delta").load(f"{warehouse}/quality_results")
    table_checks = results.where("batch_id IS NULL").count()  # the job's validations: no batch id, the audits have one
    seven = after_run(spark, pipeline, warehouse, b7)
    assert (seven.validated, seven.success, seven.since_version) == (True, True, left.table_version)
    # its publication is the one commit since the table passed: the batch's audit checked those rows
    assert "batch 'b7'" in seven.summary and seven.docs == b7.audit.report.docs
    assert results.where("batch_id IS NULL").count() == table_checks  # Great Expectations did not run again
    audit = results.where("batch_id = 'b7' AND expectation like 'expect_column_values_to_not_be_null%'")
    assert {r.observed for r in audit.collect()} == {"0 of 1 rows unexpected"}


def test_rows_appended_while_a_batch_publishes_are_validated_after_it(spark, tmp_path):
    """A batch's audit stands for the table's validation only when its publication is the one
    commit since the table last passed: a copy appended by hand between the audit and the
    publication is found by the job's validation."""
    job = tmp_path / "hourly.py"
    job.write_text(JOB)
    pipeline, warehouse = load_job(str(job)).PIPELINE, str(tmp_path / "lake")
    output = Runtime(spark, warehouse).tables(pipeline).output

    def copy_by_hand(point):
        if point == "publish":
            spark.read.format("delta").load(output).write.format("delta").mode("append").save(output)

    hours = [
        ("a", T(2026, 1, 1, 0, 5)),
        ("b", T(2026, 1, 1, 1, 20)),
        ("c", T(2026, 1, 1, 2, 30)),
        ("d", T(2026, 1, 1, 3, 30)),
    ]
    outcomes = []
    for i, (user, ts) in enumerate(hours, start=1):
        rt = Runtime(spark, warehouse, before_write=copy_by_hand if i == 4 else None)
        ran = rt.run_batch(pipeline, f"b{i}", records(spark, (user, ts, i)))
        outcomes.append(after_run(spark, pipeline, warehouse, ran))
    second, third, fourth = outcomes[1:]
    assert second.validated and second.success and second.since_version is None  # the table's first rows: all of it
    assert third.validated and third.success and "batch 'b3'" in third.summary  # its audit
    assert fourth.validated and not fourth.success and "batch 'b4'" not in fourth.summary
    assert "expect_compound_columns_to_be_unique" in fourth.failures[0]


def test_a_table_without_windows_and_one_key_is_validated_by_that_key(spark, tmp_path):
    """Its suite's uniqueness is the key's own (GX has no compound of one column), and the job's
    validation after a batch joins the new rows to the published ones by key alone (no window)."""
    from framework import Pipeline, agg

    p = Pipeline("latest", arrival="seq").group_by("user").aggregate(agg.count("events")).to("latest_by_user")
    warehouse = str(tmp_path / "lake")
    rt = Runtime(spark, warehouse)
    b1 = rt.run_batch(p, "b1", records(spark, ("a", T(2026, 1, 1, 0, 5), 1)))
    first = after_run(spark, p, warehouse, b1)
    b2 = rt.run_batch(p, "b2", records(spark, ("b", T(2026, 1, 1, 0, 6), 2), ("a", T(2026, 1, 1, 0, 7), 3)))
    second = after_run(spark, p, warehouse, b2)
    assert (first.validated, first.success, second.validated, second.success) == (True, True, True, True)
    assert second.since_version == first.table_version  # the new rows and their twins, not the whole table
    assert sorted((r.user, r.events) for r in rt.read_output(p).collect()) == [("a", 2), ("b", 1)]
    assert validate_results(spark, p, warehouse).success


def test_the_status_a_job_leaves_after_a_batch_is_the_one_its_tables_give(spark, tmp_path, monkeypatch):
    """After its batch a job advances the status the job before it left with what it holds (its
    ledger row's values, its audit, its validation) instead of reading the ledger, the metrics
    and ``quality_results`` again: what it leaves must be what ``status.read`` finds there."""
    from framework.operations import status

    job = tmp_path / "hourly.py"
    job.write_text(JOB)
    pipeline, warehouse = load_job(str(job)).PIPELINE, str(tmp_path / "lake")
    rt = Runtime(spark, warehouse)
    reads, read = [], status.read
    monkeypatch.setattr(status, "read", lambda *args: reads.append(args) or read(*args))
    batches = [
        [("a", T(2026, 1, 1, 0, 5), 1)],
        [("b", T(2026, 1, 1, 1, 20), 2)],  # closes a's hour
        [("z", T(2026, 1, 1, 0, 30), 3), ("c", T(2026, 1, 1, 2, 30), 4)],  # a late record; closes b's hour
        [("c", T(2026, 1, 1, 2, 40), 5)],  # publishes nothing
    ]
    for i, rows in enumerate(batches, start=1):
        after_run(spark, pipeline, warehouse, rt.run_batch(pipeline, f"b{i}", records(spark, *rows)))
        left, found = (
            json.dumps(s.to_json(), default=str)
            for s in (status.load(warehouse, "hourly"), read(spark, warehouse, "hourly"))
        )
        assert left == found
    assert len(reads) == 1  # the first job had no status to start from
    left = status.load(warehouse, "hourly")
    assert [b["gate"] is not None for b in left.batches] == [False, True, True, False]
    assert (left.batch_count, left.totals["late_records"]) == (4, 1)
