"""Airflow 3 DAGs for pipelines: each data interval becomes one batch, strictly in order.

``pipeline_dag(job)`` builds ``spark_batch >> quality_gate`` for a job module (docs/design.md#dags), and
``replay_dag(job)`` a manually triggered ``spark_replay >> quality_gate`` for its replays:

- an *interval* timetable, so ``data_interval_start < data_interval_end`` (Airflow 3's plain cron
  schedules give runs whose interval is a single instant, which would read no records);
- ``max_active_runs=1``, ``depends_on_past`` and ``wait_for_downstream``: batches apply in order,
  and a batch whose quality gate failed holds back the next one;
- ``catchup=True`` by default: every interval since ``start_date`` must run once, or the records
  that arrived in a skipped interval would never be read;
- retries are safe: a batch re-run with the same input is a no-op ("already committed");
- data-aware downstream: the quality gate's outlet is the results table's ``Asset``
  (``results_asset``); its event's extra names the batch it passed (id, seq, rows published,
  stream time), so a DAG scheduled on the asset acts on exactly that batch's rows
  (``published_batches``, then ``framework.downstream``). The event is partitioned (Airflow
  3.2+, AIP-76): its partition key is the batch id, the interval start as ``%Y-%m-%dT%H:%M:%S``
  UTC, which Airflow's temporal partition mappers read as they are, so a DAG scheduled with
  ``PartitionedAssetTimetable`` runs once per batch (``dags/user_alert_notifications.py``).
  Replays emit no asset event: they replace rows that downstream already acted on, which is an
  operator's decision to follow up.

The Spark task runs ``spark-submit jobs/<name>.py`` through the ``spark_default`` connection
(its host is the master: ``local[*]`` for one machine, ``spark://...`` or ``yarn`` for a cluster).
Given a Spark Connect connection (``connect_conn_id``, the Spark provider's ``spark_connect``
type), it runs the job's file with the worker's Python instead, as a thin client of that server:
no spark-submit, no JVM and no Java on the worker (docs/operations.md#spark-connect).
The job validates the whole committed results table with the pipeline's Great Expectations suite
(``framework.operations.validation``) in its own Spark session after the batch; the quality gate
reports that outcome, so a run starts Spark once. Each batch has already audited its own rows
before publishing.

This module is imported by DAG files, which the scheduler parses often: nothing here imports
Spark; the job module is read for its pipeline definition only.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from types import ModuleType
from typing import Any, Mapping
from urllib.parse import urlparse

try:
    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
    from airflow.providers.standard.operators.python import PythonOperator, ShortCircuitOperator
    from airflow.sdk import DAG, Asset, CronDataIntervalTimetable, DeltaDataIntervalTimetable, Param
except ModuleNotFoundError as e:  # Airflow is an extra: Spark jobs on a cluster do not need it
    raise ImportError(f"framework.airflow needs Airflow: pip install 'finalresults[airflow]' ({e})") from e

from ..definition.pipeline import Pipeline
from ..errors import FrameworkError, QualityGateError
from ..operations import covered, outcome
from ..storage import jars
from .jobs import batch_id, load_job, parse_time

log = logging.getLogger("framework.airflow")

# spark-submit starts the JVM before the job's Python runs, so Delta's jars must be on its command line.
DELTA_PACKAGE = jars.DELTA_PACKAGE
INTERVAL_START = "{{ data_interval_start.isoformat() }}"
RUN_ID = "{{ run_id }}"  # the quality gate reads only the outcome its own run's Spark task left


def results_asset(job_module: str, warehouse: str) -> Asset:
    """The Airflow ``Asset`` of a job's results table: what its pipeline DAG's quality gate
    updates once per committed batch, and what downstream DAGs schedule on.

    Example::

        alerts = results_asset("jobs/user_alerts.py", warehouse="/lake/warehouse")
        with DAG("notify", schedule=[alerts]): ...
    """
    return _results_asset(load_job(job_module).PIPELINE, warehouse)


def _results_asset(p: Pipeline, warehouse: str) -> Asset:
    path = f"{warehouse.rstrip('/')}/{p.name}/{p.sink or 'output'}"  # tables.Tables.output, without importing Spark
    uri = path if urlparse(path).scheme else Path(path).resolve().as_uri()
    return Asset(name=f"finalresults.{p.name}.{p.sink or 'output'}", uri=uri, group="finalresults")


def _application(job: ModuleType) -> str:
    """The job's file, which spark-submit runs."""
    if job.__file__ is None:
        raise TypeError(f"job {job.__name__!r} has no file for spark-submit to run")
    return str(Path(job.__file__).resolve())


def published_batches(context: Mapping[str, Any], asset: Asset) -> list[dict]:
    """The batches named by the asset events that triggered this run (extras from
    ``quality_gate``), in commit order; empty when the run was not triggered by ``asset``.

    A pipeline DAG's run announces its batch with its extra (batch id, seq, rows published,
    stream time); a backfill announces each interval as an event of its own whose partition key
    is the batch id, all sharing the range's extra: those batches are named by their ids alone."""
    events = (context.get("triggering_asset_events") or {}).get(asset, [])
    batches: dict[str, dict] = {}
    for e in events:
        extra = dict(e.extra or {})
        if {"batch_id", "seq"} <= set(extra):
            batches[extra["batch_id"]] = extra
        elif extra.get("backfill") and getattr(e, "partition_key", None):
            batches.setdefault(e.partition_key, {"pipeline": extra.get("pipeline"), "batch_id": e.partition_key})
    return sorted(batches.values(), key=lambda b: b["batch_id"])  # a pipeline's batch ids increase with seq


def covered_check(job: str, warehouse: str, landing: str, batch_start: str) -> bool:
    """Task callable (``ShortCircuitOperator``): False, ending the run with its other tasks
    skipped, when the run's batch is committed, its results passed validation and the landing
    table has not changed since (``operations.covered``): a backfill covered it, or the run is a
    cleared one; the job would only say "already committed". No Spark: files only, in seconds."""
    found = load_job(job)
    why = covered.covers(
        warehouse,
        found.PIPELINE.name,
        batch_id(parse_time(batch_start, "batch start")),
        os.path.join(landing, found.LANDING),
    )
    log.info(why or "the batch is not known committed with the landing table as it is: the job runs")
    return why is None


def quality_gate(job: str, warehouse: str, batch_start: str | None = None, kind: str = "batch", **context: Any) -> None:
    """Task callable: report the validation of the job's results table that this DAG run's Spark
    task ran after its batch (or its ``kind``: ``"replay"``, ``"backfill"``) and left in
    ``<warehouse>/<pipeline>/_gate/`` (``framework.operations.outcome``); fail listing the failed
    critical expectations. No Spark, no Great Expectations here.

    The outcome must be this DAG run's (``--run-id``) and, given the run's ``batch_start`` (its
    data interval start), that batch's; then the task's results-asset event (docs/design.md#downstream)
    carries what the batch committed: batch id, seq, rows published, stream time, and the batch id
    as its partition key. A backfill's announces each interval it covered: an event per interval,
    its batch id the partition key (``published_batches``).
    """
    pipeline = load_job(job).PIPELINE
    found = outcome.read(warehouse, pipeline.name, kind)
    expected = None if batch_start is None else batch_id(parse_time(batch_start, "batch start"))
    run_id = context.get("run_id")
    if found is None or (run_id and found.run_id != run_id) or (expected and found.batch_id != expected):
        raise FrameworkError(
            f"pipeline {pipeline.name!r}: {outcome.location(warehouse, pipeline.name, kind)} holds no validation "
            f"by this run's Spark task{f' of batch {expected!r}' if expected else ''}"
            + (f" (it holds {found.kind} {found.batch_id!r} of run {found.run_id!r})" if found else "")
            + ": clear the Spark task to run it again (a committed batch reports 'already committed' and "
            "validates again)."
        )
    if not found.validated:
        log.info("pipeline %r: the results table is unchanged since a validation that passed", pipeline.name)
    else:
        log.info("%s%s", found.summary, f"\nData Docs: {found.docs}" if found.docs else "")
    if not found.success:
        raise QualityGateError.listing(
            f"pipeline {pipeline.name!r}, {kind} {found.batch_id!r}, results table version {found.table_version}",
            found.failures,
            "Fix the table before anyone downstream reads it, then clear the Spark task to validate again.",
            found.docs,
        )
    for asset in context["task"].outlets:
        events = context["outlet_events"][asset]
        if found.batches:  # a backfill: an event per interval, the range's extra shared
            events.add_partitions(list(found.batches))
            events.extra = {
                "pipeline": pipeline.name,
                "backfill": found.batch_id,
                "rows_published": found.rows_published,
            }
        elif expected is not None:
            events.add_partitions(found.batch_id)
            events.extra = {
                "pipeline": pipeline.name,
                "batch_id": found.batch_id,
                "seq": found.seq,
                "rows_published": found.rows_published,
                "stream_time": found.stream_time,
            }


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


def _job_arguments(**options: str | bool | None) -> list[str]:
    """The job's command line (what ``cli.job_parser`` parses) for ``options``, in the order given:
    ``batch_start="x"`` is ``--batch-start x``, ``replay=True`` a bare ``--replay``, and an
    option that is None or False is left out."""
    arguments: list[str] = []
    for name, value in options.items():
        if value is None or value is False:
            continue
        arguments.append("--" + name.replace("_", "-"))
        if not isinstance(value, bool):
            arguments.append(value)
    return arguments


def _submit(
    task_id: str,
    job,
    application: str,
    arguments: list[str],
    *,
    conn_id: str,
    spark_conf: dict[str, str] | None,
    spark_env: dict[str, str] | None,
    spark_binary: str | None,
    packages: str | None,
) -> SparkSubmitOperator:
    """The task running ``spark-submit <job file> <arguments>`` through connection ``conn_id``;
    Delta's own coordinates are passed as the jar files Ivy resolved at install
    (``jars.for_submit``)."""
    local_binary, local_env = _local_spark_tools()
    submit_packages, submit_jars = jars.for_submit(packages)
    return SparkSubmitOperator(
        task_id=task_id,
        conn_id=conn_id,
        application=application,
        name=f"finalresults-{job.PIPELINE.name}",
        packages=submit_packages,
        jars=submit_jars,
        conf={"spark.log.level": "WARN", **(spark_conf or {})},
        env_vars=spark_env if spark_env is not None else local_env,
        spark_binary=spark_binary or local_binary,
        application_args=arguments,
    )


def spark_connect_job(job: str, arguments: list[str], conn_id: str) -> None:
    """Task callable: run the job file ``job`` with ``arguments`` (the command line spark-submit
    would give it) in a Python process of its own, as a Spark Connect client of the server that
    Airflow connection ``conn_id`` names (type ``spark_connect``: host, port, user id, token,
    SSL), given to it as ``SPARK_REMOTE``. A process of its own, as spark-submit's: gRPC, which
    the client speaks, does not survive a fork, and Airflow forks its task processes (a run of
    the demo whose tasks were Connect clients in the task process once hung the LocalExecutor's
    shutdown). What the job prints is the task's log, line by line; it fails as the job's exit
    status says."""
    from airflow.providers.apache.spark.hooks.spark_connect import SparkConnectHook
    from airflow.sdk.log import mask_secret

    pipeline = load_job(job).PIPELINE
    url = SparkConnectHook(conn_id).get_connection_url()
    for token in (p.removeprefix("token=") for p in urlparse(url).params.split(";") if p.startswith("token=")):
        mask_secret(token)  # as the URL carries it (percent-encoded), in case an error quotes the URL
    print(f"{pipeline.name}: a thin client of Spark Connect connection {conn_id!r}", flush=True)
    env = dict(os.environ, SPARK_REMOTE=url)
    command = [sys.executable, job, *arguments]
    with subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as child:
        assert child.stdout is not None
        for line in child.stdout:
            print(line, end="", flush=True)
    if child.returncode:
        raise FrameworkError(
            f"pipeline {pipeline.name!r}: the job exited {child.returncode} over Spark Connect connection "
            f"{conn_id!r}; its error is the 'finalresults: error:' line above"
        )


def _spark_task(
    task_id: str, job, application: str, arguments: list[str], *, connect_conn_id: str | None, **submit: Any
) -> SparkSubmitOperator | PythonOperator:
    """The task running the job: ``spark-submit`` through ``submit['conn_id']`` (``_submit``),
    or with ``connect_conn_id`` the job's file over Spark Connect (``spark_connect_job``)."""
    if connect_conn_id is None:
        return _submit(task_id, job, application, arguments, **submit)
    return PythonOperator(
        task_id=task_id,
        python_callable=spark_connect_job,
        op_kwargs={"job": application, "arguments": arguments, "conn_id": connect_conn_id},
    )


def _gate(application: str, warehouse: str, *, kind: str, outlet: Asset | None = None) -> PythonOperator:
    """The ``quality_gate`` task: it checks the outcome of the run's ``kind`` (``"batch"``: of
    the batch of the run's interval) and announces ``outlet``, if any."""
    run = {"batch_start": INTERVAL_START} if kind == "batch" else {"kind": kind}
    return PythonOperator(
        task_id="quality_gate",
        python_callable=quality_gate,
        outlets=[outlet] if outlet else [],
        op_kwargs={"job": application, "warehouse": warehouse, **run},
    )


def _defined_in(dag: DAG, dag_file: str | None) -> DAG:
    """``dag``, its file ``dag_file`` or by default the calling DAG file (``_calling_file``), as
    Airflow's ``@dag`` records it: Airflow would name this module, and a task process run by an
    executor (``dag.test(use_executor=True)`` included) parses the DAG's file to find its task."""
    dag.fileloc = dag_file or _calling_file()
    return dag


def _calling_file() -> str:
    """The innermost file on the call stack outside the framework package: the DAG file that
    called a factory directly (a helper of the user's in between is not seen: pass ``dag_file``)."""
    framework = Path(__file__).resolve().parents[1]
    frame = sys._getframe(1)
    while frame.f_back is not None and Path(frame.f_code.co_filename).resolve().is_relative_to(framework):
        frame = frame.f_back
    return frame.f_code.co_filename


def pipeline_dag(
    job_module: str,
    schedule: timedelta | str | None = None,
    start_date: datetime | None = None,
    *,
    warehouse: str,
    landing: str,
    end_date: datetime | None = None,
    catalog: str | None = None,
    metastore: str | None = None,
    dag_id: str | None = None,
    catchup: bool = True,
    timezone: str = "UTC",
    conn_id: str = "spark_default",
    connect_conn_id: str | None = None,
    retries: int = 2,
    retry_delay: timedelta = timedelta(minutes=1),
    spark_conf: dict[str, str] | None = None,
    spark_env: dict[str, str] | None = None,
    spark_binary: str | None = None,
    packages: str | None = DELTA_PACKAGE,
    dag_file: str | None = None,
) -> DAG:
    """A DAG running ``job_module`` once per data interval: ``covered_check`` (no Spark: the run
    ends there when its batch is committed, valid and its landing records unchanged, as after a
    backfill), ``spark_batch`` (spark-submit of the job for the interval) then ``quality_gate``,
    whose results-asset event names the batch.

    :param job_module: the job, a ``jobs/<name>.py`` path or a dotted module name; its
        ``PIPELINE`` is the pipeline, its ``SCHEDULE`` the default ``schedule``.
    :param schedule: a timedelta (fixed intervals) or a cron expression (intervals between cron
        ticks, in ``timezone``); default: the job's ``SCHEDULE``, and one of them is required.
    :param start_date: the start of the first interval the pipeline must process (required).
    :param warehouse: the folder of the pipelines' Delta tables, passed to the job; the results
        asset and the quality gate's outcome are found there too.
    :param landing: the folder of the landing Delta tables the job reads, passed to the job.
    :param end_date: the start of the last interval the DAG runs (Airflow's meaning); default:
        no end.
    :param catalog: a catalog schema to keep the pipeline's tables in too
        (``framework.storage.catalog``); default: none.
    :param metastore: with ``catalog``, the folder of an embedded metastore (one machine only).
    :param dag_id: the DAG's id; default: the pipeline's name.
    :param catchup: whether every interval since ``start_date`` runs (default True: the records
        of an interval that never ran would never be read).
    :param timezone: the time zone of a cron ``schedule``.
    :param conn_id: the Airflow connection spark-submit runs through; its host is the master
        (``local[*]``, ``spark://...``, ``yarn``).
    :param connect_conn_id: a Spark Connect connection (type ``spark_connect``); given, the job
        runs on the worker, with its Python, as a thin client of that server, and ``conn_id``,
        ``spark_conf``, ``spark_env``, ``spark_binary`` and ``packages`` are not used (the
        server's own settings size it and give it Delta). Default: none, spark-submit.
    :param retries: the retries of each task (safe: a batch re-run with the same input reports
        "already committed").
    :param retry_delay: the delay between a task's retries.
    :param spark_conf: Spark properties for spark-submit, over ``spark.log.level=WARN``.
    :param spark_env: environment variables for spark-submit; default: ``PYSPARK_PYTHON`` set
        to this environment's Python. Override it for a cluster.
    :param spark_binary: the spark-submit to run; default: this environment's (pyspark ships
        one), else the Spark provider's. Override it for a cluster.
    :param packages: Maven coordinates for ``--packages``; default: the installed delta-spark's
        jars (``DELTA_PACKAGE``), passed as ``--jars`` with the files Ivy resolved at install
        when they are on this machine (``framework.storage.jars``: the Airflow worker shares
        the scheduler's install); None where the cluster has them already.
    :param dag_file: the DAG file defining the DAG, which a task process parses to find its
        task; default: the file that called this factory (pass ``__file__`` when a function of
        yours in another file calls it).
    :return: the DAG.
    :raises TypeError: without a ``schedule`` (none given, none in the job) or a ``start_date``.

    Example::

        user_alerts = pipeline_dag("jobs/user_alerts.py", timedelta(hours=1), datetime(2026, 1, 1),
                                   warehouse="/lake/warehouse", landing="/lake/landing")
    """
    job = load_job(job_module)
    pipeline, application = job.PIPELINE, _application(job)
    schedule = schedule if schedule is not None else getattr(job, "SCHEDULE", None)
    if schedule is None:
        raise TypeError(f"job {job_module!r} declares no SCHEDULE: pass 'schedule'")
    if start_date is None:
        raise TypeError("'start_date' is required: the first interval the pipeline must process")
    default_args: dict[str, Any] = {"depends_on_past": True, "wait_for_downstream": True}
    default_args |= {"retries": retries, "retry_delay": retry_delay}
    arguments = _job_arguments(
        batch_start=INTERVAL_START,
        batch_end="{{ data_interval_end.isoformat() }}",
        warehouse=warehouse,
        landing=landing,
        catalog=catalog or None,  # an empty name registers nothing
        metastore=metastore or None,
        allow_gap="{{ params.allow_gap }}",
        run_id=RUN_ID,
    )
    spark = _spark_options(conn_id, connect_conn_id, spark_conf, spark_env, spark_binary, packages)
    with DAG(
        dag_id=dag_id or pipeline.name,
        schedule=_timetable(schedule, timezone),
        start_date=start_date,
        end_date=end_date,
        catchup=catchup,
        max_active_runs=1,
        default_args=default_args,
        tags=["finalresults"],
        description=(job.__doc__ or pipeline.name).strip().splitlines()[0],
        doc_md=f"```\n{pipeline.describe()}\n```",
        # true for a run that may start after a gap (a run marked successful without running, a
        # later interval triggered first): its batch skips the records of the interval between
        params={"allow_gap": False},
    ) as dag:
        check = ShortCircuitOperator(
            task_id="covered_check",
            python_callable=covered_check,
            op_kwargs={"job": application, "warehouse": warehouse, "landing": landing, "batch_start": INTERVAL_START},
            ignore_downstream_trigger_rules=True,
        )
        batch = _spark_task("spark_batch", job, application, arguments, **spark)
        check >> batch >> _gate(application, warehouse, kind="batch", outlet=_results_asset(pipeline, warehouse))
    return _defined_in(dag, dag_file)


def replay_dag(
    job_module: str,
    every: timedelta | None = None,
    *,
    warehouse: str,
    landing: str,
    dag_id: str | None = None,
    conn_id: str = "spark_default",
    connect_conn_id: str | None = None,
    spark_conf: dict[str, str] | None = None,
    spark_env: dict[str, str] | None = None,
    spark_binary: str | None = None,
    packages: str | None = DELTA_PACKAGE,
    dag_file: str | None = None,
) -> DAG:
    """A manually triggered DAG replaying a committed range of ``job_module`` (``framework.operations.replay``):
    ``spark_replay`` (spark-submit of the job with ``--replay``) then ``quality_gate``.

    Trigger it with params ``start`` (the first replayed interval's start, ISO) and optionally
    ``end`` (default: through the last committed batch, the only end a replay accepts). Intervals
    are ``every`` long (default: the job's ``SCHEDULE``), as the pipeline's DAG ran them. Pause
    the pipeline's DAG meanwhile: its next batch is refused while the replay runs. The other
    arguments are ``pipeline_dag``'s.

    Example::

        airflow dags trigger user_alerts_replay --conf '{"start": "2026-01-01T01:00:00+00:00"}'
    """
    params = {
        "start": Param(type="string", minLength=1, description="first replayed interval start, ISO timestamp"),
        "end": Param("", type="string", description="end of the range; empty: the last committed batch"),
    }
    on_demand = _OnDemand("replay", "Replay a committed range of {}", replay_dag.__doc__ or "", params)
    spark = _spark_options(conn_id, connect_conn_id, spark_conf, spark_env, spark_binary, packages)
    return on_demand.dag(job_module, every, (warehouse, landing), dag_id, dag_file, spark)


def backfill_dag(
    job_module: str,
    every: timedelta | None = None,
    *,
    warehouse: str,
    landing: str,
    dag_id: str | None = None,
    catalog: str | None = None,
    metastore: str | None = None,
    dag_file: str | None = None,
    **spark: Any,
) -> DAG:
    """A manually triggered DAG catching ``job_module``'s pipeline up over a range in one run:
    ``spark_backfill`` (spark-submit of the job with ``--backfill``: the range in chunks, each
    interval recorded as its own batch, docs/design.md#chunks) then ``quality_gate``, whose
    results-asset events name each interval (its batch id the partition key), as the pipeline
    DAG's runs would have one by one.

    Trigger it with params ``start`` (the first interval's start, ISO), ``end`` (the last
    interval's end) and optionally ``chunk_records`` (records a chunk holds at most; empty: the
    default). Intervals are ``every`` long (default: the job's ``SCHEDULE``), as the pipeline's
    DAG runs them; intervals committed already report so, and the range resumes after them. Its
    task log has a line per interval and a progress line per chunk. The pipeline DAG's runs of
    the intervals it covered then find them committed (docs/operations.md#backfill). The other
    arguments, ``spark``'s (``conn_id``, ``connect_conn_id``, ``spark_conf``, ``spark_env``,
    ``spark_binary``, ``packages``) included, are ``pipeline_dag``'s.

    Example::

        airflow dags trigger user_alerts_backfill \\
            --conf '{"start": "2026-01-01T00:00:00+00:00", "end": "2026-02-01T00:00:00+00:00"}'
    """
    params = {
        "start": Param(type="string", minLength=1, description="first interval start, ISO timestamp"),
        "end": Param(type="string", minLength=1, description="last interval end, ISO timestamp"),
        "chunk_records": Param("", type="string", description="records a chunk holds at most; empty: the default"),
    }
    on_demand = _OnDemand("backfill", "Catch up a range of {} in one run", backfill_dag.__doc__ or "", params)
    tables = {"catalog": catalog or None, "metastore": metastore or None}  # an empty name registers nothing
    return on_demand.dag(job_module, every, (warehouse, landing), dag_id, dag_file, _spark_options(**spark), tables)


@dataclass(frozen=True)
class _OnDemand:
    """A manually triggered DAG running one ``kind`` of job run over a range of intervals
    (``replay``, ``backfill``): ``spark_<kind> >> quality_gate``, with ``params`` start and end."""

    kind: str
    description: str  # with {} for the pipeline's name
    doc: str
    params: dict[str, Param]

    def dag(
        self,
        job_module: str,
        every: timedelta | None,
        paths: tuple[str, str],
        dag_id: str | None,
        dag_file: str | None,
        submit: dict[str, Any],
        options: dict[str, str | None] | None = None,
    ) -> DAG:
        """The DAG for ``job_module`` (the factories' arguments): ``paths`` are the warehouse and
        the landing folder, ``submit`` how its Spark task runs (``_spark_options``), ``options``
        more of the job's flags. A backfill's gate announces the results asset; a replay's does
        not (its pipeline DAG's next run does)."""
        warehouse, landing = paths
        job = load_job(job_module)
        pipeline, application = job.PIPELINE, _application(job)
        every = every if every is not None else getattr(job, "SCHEDULE", None)
        if not isinstance(every, timedelta):
            raise TypeError(
                f"job {job_module!r}: a {self.kind} needs fixed-length intervals: pass 'every' (a timedelta)"
            )
        options = dict(options or {})
        if "chunk_records" in self.params:  # a job takes an empty value for the default
            options["chunk_records"] = "{{ params.chunk_records }}"
        arguments = _job_arguments(
            **{self.kind: True},
            batch_start="{{ params.start }}",
            batch_end="{{ params.end }}",
            every=f"{int(every.total_seconds())}s",
            warehouse=warehouse,
            landing=landing,
            run_id=RUN_ID,
            **options,
        )
        with DAG(
            dag_id=dag_id or f"{pipeline.name}_{self.kind}",
            schedule=None,
            max_active_runs=1,
            params=self.params,
            tags=["finalresults", self.kind],
            description=self.description.format(pipeline.name),
            doc_md=self.doc,
        ) as dag:
            run = _spark_task(f"spark_{self.kind}", job, application, arguments, **submit)
            asset = _results_asset(pipeline, warehouse) if self.kind == "backfill" else None
            run >> _gate(application, warehouse, kind=self.kind, outlet=asset)
        return _defined_in(dag, dag_file)


def _spark_options(
    conn_id: str = "spark_default",
    connect_conn_id: str | None = None,
    spark_conf: dict[str, str] | None = None,
    spark_env: dict[str, str] | None = None,
    spark_binary: str | None = None,
    packages: str | None = DELTA_PACKAGE,
) -> dict[str, Any]:
    """How a DAG's Spark task runs (``_spark_task``), with ``pipeline_dag``'s defaults; an
    unknown name is a TypeError here, when the DAG is defined."""
    return {
        "conn_id": conn_id,
        "connect_conn_id": connect_conn_id,
        "spark_conf": spark_conf,
        "spark_env": spark_env,
        "spark_binary": spark_binary,
        "packages": packages,
    }
