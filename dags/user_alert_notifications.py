"""Downstream of ``user_alerts``: one notification per final alert row, put in an outbox once.

Scheduled per partition of the user_alerts results table's Asset (``PartitionedAssetTimetable``,
Airflow 3.2+): the pipeline DAG's quality gate emits one asset event per committed batch, naming
it in its extra and partitioned by its batch id (the interval start), so each batch gets a run of
its own, whose ``partition_key`` is that batch. This DAG's task reads exactly that batch's final
rows and adds them to the outbox Delta table (FINALRESULTS_OUTBOX, default ``var/outbox``) with
``deliver_once``, keyed by user and window: a retried or overlapping task adds nothing twice.
Whatever sends the messages (mail, pager) reads the outbox. Paths as in
``finalresults_pipelines.py``.
"""

import logging
import os
from datetime import datetime, timezone
from pathlib import Path

from airflow.providers.standard.operators.python import PythonOperator
from airflow.sdk import DAG, PartitionedAssetTimetable

from framework.airflow import published_batches, results_asset
from framework.batchjob import load_job

REPO = Path(__file__).resolve().parents[1]
WAREHOUSE = os.environ.get("FINALRESULTS_WAREHOUSE", str(REPO / "var" / "warehouse"))
OUTBOX = os.environ.get("FINALRESULTS_OUTBOX", str(REPO / "var" / "outbox"))
JOB = str(Path(os.environ.get("FINALRESULTS_JOBS", REPO / "jobs")) / "user_alerts.py")
ALERTS = results_asset(JOB, WAREHOUSE)
log = logging.getLogger(__name__)


def notify(**context) -> None:
    """Put the final alert rows of the triggering batches in the outbox, each (user, hour) once."""
    from pyspark.sql import functions as F

    from framework import Runtime, spark_session
    from framework.downstream import batch_rows, deliver_once

    batches = published_batches(context, ALERTS)
    log.info("partition %s, batches: %s", context["dag_run"].partition_key, batches)
    if all(b.get("rows_published") == 0 for b in batches):  # a backfill's events leave it unsaid: read
        return
    spark = spark_session("user-alert-notifications")
    rows = batch_rows(Runtime(spark, WAREHOUSE), load_job(JOB).PIPELINE, [b["batch_id"] for b in batches])
    messages = rows.select(
        "user_id",
        "window_start",
        "window_end",
        "emitted_batch_id",
        F.format_string(
            "user %s had only %d event(s) between %s and %s", "user_id", "events", "window_start", "window_end"
        ).alias("message"),
    )
    added = deliver_once(messages, f"{OUTBOX}/user_alert_notifications", ["user_id", "window_start", "window_end"])
    log.info("%d notification(s) added to the outbox for %d batch(es)", added, len(batches))


with DAG(
    dag_id="user_alert_notifications",
    schedule=PartitionedAssetTimetable(assets=ALERTS),
    start_date=datetime(2026, 1, 1, tzinfo=timezone.utc),
    max_active_runs=1,
    tags=["finalresults", "downstream"],
    description=__doc__.splitlines()[0],
    default_args={"retries": 2},
):
    PythonOperator(task_id="notify", python_callable=notify)
