"""Many pipelines at once (issue 39, item 13): ``--pipelines`` pipelines share one warehouse and
their DAGs run concurrently under a real Airflow scheduler, then every table is checked.

The pipelines are copies of the three example jobs (tumbling windows ``user_alerts``, sessions
``page_sessions``, sliding windows ``sliding_metric``), renamed ``<job>_<i>``, each with the
example's suite under its new name, all hourly over ``--hours`` intervals of the sample landing
tables. One DAG file builds their DAGs with ``pipeline_dag``. Airflow runs on a temporary SQLite
home as ``tests/test_airflow_scheduler.py`` runs it (api-server, dag-processor, scheduler with
the LocalExecutor, ``--parallelism`` task slots); every DAG is unpaused at once and the scheduler
catches each up, so up to ``--parallelism`` spark-submits and gates of different pipelines
commit to the one warehouse at the same time (the warehouse-wide ``quality_results`` table
above all).

Checked afterwards, per pipeline: every run succeeded; its ledger holds each interval's batch
committed once, in order; ``quality_results`` holds the audit of every batch that emitted rows
(none lost to a conflict), and no expectation's result twice for one validation (none doubled);
the last job's gate outcome passed on the results table's current version (its validation, or
the audit that stood for it, covers what the table holds); a final-results table holds one row
per key and window. Printed: wall time from the scheduler's start to the last run's end, runs,
task retries (an attempt that failed and was retried), and the failures (target 0). Exits 1 on
any failure.

    .venv/bin/python bench/many_pipelines.py --pipelines 20 --hours 2 --parallelism 4
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
os.environ.setdefault("SPARK_CONF_DIR", str(ROOT / "tests" / "spark-conf"))

from test_airflow_scheduler import AIRFLOW, START, _environment, _query, _serve, _start, _stop, _wait  # noqa: E402

JOBS = ("user_alerts", "page_sessions", "sliding_metric")
DAG_FILE = '''"""The generated pipelines of bench/many_pipelines.py, hourly."""
import os
from datetime import datetime, timedelta, timezone
from pathlib import Path

from framework.airflow import pipeline_dag

START = datetime.fromisoformat(os.environ["FINALRESULTS_START"]).replace(tzinfo=timezone.utc)
END = datetime.fromisoformat(os.environ["FINALRESULTS_END"]).replace(tzinfo=timezone.utc)
for job in sorted(Path(os.environ["FINALRESULTS_JOBS"]).glob("*_*.py")):
    globals()[job.stem] = pipeline_dag(
        str(job), timedelta(hours=1), START, end_date=END, retry_delay=timedelta(seconds=20),
        warehouse=os.environ["FINALRESULTS_WAREHOUSE"], landing=os.environ["FINALRESULTS_LANDING"],
    )
'''


def write_pipelines(root: Path, count: int) -> list[str]:
    """``count`` job modules under ``root/jobs`` and their suites under ``root/expectations``,
    cycling through the example jobs; their pipeline names."""
    (root / "jobs").mkdir()
    (root / "expectations").mkdir()
    names = []
    for i in range(count):
        job = JOBS[i % len(JOBS)]
        name = f"{job}_{i:02d}"
        source = (ROOT / "jobs" / f"{job}.py").read_text()
        assert f'Pipeline("{job}"' in source, job
        (root / "jobs" / f"{name}.py").write_text(source.replace(f'Pipeline("{job}"', f'Pipeline("{name}"'))
        suite = json.loads((ROOT / "expectations" / f"{job}.json").read_text())
        (root / "expectations" / f"{name}.json").write_text(json.dumps(dict(suite, name=name)))
        names.append(name)
    return names


def run_airflow(root: Path, names: list[str], hours: int, parallelism: int, deadline: float) -> dict:
    """Run every pipeline's DAG for ``hours`` intervals under the scheduler; the runs and task
    instances Airflow recorded, and the wall seconds from the scheduler's start to the end."""
    env = _environment(root)
    (root / "dags").mkdir()
    (root / "dags" / "many_pipelines.py").write_text(DAG_FILE)
    env.update(
        {
            "AIRFLOW__CORE__DAGS_FOLDER": str(root / "dags"),
            "AIRFLOW__CORE__PARALLELISM": str(parallelism),
            # A task's token is made when it is queued; one that waits longer than this for a
            # slot fails its first attempt (docs/airflow.md, retries); twenty pipelines on a few
            # slots queue tasks for tens of minutes.
            "AIRFLOW__EXECUTION_API__JWT_EXPIRATION_TIME": "3600",
            "FINALRESULTS_JOBS": str(root / "jobs"),
            "FINALRESULTS_EXPECTATIONS": str(root / "expectations"),
            "FINALRESULTS_END": (START + dt.timedelta(hours=hours - 1)).isoformat(),
        }
    )
    logs = root / "logs"
    logs.mkdir()
    processes: dict = {}
    subprocess.run([AIRFLOW, "db", "migrate"], env=env, check=True, capture_output=True, timeout=600)
    try:
        parsed = lambda: len(_query(root, "SELECT dag_id FROM serialized_dag")) >= len(names)  # noqa: E731
        _serve(env, processes, logs, parsed, "_[0-9][0-9]$")
        began = time.monotonic()
        _start(env, processes, logs, "scheduler", ["scheduler", "--skip-serve-logs"])
        want = len(names) * hours

        seen = [-1]

        def finished() -> bool:
            states = _query(root, "SELECT state FROM dag_run")
            done = sum(1 for (s,) in states if s in ("success", "failed"))
            if done != seen[0]:
                print(f"  {time.monotonic() - began:6.0f} s: {done}/{want} runs finished", flush=True)
                seen[0] = done
            return done >= want

        _wait(f"{want} runs to finish", finished, processes, logs, deadline)
        wall = time.monotonic() - began
    finally:
        for p in processes.values():
            _stop(p)
    runs = _query(root, "SELECT dag_id, data_interval_start, state FROM dag_run ORDER BY dag_id, data_interval_start")
    tasks = _query(root, "SELECT dag_id, task_id, run_id, state, try_number FROM task_instance")
    return {"wall": wall, "runs": runs, "tasks": tasks}


def check(root: Path, names: list[str], hours: int, airflow: dict) -> list[str]:
    """Every failure found (see the module docstring): empty when all held."""
    from framework import Runtime, spark_session
    from framework.operations import outcome
    from framework.orchestration.jobs import load_job
    from framework.storage import bookkeeping, tables

    failures = [f"run {r[0]} {r[1]}: {r[2]}" for r in airflow["runs"] if r[2] != "success"]
    spark = spark_session("many-pipelines-check", master="local[1]")
    try:
        rt = Runtime(spark, str(root / "warehouse"))
        results = str(root / "warehouse" / "quality_results")  # none before a first validation
        quality = tables.read(spark, results).collect() if tables.exists(spark, results) else []
        # one row per expectation of one validation
        checks = Counter((r.suite, r.batch_id, r.expectation, r.validated_at) for r in quality)
        validated_at = {(suite, batch, at) for suite, batch, _, at in checks}
        validations = Counter((suite, batch) for suite, batch, _ in validated_at)  # per suite and batch id
        doubled = [k for k, n in checks.items() if n > 1]
        failures += [f"quality_results row doubled: {k}" for k in doubled]
        expected = [(START + dt.timedelta(hours=h)).isoformat(timespec="seconds") for h in range(hours)]
        for name in names:
            p = load_job(str(root / "jobs" / f"{name}.py")).PIPELINE
            output = rt.tables(p).output
            ledger = rt.read_ledger(p).filter("status = 'committed'").orderBy("seq").collect()
            if [r.batch_id for r in ledger] != expected:
                failures.append(f"{name}: committed batches {[r.batch_id for r in ledger]}, expected {expected}")
            emitted = {
                r.batch_id: r.suppression_emit_total or 0
                for r in bookkeeping.read_metrics(spark, rt.tables(p).root).collect()
            }
            for row in ledger:  # a batch that emitted rows was audited before its commit
                if emitted.get(row.batch_id) and not validations.get((name, row.batch_id)):
                    failures.append(f"{name} {row.batch_id}: emitted {emitted[row.batch_id]} rows, no audit recorded")
            # and the last job's gate outcome covers the table as it is
            left, version = outcome.read(str(root / "warehouse"), name, "batch"), tables.latest_version(spark, output)
            if version is not None and (left is None or left.table_version != version or not left.success):
                failures.append(f"{name}: the results table is at version {version}, the last gate outcome: {left}")
            if p.emission.buffered or version is None:
                continue  # a rate-limited sink logs updates; no sink: nothing published yet
            keys = [*p.keys, "window_start", "window_end"]  # final results: one row per key and window
            if rt.read_output(p).groupBy(*keys).count().filter("count > 1").limit(1).count():
                failures.append(f"{name}: a key and window published twice")
    finally:
        spark.stop()
    return failures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pipelines", type=int, default=20)
    parser.add_argument("--hours", type=int, default=2, help="hourly intervals each pipeline runs")
    parser.add_argument("--parallelism", type=int, default=4, help="Airflow's task slots (spark-submits at once)")
    parser.add_argument("--minutes", type=float, default=240, help="give up after this long")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    args = parser.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="many-pipelines-"))
    try:
        from framework import spark_session
        from jobs import sample_data

        spark = spark_session("many-pipelines-landing", master="local[1]")
        sample_data.generate(spark, str(root / "landing"), START, START + dt.timedelta(hours=args.hours))
        spark.stop()
        names = write_pipelines(root, args.pipelines)
        airflow = run_airflow(root, names, args.hours, args.parallelism, args.minutes * 60)
        failures = check(root, names, args.hours, airflow)
        retried = sum(1 for t in airflow["tasks"] if t[4] > 1)
        print(
            f"{args.pipelines} pipelines x {args.hours} intervals, parallelism {args.parallelism}: "
            f"{len(airflow['runs'])} runs in {airflow['wall']:.0f} s wall, "
            f"{len(airflow['tasks'])} task instances, {retried} retried, failures {len(failures)}"
        )
        for f in failures:
            print("  FAILED:", f)
        return 1 if failures else 0
    finally:
        if args.keep:
            print("kept:", root)
        else:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
