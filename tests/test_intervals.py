"""No skipped interval (SPEC §4): a job's batch records its data interval, and one that does not
start where the last committed interval ended is refused before anything is written, naming the
missing interval and how to bring its records in; running that interval first gives the table
of a run that never skipped."""

import datetime as dt

import pytest
from harness import frame, results
from test_exactly_once import BATCHES, pipeline

from framework import BatchOrderError, Runtime, SkippedIntervalError

EPOCH = dt.datetime(1970, 1, 1)
HOURS = [EPOCH + dt.timedelta(milliseconds=10 * i) for i in range(4)]  # three 10 ms intervals


def _run(rt, p, i, **options):
    offset = sum(len(b) for b in BATCHES[:i])
    return rt.run_batch(
        p, f"b{i}", frame(rt.spark, BATCHES[i], offset), batch_end=HOURS[i + 1], batch_start=HOURS[i], **options
    )


def test_a_skipped_interval_is_refused_and_running_it_first_gives_the_unskipped_table(spark, tmp_path):
    p = pipeline("intervals")
    clean = Runtime(spark, str(tmp_path / "clean"), quality=False)
    for i in range(3):
        _run(clean, p, i)
    rt = Runtime(spark, str(tmp_path / "lake"), quality=False)
    _run(rt, p, 0)
    with pytest.raises(SkippedIntervalError) as refused:
        _run(rt, p, 2)
    assert refused.value.missing == (HOURS[1], HOURS[2])
    message = str(refused.value)
    assert "pipeline 'intervals', batch 'b2': the interval [" in message and "was never run" in message
    assert f"finalresults backfill <job> --from {HOURS[1].isoformat()} --to {HOURS[2].isoformat()}" in message
    assert [r.batch_id for r in rt.read_ledger(p).collect()] == ["b0"]  # nothing written
    assert _run(rt, p, 1).status == "committed"  # the command the error names: the missing interval
    assert _run(rt, p, 2).status == "committed"
    assert results(rt, p) == results(clean, p)
    recorded = {r.batch_id: (r.interval_start, r.interval_end) for r in rt.read_ledger(p).collect()}
    assert recorded["b1"] == (10, 20)


def test_a_gap_the_caller_intends_runs_and_direct_batches_keep_todays_rule(spark, tmp_path):
    p = pipeline("gap")
    rt = Runtime(spark, str(tmp_path / "lake"), quality=False)
    _run(rt, p, 0)
    overlapping = frame(spark, BATCHES[1], len(BATCHES[0]))
    with pytest.raises(
        BatchOrderError, match=r"starts at 1970-01-01 00:00:00.005000, before the last committed batch 'b0'"
    ):
        rt.run_batch(p, "b1", overlapping, batch_start=EPOCH + dt.timedelta(milliseconds=5), batch_end=HOURS[2])
    assert _run(rt, p, 2, allow_gap=True).status == "committed"  # b1's interval skipped on purpose
    direct = Runtime(spark, str(tmp_path / "direct"), quality=False)
    direct.run_batch(p, "b0", frame(spark, BATCHES[0]))  # no interval: nothing to check
    assert direct.run_batch(p, "b2", frame(spark, BATCHES[2], 7)).status == "committed"
