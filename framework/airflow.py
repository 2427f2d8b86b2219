"""Airflow 3 DAGs for pipelines: each data interval becomes one batch, strictly in order.

``pipeline_dag(job)`` builds ``spark_batch >> quality_gate`` for a job module (SPEC 6):

- an *interval* timetable, so ``data_interval_start < data_interval_end`` (Airflow 3's plain cron
  schedules give runs whose interval is a single instant, which would read no records);
- ``max_active_runs=1``, ``depends_on_past`` and ``wait_for_downstream``: batches apply in order,
  and a batch whose quality gate failed holds back the next one;
- ``catchup=True`` by default: every interval since ``start_date`` must run once, or the records
  that arrived in a skipped interval would never be read;
- retries are safe: a batch re-run with the same input is a no-op ("already committed").

The Spark task runs ``spark-submit jobs/<name>.py`` through the ``spark_default`` connection
(its host is the master: ``local[*]`` for one machine, ``spark://...`` or ``yarn`` for a cluster).
The quality gate validates the whole committed results table with the pipeline's Great Expectations
suite (``framework.validation``); each batch has already audited its own rows before publishing.

This module is imported by DAG files, which the scheduler parses often: nothing here imports
Spark; the job module is read for its pipeline definition only.
"""
from __future__ import annotations

import logging
import sys
from datetime import datetime, timedelta
from importlib.metadata import version
from pathlib import Path

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.providers.standard.operators.python import PythonOperator
from airflow.sdk import DAG, CronDataIntervalTimetable, DeltaDataIntervalTimetable

from .batchjob import load_job

log = logging.getLogger("framework.airflow")

# spark-submit starts the JVM before the job's Python runs, so Delta's jars must be on its command line.
DELTA_PACKAGE = f"io.delta:delta-spark_2.13:{version('delta-spark')}"


def quality_gate(job: str, warehouse: str) -> None:
    """Task callable: validate the job's committed results table; fail the task listing violations.

    It reads the table with a Spark session of the Airflow worker ($SPARK_MASTER, else local[*]),
    not through ``spark_default``: the check is a few scans of one results table.
    """
    from .session import spark_session
    from .validation import validate_results

    pipeline = load_job(job).PIPELINE
    report = validate_results(spark_session(f"finalresults-{pipeline.name}-gate"), pipeline, warehouse)
    if report is None:
        log.info("pipeline %r: no final result emitted yet: nothing to validate", pipeline.name)
        return
    log.info("%s%s", report.summary(), f"\nData Docs: {report.docs}" if report.docs else "")
    report.raise_for_failures()


def _timetable(schedule: timedelta | str, timezone: str):
    if isinstance(schedule, timedelta):
        return DeltaDataIntervalTimetable(schedule)
    if isinstance(schedule, str):
        return CronDataIntervalTimetable(schedule, timezone=timezone)
    raise TypeError(f"'schedule' must be a timedelta or a cron expression, got {schedule!r}")


def _local_spark_tools() -> tuple[str | None, dict[str, str]]:
    """spark-submit and the Python of this interpreter's environment (pyspark ships both)."""
    binary = Path(sys.executable).with_name("spark-submit")
    return (str(binary) if binary.exists() else None), {"PYSPARK_PYTHON": sys.executable}


def pipeline_dag(job_module: str, schedule: timedelta | str | None = None, start_date: datetime | None = None, *,
                 warehouse: str, landing: str, dag_id: str | None = None, catchup: bool = True,
                 timezone: str = "UTC", conn_id: str = "spark_default", retries: int = 2,
                 retry_delay: timedelta = timedelta(minutes=1), spark_conf: dict[str, str] | None = None,
                 spark_env: dict[str, str] | None = None, spark_binary: str | None = None,
                 packages: str | None = DELTA_PACKAGE) -> DAG:
    """A DAG running ``job_module`` (a ``jobs/<name>.py`` path or dotted name) once per interval.

    ``schedule`` is a timedelta (fixed intervals) or a cron expression (intervals between cron
    ticks, in ``timezone``); it defaults to the job's ``SCHEDULE``. ``warehouse`` and ``landing``
    are the Delta folders passed to the job. ``spark_binary`` and ``spark_env`` default to the
    spark-submit and Python of this environment; override them for a cluster.

    Example::

        user_alerts = pipeline_dag("jobs/user_alerts.py", timedelta(hours=1), datetime(2026, 1, 1),
                                   warehouse="/lake/warehouse", landing="/lake/landing")
    """
    job = load_job(job_module)
    pipeline, application = job.PIPELINE, str(Path(job.__file__).resolve())
    schedule = schedule if schedule is not None else getattr(job, "SCHEDULE", None)
    if schedule is None:
        raise TypeError(f"job {job_module!r} declares no SCHEDULE: pass 'schedule'")
    if start_date is None:
        raise TypeError("'start_date' is required: the first interval the pipeline must process")
    local_binary, local_env = _local_spark_tools()
    default_args = {"depends_on_past": True, "wait_for_downstream": True,
                    "retries": retries, "retry_delay": retry_delay}
    with DAG(dag_id=dag_id or pipeline.name, schedule=_timetable(schedule, timezone), start_date=start_date,
             catchup=catchup, max_active_runs=1, default_args=default_args, tags=["finalresults"],
             description=(job.__doc__ or pipeline.name).strip().splitlines()[0],
             doc_md=f"```\n{pipeline.describe()}\n```") as dag:
        batch = SparkSubmitOperator(
            task_id="spark_batch", conn_id=conn_id, application=application, name=f"finalresults-{pipeline.name}",
            packages=packages, conf={"spark.log.level": "WARN", **(spark_conf or {})},
            env_vars=spark_env if spark_env is not None else local_env,
            spark_binary=spark_binary or local_binary,
            application_args=["--batch-start", "{{ data_interval_start.isoformat() }}",
                              "--batch-end", "{{ data_interval_end.isoformat() }}",
                              "--warehouse", warehouse, "--landing", landing])
        gate = PythonOperator(task_id="quality_gate", python_callable=quality_gate,
                              op_kwargs={"job": application, "warehouse": warehouse})
        batch >> gate
    return dag
