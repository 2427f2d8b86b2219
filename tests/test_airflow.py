"""The DAGs, run by Airflow for consecutive intervals, produce exactly the final rows of the same
data run as one batch (parsing the DAGs, without running them, is in ``tests/unit/test_airflow_dags.py``)."""

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

# Airflow reads its home when first imported: point it at a throwaway folder before that happens.
os.environ["AIRFLOW_HOME"] = tempfile.mkdtemp(prefix="airflow-home-")
os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"

ROOT = Path(__file__).resolve().parents[1]
DAGS = ROOT / "dags"
STATUSES = ("committed", "already committed")  # a job's line about its batch
# Two hourly runs: the first hour's windows close in the second batch, so the runs emit only if
# Airflow carried the state from one to the next (``make demo`` runs three)
DEMO_HOURS = 2


def _ran_hours_like_one_batch(spark, root, hours):
    """The warehouse under ``root`` holds one committed batch per hourly interval, in order, and
    the final rows of its landing table run as a single batch."""
    from framework import Runtime
    from framework.orchestration.jobs import load_job

    pipeline = load_job(str(ROOT / "jobs" / "user_alerts.py")).PIPELINE
    airflow = Runtime(spark, str(root / "warehouse"))
    ledger = airflow.read_ledger(pipeline).filter("status = 'committed'").orderBy("seq").collect()
    assert [r.batch_id for r in ledger] == [f"2026-01-01T0{h}:00:00" for h in range(hours)]

    landing = spark.read.format("delta").load(str(root / "landing" / "user_events"))
    one_batch = Runtime(spark, str(root / "one_batch"))
    one_batch.run_batch(pipeline, "all", landing)
    columns = ["user_id", "window_start", "window_end", "events"]
    expected = sorted(one_batch.read_output(pipeline).select(columns).collect())
    got = sorted(airflow.read_output(pipeline).select(columns).collect())
    assert expected and got == expected
    # hour 0 closes at 01:10 stream time: in the second batch, the first whose records reach it
    emitted = airflow.read_output(pipeline).filter("window_end = '2026-01-01 01:00:00'")
    assert {r.emitted_batch_id for r in emitted.collect()} == {"2026-01-01T01:00:00"}


@pytest.mark.slow
@pytest.mark.timeout(1800)  # spark-submits under Airflow: minutes on a busy 2-core machine
@pytest.mark.parametrize("connect", [False, True], ids=["spark-submit", "spark-connect"])
def test_airflow_runs_of_the_demo_give_the_one_batch_final_rows(spark, tmp_path, connect):
    """The demo drives Airflow (db migrate, connection, an api-server, dag.test per hour with the
    executor) on its own home; each task's log is a file where Airflow's UI reads it. With
    ``--connect`` (``make demo CONNECT=1``) the Spark task runs the job in its own process as a
    thin client of a Spark Connect server, the batch's audit and the gate's validation included."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "FINALRESULTS", "SPARK_REMOTE"))}
    demo = [sys.executable, str(ROOT / "scripts" / "demo.py"), "--root", str(tmp_path), "--hours", str(DEMO_HOURS)]
    try:
        done = subprocess.run(demo + ["--connect"] * connect, capture_output=True, text=True, env=env, timeout=1500)
    except subprocess.TimeoutExpired as hung:
        console = hung.stdout.decode(errors="replace") if isinstance(hung.stdout, bytes) else hung.stdout
        pytest.fail(f"the demo hung; its console:\n{console}\n{_logs_of_the_demo(tmp_path)}")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    # The console holds the demo's own lines; Airflow's run loop (its INFO lines, dag.test()'s warning
    # every second while a task runs) and the executor's workers (echoing spark-submit) write to runs.log
    assert done.stderr == "", done.stderr[-3000:]
    runs_log = (tmp_path / "airflow" / "runs.log").read_text()
    for chatter in ("DagRun Finished", "Workload finished", "[DAG TEST]", "No tasks to run", "Spark-Submit cmd"):
        assert chatter not in done.stdout, chatter
    assert ("Spark-Submit cmd" in runs_log) != connect, runs_log[-3000:]
    assert len(done.stdout.splitlines()) < 80, done.stdout
    _ran_hours_like_one_batch(spark, tmp_path, DEMO_HOURS)
    logs = tmp_path / "airflow" / "logs" / "dag_id=user_alerts"
    runs = sorted(logs.glob("run_id=*"))  # run ids carry the wall-clock time they were made: in order
    listing = "\n".join(f"{f.relative_to(logs)} {f.stat().st_size} B" for f in sorted(logs.rglob("*.log")))
    assert len(runs) == DEMO_HOURS, listing
    for hour, run in enumerate(runs):
        # Airflow may retry a task (its execution API can time out on a loaded machine): the last
        # attempt ran the batch, or reported it already committed
        last = _last_attempt(run / "task_id=spark_batch")
        said = last.read_text()
        assert any(f"batch 2026-01-01T0{hour}:00:00: {status} (seq" in said for status in STATUSES), (
            f"{last.relative_to(logs)}:\n{said[-2000:]}\nall task logs:\n{listing}\nruns.log:\n{runs_log[-3000:]}"
        )
        thin = "user_alerts: a thin client of Spark Connect connection 'spark_connect_default'"
        assert (thin in said) == connect, said[-2000:]
        validation = said.split("committed (seq")[-1]  # what the job left for the quality gate
        assert "results: valid" in validation or "results: not validated again" in validation, said[-2000:]
        assert _last_attempt(run / "task_id=quality_gate").stat().st_size > 0, listing


def _logs_of_the_demo(root: Path) -> str:
    """The ends of the logs a hung demo left: Airflow's, each task's, the Spark Connect server's."""
    logs = [root / "airflow" / "runs.log", *sorted((root / "airflow" / "logs").rglob("*.log"))]
    logs.append(root / "spark-connect.log")
    return "\n".join(f"--- {log}:\n{log.read_text()[-2500:]}" for log in logs if log.exists())


def _last_attempt(task: Path) -> Path:
    """The log of a task's last attempt (``attempt=<n>.log``; n counts from 1)."""
    attempts = sorted(task.glob("attempt=*.log"), key=lambda f: int(f.stem.split("=")[1]))
    assert attempts, f"no log under {task}"
    return attempts[-1]
