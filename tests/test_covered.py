"""What lets an Airflow run of a covered interval end with no Spark job (framework/operations/covered.py):
a batch recorded committed and valid is vouched for only while the landing table is at the version
its job read, only for the batches recorded, only for that landing table; read with files alone."""

import datetime as dt
import sys
from pathlib import Path

from framework.operations import covered
from framework.storage import tables

ROOT = Path(__file__).resolve().parents[1]
START = dt.datetime(2026, 1, 1)


def test_a_batch_is_vouched_for_only_while_the_landing_table_is_as_its_job_read_it(spark, tmp_path):
    sys.path.insert(0, str(ROOT))
    from jobs import sample_data

    warehouse, landing = str(tmp_path / "warehouse"), str(tmp_path / "landing")
    sample_data.generate(spark, landing, START, START + dt.timedelta(hours=2), tables=("user_events",))
    events = f"{landing}/user_events"
    version = tables.latest_version(spark, events)
    assert covered.covers(warehouse, "user_alerts", "2026-01-01T00:00:00", events) is None  # no file yet

    covered.record(spark, warehouse, "user_alerts", events, version, ["2026-01-01T00:00:00"])
    covered.record(spark, warehouse, "user_alerts", events, version, ["2026-01-01T01:00:00"])
    for hour in ("2026-01-01T00:00:00", "2026-01-01T01:00:00"):
        assert "already committed, no Spark job" in covered.covers(warehouse, "user_alerts", hour, events)
    assert covered.covers(warehouse, "user_alerts", "2026-01-01T02:00:00", events) is None  # not recorded
    assert covered.covers(warehouse, "user_alerts", "2026-01-01T00:00:00", f"{landing}/other") is None

    # Records landed since (a late file, a fix): the job must run and see them.
    spark.read.format("delta").load(events).limit(1).write.format("delta").mode("append").save(events)
    assert covered.covers(warehouse, "user_alerts", "2026-01-01T00:00:00", events) is None
    covered.record(spark, warehouse, "user_alerts", events, version + 1, ["2026-01-01T01:00:00"])
    assert covered.covers(warehouse, "user_alerts", "2026-01-01T00:00:00", events) is None  # dropped: older version
    assert covered.covers(warehouse, "user_alerts", "2026-01-01T01:00:00", events) is not None
