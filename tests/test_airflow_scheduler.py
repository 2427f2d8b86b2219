"""Backfill (docs/operations.md#backfill): a new pipeline catches up in one Airflow run, then
ordinary Airflow backfill runs of the intervals it covered find them committed, in order.

A real deployment on loopback, on a temporary SQLite home: ``airflow db migrate``, then the
execution API server, the scheduler (LocalExecutor, no log server) and the dag-processor as
separate processes (each in its own process group, killed at the end whatever happens). The
backfill DAG of ``user_alerts``, triggered with params, runs two hourly intervals in one chunk
and records each as its batch; ``airflow backfill create`` for the same intervals then runs the
pipeline DAG, whose runs end at their first task (``covered_check``: committed, valid, landing
unchanged) with no Spark job; then its replay DAG, triggered with params, replays the last batch.
The pipeline DAG ends where the backfill does, so every run of it
is the backfill's. Data-aware downstream (docs/design.md#downstream): the gates' asset events (the
backfill's one per interval) trigger ``user_alert_notifications``, which puts each final row in
its outbox once, also when its task is retried.
"""

import datetime as dt
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from test_airflow import DAGS, ROOT, _ran_hours_like_one_batch

from framework.storage import bookkeeping

AIRFLOW = str(Path(sys.executable).with_name("airflow"))
START, HOURS, DAG_ID = dt.datetime(2026, 1, 1), 2, "user_alerts"  # two runs suffice to show their order
NOTIFY = "user_alert_notifications"  # downstream of user_alerts' results asset
DEADLINE = 900  # seconds per wait; a spark-submit takes 45 s idle, 3 min when the 2 cores are shared


def _environment(root: Path) -> dict[str, str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "FINALRESULTS"))}
    env.update(
        {
            "AIRFLOW_HOME": str(root / "airflow"),
            "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS),
            # three processes and the CLI write to one SQLite file: wait for its lock, not 5 s
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{root / 'airflow' / 'airflow.db'}?timeout=60",
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__PARALLELISM": "2",
            # the pipeline's runs come from the backfill only: the DAG ends where the backfill does, so the
            # scheduler finds its runs made; asset-triggered runs it makes as they are due. Other DAGs stay paused.
            "FINALRESULTS_END": (START + dt.timedelta(hours=HOURS - 1)).isoformat(),
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True",
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__PORT": str(port),
            "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{port}",
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
            "AIRFLOW__API_AUTH__JWT_SECRET": uuid.uuid4().hex,
            "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": "local[1]"}),
            "FINALRESULTS_WAREHOUSE": str(root / "warehouse"),
            "FINALRESULTS_LANDING": str(root / "landing"),
            "FINALRESULTS_OUTBOX": str(root / "outbox"),
            "FINALRESULTS_START": START.isoformat(),
            "PYSPARK_PYTHON": sys.executable,
        }
    )
    return env


def _start(env: dict, processes: dict, logs: Path, name: str, args: list[str]) -> None:
    """Start ``airflow <args>`` in a process group of its own, its output in ``logs/<name>.log``."""
    with open(logs / f"{name}.log", "w") as log:
        processes[name] = subprocess.Popen(
            [AIRFLOW, *args], env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )


def _serve(env: dict, processes: dict, logs: Path, parsed, dags: str) -> None:
    """Start the execution API server and the dag-processor, wait until ``parsed()``, then
    unpause the DAGs whose ids match the regular expression ``dags``."""
    _start(
        env,
        processes,
        logs,
        "api-server",
        ["api-server", "--apps", "execution", "-H", "127.0.0.1", "-p", env["AIRFLOW__API__PORT"]],
    )
    _start(env, processes, logs, "dag-processor", ["dag-processor"])
    _wait("the DAGs to be parsed", parsed, processes, logs, 600)
    _cli(env, "dags", "unpause", "--treat-dag-id-as-regex", "-y", dags)


def _cli(env: dict, *args: str) -> None:
    """Run ``airflow <args>`` and assert it succeeded, retrying while SQLite reports its lock.

    The scheduler, the dag-processor and the api-server write the same SQLite file. SQLite answers
    "database is locked" at once, without its busy timeout, when a transaction that read must upgrade
    to write while another writes; Airflow undoes a half-made backfill on that error so that the user
    can retry it (``_cleanup_partial_backfill``). This is that user.
    """
    for attempt in range(6):
        done = subprocess.run([AIRFLOW, *args], env=env, capture_output=True, text=True, timeout=600)
        if done.returncode == 0 or "database is locked" not in done.stdout + done.stderr:
            break
        time.sleep(5)
    assert done.returncode == 0, f"airflow {' '.join(args)} (attempt {attempt + 1}):\n" + done.stdout + done.stderr


def _query(root: Path, sql: str, *args) -> list[tuple]:
    with sqlite3.connect(root / "airflow" / "airflow.db", timeout=30) as db:
        return db.execute(sql, args).fetchall()


def _wait(what: str, done, processes: dict, logs: Path, seconds: float):
    """Poll ``done()`` until it returns something truthy; fail early if a process died."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        dead = [name for name, p in processes.items() if p.poll() is not None]
        assert not dead, f"airflow {dead} exited:\n" + "".join((logs / f"{n}.log").read_text()[-3000:] for n in dead)
        result = done()
        if result:
            return result
        time.sleep(5)
    tails = "".join(f"\n--- {n}\n" + (logs / f"{n}.log").read_text()[-2000:] for n in processes)
    pytest.fail(f"timed out after {seconds}s waiting for {what}{tails}")


def _succeeded(root: Path, dag_id: str, count: int):
    """The DAG's runs (id, state, interval start) once ``count`` of them succeeded; fails on a failed one."""
    runs = _query(
        root,
        "SELECT run_id, state, data_interval_start FROM dag_run WHERE dag_id = ? ORDER BY data_interval_start",
        dag_id,
    )
    assert not [r for r in runs if r[1] == "failed"], f"a run failed: {runs}; logs: {root / 'airflow' / 'logs'}"
    return len(runs) == count and all(r[1] == "success" for r in runs) and runs


@pytest.mark.slow
@pytest.mark.timeout(3600)  # four waits of at most DEADLINE (the last two short), plus start-ups
def test_airflow_backfill_runs_a_new_pipeline_in_order_then_a_replay_dag_replays(spark, tmp_path):
    sys.path.insert(0, str(ROOT))
    from jobs import sample_data

    sample_data.generate(
        spark, str(tmp_path / "landing"), START, START + dt.timedelta(hours=HOURS), tables=("user_events",)
    )
    env, logs = _environment(tmp_path), tmp_path / "logs"
    logs.mkdir()
    subprocess.run([AIRFLOW, "db", "migrate"], env=env, check=True, capture_output=True, timeout=300)
    processes: dict[str, subprocess.Popen] = {}
    try:
        both = "SELECT count(DISTINCT dag_id) FROM serialized_dag WHERE dag_id IN (?, ?)"  # the two DAG files
        parsed = lambda: _query(tmp_path, both, NOTIFY, f"{DAG_ID}_backfill")[0][0] == 2  # noqa: E731
        # the backfill, replay and notifications DAGs; the pipeline DAG stays paused until its runs are made
        _serve(env, processes, logs, parsed, "^user_alert(s_backfill|s_replay|_notifications)$")
        last = (START + dt.timedelta(hours=HOURS - 1)).isoformat()
        _start(env, processes, logs, "scheduler", ["scheduler", "--skip-serve-logs"])
        # the backfill DAG catches the range up in one run: one Spark job, a ledger row per interval
        whole = json.dumps({"start": START.isoformat(), "end": (START + dt.timedelta(hours=HOURS)).isoformat()})
        _cli(env, "dags", "trigger", f"{DAG_ID}_backfill", "--conf", whole)
        _wait("the backfill run", lambda: _succeeded(tmp_path, f"{DAG_ID}_backfill", 1), processes, logs, DEADLINE)
        _cli(
            env,
            "backfill",
            "create",
            "--dag-id",
            DAG_ID,
            "--from-date",
            START.isoformat(),
            "--to-date",
            last,
            "--reprocess-behavior",
            "failed",
        )
        _cli(env, "dags", "unpause", DAG_ID)
        runs = _wait(f"{HOURS} successful runs", lambda: _succeeded(tmp_path, DAG_ID, HOURS), processes, logs, DEADLINE)

        # the replay DAG, triggered with params, re-runs the last batch through spark-submit --replay
        conf = json.dumps({"start": last})
        _cli(env, "dags", "trigger", f"{DAG_ID}_replay", "--conf", conf)
        _wait("the replay run", lambda: _succeeded(tmp_path, f"{DAG_ID}_replay", 1), processes, logs, DEADLINE)
        _wait(
            "notifications runs consuming every asset event",
            lambda: _notified(tmp_path, tries=1),
            processes,
            logs,
            DEADLINE,
        )
        delivered = _outbox(spark, tmp_path)
        # a retry of each notify task (cleared, run again by the scheduler) adds nothing
        _cli(env, "tasks", "clear", NOTIFY, "-y")
        _wait("the notify retries", lambda: _notified(tmp_path, tries=2), processes, logs, DEADLINE)
    finally:
        for p in processes.values():
            _stop(p)

    assert [r[2][:19] for r in runs] == [str(START + dt.timedelta(hours=h)) for h in range(HOURS)]
    tasks = _query(
        tmp_path,
        "SELECT dr.data_interval_start, ti.task_id, ti.start_date, ti.end_date "
        "FROM task_instance ti JOIN dag_run dr ON ti.dag_id = dr.dag_id AND ti.run_id = dr.run_id "
        "WHERE dr.dag_id = ? ORDER BY dr.data_interval_start",
        DAG_ID,
    )
    spans = {(interval, task): (begin, end) for interval, task, begin, end in tasks}
    intervals = [r[2] for r in runs]
    for earlier, later in zip(intervals, intervals[1:]):  # each run starts after the previous one ended
        assert spans[(later, "covered_check")][0] >= spans[(earlier, "covered_check")][1]
    _ran_hours_like_one_batch(spark, tmp_path, HOURS)
    _caught_up_in_one_run(tmp_path)
    ledger = bookkeeping.read_ledger(spark, str(tmp_path / "warehouse" / DAG_ID))
    replayed = ledger.filter(ledger.batch_id == last).collect()  # the replay re-ran the last batch
    assert sorted(r.status for r in replayed) == ["committed", "replaced"]
    _notified_once_per_final_row(spark, tmp_path, runs, delivered)


def _caught_up_in_one_run(root: Path) -> None:
    """The backfill run's task log has a line per interval it committed and a progress line for
    its one chunk; every pipeline DAG run after it found its interval committed without Spark: its
    ``covered_check`` said so, and its Spark task and gate were skipped."""
    task = root / "airflow" / "logs" / f"dag_id={DAG_ID}_backfill"
    said = "\n".join(f.read_text() for f in sorted(task.rglob("task_id=spark_backfill/*.log")))
    hours = [f"{START + dt.timedelta(hours=h):%Y-%m-%dT%H:%M:%S}" for h in range(HOURS)]
    for hour in hours:
        assert f"batch {hour}: committed (seq" in said, said[-3000:]
    assert f"{HOURS}/{HOURS} intervals" in said and f"({hours[0]}..{hours[-1]}: one chunk)" in said, said[-3000:]
    checks = (root / "airflow" / "logs" / f"dag_id={DAG_ID}").rglob("task_id=covered_check/*.log")
    check_logs = "\n".join(f.read_text() for f in sorted(checks))
    for hour in hours:
        assert f"batch {hour!r} is committed and its results passed validation" in check_logs, check_logs[-3000:]
    states = _query(root, "SELECT task_id, state FROM task_instance WHERE dag_id = ?", DAG_ID)
    skipped = [("covered_check", "success"), ("quality_gate", "skipped"), ("spark_batch", "skipped")]
    assert sorted(set(states)) == skipped, states


def _notified(root: Path, tries: int) -> bool:
    """Whether the downstream runs consumed every asset event and each notify task succeeded on
    try ``tries``."""
    runs = _query(
        root,
        "SELECT r.state, t.state, t.try_number FROM dag_run r JOIN task_instance t "
        "ON t.dag_id = r.dag_id AND t.run_id = r.run_id WHERE r.dag_id = ?",
        NOTIFY,
    )
    assert not [r for r in runs if "failed" in r[:2]], f"a notifications run failed: {runs}"
    consumed = _query(
        root,
        "SELECT count(*) FROM dagrun_asset_event e JOIN dag_run r ON r.id = e.dag_run_id WHERE r.dag_id = ?",
        NOTIFY,
    )[0][0]
    events = _query(root, "SELECT count(*) FROM asset_event")[0][0]
    return bool(runs) and consumed == events and all(r == ("success", "success", tries) for r in runs)


def _outbox(spark, root: Path) -> list:
    return spark.read.format("delta").load(str(root / "outbox" / "user_alert_notifications")).collect()


def _notified_once_per_final_row(spark, root: Path, runs: list, delivered: list) -> None:
    """The backfill's gate emitted an asset event per interval, its batch id the partition key;
    the pipeline runs that found their batches committed emitted none more; the downstream DAG put
    each final row of those batches in the outbox once, and its retry added nothing."""
    rows = _query(root, "SELECT extra, partition_key FROM asset_event ORDER BY id")
    backfill, events = rows[:HOURS], [json.loads(extra) for extra, _ in rows[HOURS:]]
    assert events == [], events
    assert sorted(key for _, key in backfill) == [r[2][:19].replace(" ", "T") for r in runs]
    whole = f"{runs[0][2][:19]}..{runs[-1][2][:19]}".replace(" ", "T")
    assert {json.loads(extra)["backfill"] for extra, _ in backfill} == {whole}
    results = spark.read.format("delta").load(str(root / "warehouse" / DAG_ID / "user_alert_windows"))
    keys = lambda rows: sorted((r.user_id, r.window_start, r.window_end) for r in rows)  # noqa: E731
    assert delivered and keys(delivered) == keys(results.collect())
    again = _outbox(spark, root)
    assert keys(again) == keys(delivered)


def _stop(process: subprocess.Popen) -> None:
    """Stop a process and everything it started (its own process group): TERM, then KILL for
    whatever of the group is left."""
    for sig, wait in ((signal.SIGTERM, 30), (signal.SIGKILL, 10)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(wait)
        except subprocess.TimeoutExpired:
            pass
