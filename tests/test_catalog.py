"""A pipeline's tables in a catalog schema (docs/design.md#catalog-schema), queryable by name (``framework.catalog``).

The shared test session has Spark's in-memory catalog; the last test shows the tables outliving
their session in an embedded metastore, with batches run and a query in separate processes.
"""

import datetime as dt
import os
import subprocess
import sys
from pathlib import Path

import pytest
from harness import run_stream

from framework import BufferConfig, FrameworkError, Pipeline, Runtime, Suppressed, TimeWindows, agg

ROOT = Path(__file__).resolve().parents[1]


def _pipeline(name="cat_alerts", sink="cat_alert_windows"):
    return (
        Pipeline(name, timestamp="ts", arrival="seq")
        .group_by("k")
        .windowed_by(TimeWindows.of_size_and_grace(dt.timedelta(milliseconds=10), dt.timedelta(0)))
        .aggregate(agg.count("n"))
        .suppress(Suppressed.until_window_closes(BufferConfig.unbounded()))
        .to(sink)
    )


STREAM = [[("a", 1, 1), ("b", 2, 1)], [("a", 12, 1), ("a", 15, 1)], [("b", 31, 1), ("a", 3, 1)]]  # a@3: late


def test_tables_are_external_tables_of_the_schema(spark, tmp_path):
    p = _pipeline()
    rt = Runtime(spark, str(tmp_path / "wh"), quality=False, catalog="lake_a")
    run_stream(rt, p, STREAM)
    by_name = spark.sql("SELECT k, window_start, n, emitted_batch_id FROM lake_a.cat_alert_windows").collect()
    by_path = rt.read_output(p).select("k", "window_start", "n", "emitted_batch_id").collect()
    assert len(by_path) == 3 and sorted(by_name) == sorted(by_path)
    names = [r.tableName for r in spark.sql("SHOW TABLES IN lake_a").collect()]
    tables = {name: spark.catalog.getTable(f"lake_a.{name}") for name in names}
    views = {
        "cat_alerts_ledger",
        "cat_alerts_window_state",
        "cat_alerts_late_records",
        "cat_alerts_rejected_records",
        "cat_alerts_metrics",
    }
    assert set(tables) == {"cat_alert_windows", "cat_alerts_state", *views}
    assert {name for name, t in tables.items() if t.tableType == "VIEW"} == views
    assert {t.tableType for name, t in tables.items() if name not in views} == {"EXTERNAL"}
    by_view = spark.sql("SELECT seq, records_in, late_records FROM lake_a.cat_alerts_metrics").collect()
    assert sorted(map(tuple, by_view)) == sorted(
        map(tuple, rt.read_metrics(p).select(*by_view[0].__fields__).collect())
    )
    assert spark.sql("SELECT event_time FROM lake_a.cat_alerts_late_records").count() == 1
    ledger = spark.sql("SELECT batch_id FROM lake_a.cat_alerts_ledger WHERE status = 'committed' ORDER BY seq")
    assert [r.batch_id for r in ledger.collect()] == ["b0000", "b0001", "b0002"]
    # a new runtime (another job run) finds them registered and registers nothing twice
    again = Runtime(spark, str(tmp_path / "wh"), quality=False, catalog="lake_a")
    assert sorted(again.register(p)) == sorted(f"lake_a.{name}" for name in tables)


def test_a_name_the_schema_holds_for_another_table_stops_the_batch_before_it_runs(spark, tmp_path):
    p = _pipeline("cat_other")
    run_stream(Runtime(spark, str(tmp_path / "first"), quality=False, catalog="lake_b"), p, STREAM[:1])
    second = Runtime(spark, str(tmp_path / "second"), quality=False, catalog="lake_b")
    taken = r"catalog table lake_b\.cat_other_state already exists at \S*first/cat_other/_state, not at \S*second"
    with pytest.raises(FrameworkError, match=taken):
        run_stream(second, p, STREAM[:1])
    assert not os.path.exists(tmp_path / "second" / "cat_other" / "_state")  # nothing ran


def test_the_schema_name_is_an_identifier(spark, tmp_path):
    with pytest.raises(FrameworkError, match="catalog schema 'lake; DROP' must be an identifier"):
        Runtime(spark, str(tmp_path), catalog="lake; DROP")


@pytest.mark.slow
def test_an_embedded_metastore_keeps_the_tables_for_the_next_process(spark, tmp_path):
    """``finalresults backfill --catalog lake --metastore DIR`` in one process, a query by name in
    another (from another working folder: the warehouse was given relative to the first's)."""
    sys.path.insert(0, str(ROOT))
    from jobs import sample_data

    sample_data.generate(
        spark, str(tmp_path / "landing"), dt.datetime(2026, 1, 1), dt.datetime(2026, 1, 1, 2), tables=("user_events",)
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("FINALRESULTS")}
    env.update(
        PYTHONPATH=str(ROOT),
        FINALRESULTS_WAREHOUSE="wh",  # relative: to the working folder
        FINALRESULTS_LANDING=str(tmp_path / "landing"),
    )
    ran = subprocess.run(
        [
            sys.executable,
            "-m",
            "framework",
            "backfill",
            str(ROOT / "jobs" / "user_alerts.py"),
            "--from",
            "2026-01-01T00:00",
            "--to",
            "2026-01-01T02:00",
            "--catalog",
            "lake",
            "--metastore",
            str(tmp_path / "metastore"),
        ],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr[-3000:]
    query = (
        "import sys; from framework import spark_session; s = spark_session('q', metastore=sys.argv[1]); "
        "print(s.sql('SELECT count(*) FROM lake.user_alert_windows').first()[0], "
        "s.sql('SELECT count(*) FROM lake.user_alerts_ledger').first()[0])"
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    done = subprocess.run(
        [sys.executable, "-c", query, str(tmp_path / "metastore")],
        env=env,
        cwd=elsewhere,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows, batches = map(int, done.stdout.split())
    assert rows > 0 and batches == 2
