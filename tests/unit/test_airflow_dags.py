"""The DAG files and the DAG factory, parsed by Airflow without running anything: they parse
cleanly and light, schedule real intervals in order, submit the job then gate it; and the
downstream side's reading of asset events (no Spark; Airflow runs are in ``tests/test_airflow.py``
and ``tests/test_airflow_scheduler.py``)."""

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

# Airflow reads its home when first imported: point it at a throwaway folder before that happens.
os.environ["AIRFLOW_HOME"] = tempfile.mkdtemp(prefix="airflow-home-")
os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"

ROOT = Path(__file__).resolve().parents[2]
DAGS = ROOT / "dags"
PIPELINES = {"user_alerts", "page_sessions", "sliding_metric"}


@pytest.fixture(scope="module")
def dagbag():
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(DAGS))


def test_dag_file_has_no_import_errors(dagbag):
    assert dagbag.import_errors == {}
    on_demand = {f"{p}_{kind}" for p in PIPELINES for kind in ("replay", "backfill")}
    assert set(dagbag.dag_ids) == PIPELINES | on_demand | {"user_alert_notifications"}


def test_parsing_the_dag_file_imports_no_spark():
    code = (
        "import runpy, sys; runpy.run_path(sys.argv[1]); "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pyspark', 'delta', 'great_expectations')))"
    )
    for dag_file in ("finalresults_pipelines.py", "user_alert_notifications.py"):
        done = subprocess.run(
            [sys.executable, "-c", code, str(DAGS / dag_file)], capture_output=True, text=True, env=os.environ
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == "[]"


@pytest.mark.parametrize("dag_id", sorted(PIPELINES))
def test_runs_are_ordered_intervals(dagbag, dag_id):
    from airflow.serialization.encoders import coerce_to_core_timetable
    from airflow.timetables.base import TimeRestriction

    dag = dagbag.dags[dag_id]
    timetable = coerce_to_core_timetable(dag.timetable)
    first = timetable.next_dagrun_info(
        last_automated_data_interval=None, restriction=TimeRestriction(dag.start_date, None, catchup=True)
    )
    second = timetable.next_dagrun_info(
        last_automated_data_interval=first.data_interval,
        restriction=TimeRestriction(dag.start_date, None, catchup=True),
    )
    assert first.data_interval.start == dag.start_date < first.data_interval.end == second.data_interval.start
    assert dag.max_active_runs == 1 and dag.catchup
    assert all(t.depends_on_past and t.wait_for_downstream and t.retries > 0 for t in dag.tasks)


@pytest.mark.parametrize("dag_id", sorted(PIPELINES))
def test_spark_submit_then_quality_gate(dagbag, dag_id):
    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

    dag = dagbag.dags[dag_id]
    batch, gate = dag.get_task("spark_batch"), dag.get_task("quality_gate")
    assert isinstance(batch, SparkSubmitOperator)
    assert batch.downstream_task_ids == {"quality_gate"} and not gate.downstream_task_ids
    assert batch.application == str(ROOT / "jobs" / f"{dag_id}.py")
    # coordinates, or the files recorded (Delta 4.4's jar names its Spark: delta-spark_4.2_2.13)
    assert len(re.findall(r"delta-spark_(?:[\d.]+_)?2\.13", batch.packages or batch.jars)) == 1
    args = batch.application_args
    assert args[:4] == [
        "--batch-start",
        "{{ data_interval_start.isoformat() }}",
        "--batch-end",
        "{{ data_interval_end.isoformat() }}",
    ]
    assert args[4::2] == ["--warehouse", "--landing", "--allow-gap", "--run-id"] and args[-1] == "{{ run_id }}"
    assert args[-3] == "{{ params.allow_gap }}" and dag.params["allow_gap"] is False
    # the gate's outlet is the results table's asset; its event names the run's batch (docs/design.md#downstream)
    sink = dagbag.dags[dag_id].get_task("spark_batch")  # same job module as the gate
    assert [a.uri for a in gate.outlets] == [f"file://{args[5]}/{dag_id}/{_sink(sink.application)}"]
    assert gate.op_kwargs["batch_start"] == args[1] and "replay" not in gate.op_kwargs


def _sink(job_file: str) -> str:
    from framework.orchestration.jobs import load_job

    return load_job(job_file).PIPELINE.sink


def test_the_downstream_dag_is_scheduled_on_the_alerts_asset(dagbag):
    alerts_gate = dagbag.dags["user_alerts"].get_task("quality_gate")
    downstream = dagbag.dags["user_alert_notifications"]
    assert type(downstream.timetable).__name__ == "PartitionedAssetTimetable"  # a run per batch (partition)
    assert [downstream.timetable.asset_condition] == alerts_gate.outlets
    assert dagbag.dags["user_alerts_replay"].get_task("quality_gate").outlets == []


def test_a_cron_schedule_gets_a_cron_interval_timetable_and_a_job_s_timedelta_a_delta_one(dagbag):
    from datetime import datetime, timezone

    from airflow.sdk import CronDataIntervalTimetable, DeltaDataIntervalTimetable

    from framework.airflow import pipeline_dag

    assert {type(dagbag.dags[p].timetable) for p in PIPELINES} == {CronDataIntervalTimetable}  # shown alike
    by_job = pipeline_dag(  # no schedule: the job's SCHEDULE, a timedelta
        str(ROOT / "jobs" / "page_sessions.py"),
        start_date=datetime(2026, 1, 1, tzinfo=timezone.utc),
        warehouse="/lake/warehouse",
        landing="/lake/landing",
        dag_id="page_sessions_by_job",
    )
    assert isinstance(by_job.timetable, DeltaDataIntervalTimetable)
    # the DAG's file is the one that called the factory (an executor's task process parses it)
    assert by_job.fileloc == __file__


def test_a_replay_dag_submits_the_job_with_its_params_then_gates(dagbag):
    dag = dagbag.dags["user_alerts_replay"]
    replay = dag.get_task("spark_replay")
    assert type(dag.timetable).__name__ == "NullTimetable" and dag.max_active_runs == 1  # manual runs only
    assert set(dag.params) == {"start", "end"} and dag.params["end"] == ""
    assert replay.downstream_task_ids == {"quality_gate"}
    assert replay.application == str(ROOT / "jobs" / "user_alerts.py")
    assert replay.application_args[:7] == [
        "--replay",
        "--batch-start",
        "{{ params.start }}",
        "--batch-end",
        "{{ params.end }}",
        "--every",
        "3600s",
    ]
    assert replay.application_args[7::2] == ["--warehouse", "--landing", "--run-id"]  # no catalog, no gap
    assert replay.application_args[-2:] == ["--run-id", "{{ run_id }}"]
    assert dag.get_task("quality_gate").op_kwargs["kind"] == "replay"


def test_a_catalog_schema_is_passed_to_the_job_and_the_dag_can_end():
    import datetime as dt

    from framework.orchestration.airflow import pipeline_dag

    start = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    dag = pipeline_dag(
        str(ROOT / "jobs" / "user_alerts.py"),
        None,
        start,
        warehouse="/w",
        landing="/l",
        end_date=start + dt.timedelta(hours=5),
        catalog="lake",
        metastore="/m",
        dag_id="with_catalog",
    )
    args = dag.get_task("spark_batch").application_args
    assert args[args.index("--catalog") :][:4] == ["--catalog", "lake", "--metastore", "/m"]
    assert args[4:] == [
        "--warehouse",
        "/w",
        "--landing",
        "/l",
        "--catalog",
        "lake",
        "--metastore",
        "/m",
        "--allow-gap",
        "{{ params.allow_gap }}",
        "--run-id",
        "{{ run_id }}",
    ]
    unnamed = pipeline_dag(  # an empty catalog name, as none: nothing registered
        str(ROOT / "jobs" / "user_alerts.py"), None, start, warehouse="/w", landing="/l", catalog="", dag_id="unnamed"
    )
    assert "--catalog" not in unnamed.get_task("spark_batch").application_args
    assert dag.end_date == start + dt.timedelta(hours=5)


def test_published_batches_reads_the_gate_extras_once_per_batch_in_commit_order():
    from types import SimpleNamespace as Event

    from framework.orchestration.airflow import published_batches

    asset = object()
    extras = [
        {"batch_id": "b2", "seq": 2},
        {"batch_id": "b1", "seq": 1},
        {"batch_id": "b2", "seq": 2},
        {"batch_id": "b3"},
        None,
        {},
    ]
    context = {"triggering_asset_events": {asset: [Event(extra=e) for e in extras]}}
    assert [b["batch_id"] for b in published_batches(context, asset)] == ["b1", "b2"]
    assert published_batches({}, asset) == []


def _gate_context():
    from collections import defaultdict
    from types import SimpleNamespace

    from airflow.sdk.definitions.asset import AssetUniqueKey
    from airflow.sdk.execution_time.context import OutletEventAccessor

    asset = object()
    events = defaultdict(lambda: OutletEventAccessor(key=AssetUniqueKey("results", "file:///lake/results")))
    return asset, {"task": SimpleNamespace(outlets=[asset]), "outlet_events": events, "run_id": "run-2"}


def test_the_quality_gate_reports_the_outcome_its_spark_task_left_without_spark(tmp_path):
    """The gate reads ``_gate/batch.json``: its run's outcome of its batch annotates the asset
    event; an outcome of another batch or run (its Spark task did not run) or failed expectations
    fail the task; nothing here starts a JVM or imports Great Expectations."""
    from framework.errors import FrameworkError, QualityGateError
    from framework.operations.outcome import Outcome, location
    from framework.orchestration.airflow import quality_gate

    job, warehouse = str(ROOT / "jobs" / "user_alerts.py"), str(tmp_path / "lake")
    where = Path(location(warehouse, "user_alerts", "batch"))
    where.parent.mkdir(parents=True)
    asset, context = _gate_context()
    with pytest.raises(FrameworkError, match=r"holds no validation by this run's Spark task.*clear the Spark task"):
        quality_gate(job, warehouse, "2026-01-01T01:00:00+00:00", **context)  # no file yet

    ran = Outcome("batch", "user_alerts", "2026-01-01T01:00:00", 2, 4, "2026-01-01T01:59:46", True, run_id="run-1")
    where.write_text(ran.to_json())
    with pytest.raises(FrameworkError, match=r"it holds batch '2026-01-01T01:00:00' of run 'run-1'"):
        quality_gate(job, warehouse, "2026-01-01T01:00:00+00:00", **context)  # another run's outcome
    ran = Outcome(**{**ran.__dict__, "run_id": "run-2"})
    where.write_text(ran.to_json())
    with pytest.raises(FrameworkError, match=r"of batch '2026-01-01T02:00:00'"):
        quality_gate(job, warehouse, "2026-01-01T02:00:00+00:00", **context)
    quality_gate(job, warehouse, "2026-01-01T01:00:00+00:00", **context)
    assert context["outlet_events"][asset].partition_keys == {"2026-01-01T01:00:00"}  # the interval start
    assert context["outlet_events"][asset].extra == {
        "pipeline": "user_alerts",
        "batch_id": "2026-01-01T01:00:00",
        "seq": 2,
        "rows_published": 4,
        "stream_time": "2026-01-01T01:59:46",
    }

    failing = "expect_compound_columns_to_be_unique(column_list=['user_id']): 2 of 8 rows unexpected"
    where.write_text(Outcome(**{**ran.__dict__, "failures": (failing,)}).to_json())
    asset, context = _gate_context()
    with pytest.raises(QualityGateError, match=r"1 critical expectation\(s\) failed(.|\n)*2 of 8 rows unexpected"):
        quality_gate(job, warehouse, "2026-01-01T01:00:00+00:00", **context)
    assert not context["outlet_events"][asset].extra  # no event for a batch whose table failed

    where.write_text(ran.to_json())
    script = (
        "import sys; from collections import defaultdict; from types import SimpleNamespace as N\n"
        "from framework.orchestration.airflow import quality_gate\n"
        f"quality_gate({job!r}, {warehouse!r}, '2026-01-01T01:00:00', task=N(outlets=[]), outlet_events={{}}, "
        "run_id='run-2')\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'pyspark', 'great_expectations', 'py4j'}))"
    )
    ran_alone = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert ran_alone.returncode == 0, ran_alone.stderr
    assert ran_alone.stdout.strip().splitlines()[-1] == "[]"


def test_the_gate_folder_is_a_reserved_name():
    from framework import Pipeline, agg
    from framework.errors import DefinitionError
    from framework.operations.outcome import GATE

    for name in (GATE, GATE.upper()):
        with pytest.raises(DefinitionError, match="quality-gate outcomes folder"):
            Pipeline("p").group_by("k").aggregate(agg.count("n")).to(name)


def test_a_replay_gate_reads_the_replay_outcome_and_emits_no_asset_event(tmp_path):
    from framework.errors import FrameworkError
    from framework.operations.outcome import Outcome, location
    from framework.orchestration.airflow import quality_gate

    job, warehouse = str(ROOT / "jobs" / "user_alerts.py"), str(tmp_path / "lake")
    where = Path(location(warehouse, "user_alerts", "replay"))
    where.parent.mkdir(parents=True)
    where.write_text(Outcome("replay", "user_alerts", "a..b", 3, 0, None, False, run_id="manual-1").to_json())
    asset, context = _gate_context()
    with pytest.raises(FrameworkError, match="replay 'a..b' of run 'manual-1'"):  # an earlier replay's
        quality_gate(job, warehouse, kind="replay", **context)
    quality_gate(job, warehouse, kind="replay", **{**context, "run_id": "manual-1"})
    assert not context["outlet_events"][asset].extra
    where.write_text("{not json")
    with pytest.raises(FrameworkError, match="cannot read the quality-gate outcome"):
        quality_gate(job, warehouse, kind="replay", **context)


def test_a_backfill_gate_announces_each_interval_and_downstream_reads_them_in_order(tmp_path):
    """A backfill's outcome names the intervals it covered: the gate emits an asset event per
    interval, its batch id the partition key, and ``published_batches`` reads each as a batch."""
    from types import SimpleNamespace

    from framework.operations.outcome import Outcome, location
    from framework.orchestration.airflow import backfill_dag, published_batches, quality_gate

    job, warehouse = str(ROOT / "jobs" / "user_alerts.py"), str(tmp_path / "lake")
    where = Path(location(warehouse, "user_alerts", "backfill"))
    where.parent.mkdir(parents=True)
    hours = [f"2026-01-01T0{h}:00:00" for h in range(3)]
    ran = Outcome("backfill", "user_alerts", f"{hours[0]}..{hours[-1]}", 3, 7, None, True, run_id="run-2")
    where.write_text(Outcome(**{**ran.__dict__, "batches": tuple(hours)}).to_json())
    asset, context = _gate_context()
    quality_gate(job, warehouse, kind="backfill", **context)
    events = context["outlet_events"][asset]
    assert events.partition_keys == set(hours)
    assert events.extra == {"pipeline": "user_alerts", "backfill": f"{hours[0]}..{hours[-1]}", "rows_published": 7}
    received = [SimpleNamespace(extra=events.extra, partition_key=key) for key in sorted(hours, reverse=True)]
    read = published_batches({"triggering_asset_events": {asset: received}}, asset)
    assert [b["batch_id"] for b in read] == hours

    dag = backfill_dag(job, warehouse=warehouse, landing=str(tmp_path / "landing"), dag_file=__file__)
    run = dag.get_task("spark_backfill")
    assert run.downstream_task_ids == {"quality_gate"} and set(dag.params) == {"start", "end", "chunk_records"}
    assert run.application_args[:2] == ["--backfill", "--batch-start"]
    assert "--chunk-records" in run.application_args and "--every" in run.application_args
    assert dag.get_task("quality_gate").outlets and dag.schedule is None


def test_delta_s_jars_are_passed_as_the_files_ivy_resolved_while_they_are_all_there(tmp_path, monkeypatch):
    """spark-submit resolves ``--packages`` with Ivy at every start; the files resolved at install
    are passed as ``--jars`` instead, and the coordinates again once one of them is gone."""
    import json
    from datetime import datetime, timezone

    from framework.airflow import DELTA_PACKAGE, pipeline_dag
    from framework.storage import jars

    files = [tmp_path / "delta-spark_2.13.jar", tmp_path / "delta-storage.jar"]
    for f in files:
        f.write_bytes(b"")
    monkeypatch.setattr(jars, "RECORDING", tmp_path / "jars.json")
    jars.RECORDING.write_text(json.dumps({DELTA_PACKAGE: [str(f) for f in files]}))

    def submitted(dag_id):
        dag = pipeline_dag(
            str(ROOT / "jobs" / "user_alerts.py"),
            start_date=datetime(2026, 1, 1, tzinfo=timezone.utc),
            warehouse="/lake/warehouse",
            landing="/lake/landing",
            dag_id=dag_id,
        )
        batch = dag.get_task("spark_batch")
        return batch.packages, batch.jars

    assert submitted("with_jars") == (None, ",".join(str(f) for f in files))
    files[1].unlink()
    assert submitted("with_packages") == (DELTA_PACKAGE, None)
