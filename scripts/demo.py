"""``make demo``: the blog post's alert pipeline, run by Airflow for consecutive hours, end to end.

On a fresh machine (SQLite metadata database, local Spark, nothing running) it:

1. points AIRFLOW_HOME at ``<root>/airflow`` and runs ``airflow db migrate``;
2. creates the ``spark_default`` connection with master ``local[*]``;
3. fills ``<root>/landing`` with a few hours of sample events, out-of-order and late ones included;
4. starts Airflow's api-server on a free loopback port and runs the ``user_alerts`` DAG of
   ``dags/`` for consecutive hourly data intervals with ``dag.test(use_executor=True)``
   (Airflow's own run loop, tasks run by the LocalExecutor as a scheduler's are: spark-submit,
   then the quality gate), so each task's log is written where Airflow's UI reads it; Airflow's
   own output (its run loop, the executor's workers) goes to ``<root>/airflow/runs.log``;
5. prints the final results, the last batch's metrics (with their units), where everything is,
   and how to open the pipeline in Airflow's UI (the finalresults plugin) and log in.

With ``--connect`` (``make demo CONNECT=1``) it also starts a Spark Connect server on a free
loopback port (``framework.orchestration.connectserver``, its log ``<root>/spark-connect.log``)
and creates the ``spark_connect_default`` connection to it: the DAG's Spark task then runs the
job's file with this Python as a thin client of that server, not through spark-submit, and
the server is stopped when the demo ends.

``<root>`` (default ``var/demo``) is wiped first, so the demo always starts from nothing.

    .venv/bin/python scripts/demo.py [--hours 3] [--root var/demo] [--connect]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import warnings
from contextlib import ExitStack, contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
START = dt.datetime(2026, 1, 1)
USER = "admin"  # the demo's one Airflow user (simple auth manager), an admin


def _airflow(*args: str) -> None:
    """Run an ``airflow`` CLI command of this environment, quietly unless it fails."""
    airflow = Path(sys.executable).with_name("airflow")
    done = subprocess.run([str(airflow), *args], capture_output=True, text=True)
    if done.returncode:
        sys.exit(f"demo: airflow {' '.join(args)} failed:\n{done.stdout}{done.stderr}")


def _configure(root: Path) -> dict[str, str]:
    """Environment of Airflow and of the DAG file; must be set before Airflow is imported.
    Returns the part the api-server needs too (``_next_steps`` prints it)."""
    home = root / "airflow"
    home.mkdir(parents=True)
    passwords = home / "passwords.json"  # the user's password, made here so the demo can print it
    passwords.write_text(json.dumps({USER: secrets.token_urlsafe(12)}))
    shared = {
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{USER}:admin",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords),
        "FINALRESULTS_WAREHOUSE": str(root / "warehouse"),
        "FINALRESULTS_LANDING": str(root / "landing"),
        "FINALRESULTS_START": START.isoformat(),
    }
    with socket.socket() as s:  # the runs' api-server: a free port, so a running Airflow is left alone
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(
        {
            **shared,
            # The console shows Airflow's warnings only (not its run loop's INFO lines); the
            # tasks' loggers log INFO, so each task log holds what spark-submit printed, or what
            # the job printed as a thin client of Spark Connect (logger task.stdout)
            "AIRFLOW__LOGGING__LOGGING_LEVEL": "WARNING",
            "AIRFLOW__LOGGING__NAMESPACE_LEVELS": "airflow.task=INFO task=INFO",
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__PORT": str(port),
            "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{port}",
            # tasks run by the executor report to the api-server's execution API, with tokens
            # that the demo signs and the api-server checks: one secret for both
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
            # a run's two tasks run one after the other: two executor workers, not 32 forks of
            # this process per run (see _executor_ending_every_worker)
            "AIRFLOW__CORE__PARALLELISM": "2",
            "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_hex(16),
            "PYSPARK_PYTHON": sys.executable,
        }
    )
    # dag.test() runs tasks through Starlette's test client, which warns about httpx on every run.
    warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient`")
    return shared


@contextmanager
def _api_server(log: Path):
    """Airflow's api-server on the port ``_configure`` chose, while the runs need it (the
    tasks' execution API); its output goes to ``log``. Stopped, with its workers, on leaving."""
    airflow = Path(sys.executable).with_name("airflow")
    port = os.environ["AIRFLOW__API__PORT"]
    with open(log, "w") as out:
        server = subprocess.Popen(
            [str(airflow), "api-server", "-H", "127.0.0.1", "-p", port],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 300
        while True:
            if server.poll() is not None:
                sys.exit(f"demo: airflow api-server exited; its log: {log}\n{log.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v2/monitor/health", timeout=5):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    sys.exit(f"demo: airflow api-server did not answer within 300 s; its log: {log}")
                time.sleep(2)
        yield
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)


def _spark(log: Path):
    """The demo's own Spark session, its console chatter (Ivy, log4j) sent to ``log``."""
    from framework import spark_session
    from framework.orchestration.console import JAVA_OPTIONS, quiet_session

    return quiet_session(lambda: spark_session("finalresults-demo", conf=JAVA_OPTIONS), log)


def _sample_data(root: Path, end: dt.datetime) -> None:
    """The landing table's records for ``[START, end)``, written by ``jobs/sample_data.py`` in a
    process of its own: this process starts no JVM before Airflow has forked its workers and tasks
    (see ``_run_intervals``)."""
    with open(root / "spark-demo.log", "a") as log:
        subprocess.run(
            [sys.executable, "-m", "jobs.sample_data", "--from", START.isoformat(), "--to", end.isoformat(),
             "--landing", str(root / "landing"), "--table", "user_events"],
            cwd=REPO, stdout=log, stderr=subprocess.STDOUT, check=True,
        )  # fmt: skip


def _load_dags():
    import importlib.util

    spec = importlib.util.spec_from_file_location("finalresults_pipelines", REPO / "dags" / "finalresults_pipelines.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@contextmanager
def _console_to(log: Path):
    """While inside, everything written to this process's stdout and stderr goes to ``log``, and so
    does whatever the processes it starts write (the executor's workers echo their tasks' output,
    and dag.test() warns every second while a task runs); yields the console, for the demo's own
    lines."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    console = os.fdopen(os.dup(saved[0]), "w", buffering=1)
    with open(log, "a") as out:
        os.dup2(out.fileno(), 1)
        os.dup2(out.fileno(), 2)
        try:
            yield console
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            for fd, original in zip((1, 2), saved):
                os.dup2(original, fd)
                os.close(original)
            console.close()


def _thin_clients(root: Path, stack: ExitStack) -> str:
    """A Spark Connect server for the runs (stopped as ``stack`` closes), the connection
    ``spark_connect_default`` to it, and the DAG file told to use it; the task's description."""
    from framework.orchestration.connectserver import connect_server

    server = stack.enter_context(connect_server(root / "spark-connect.log", master="local[*]"))
    _airflow(
        "connections", "add", "spark_connect_default", "--conn-type", "spark_connect",
        "--conn-host", "127.0.0.1", "--conn-port", str(server.port),
    )  # fmt: skip
    os.environ["FINALRESULTS_SPARK_CONNECT"] = "spark_connect_default"
    return f"a thin client of Spark Connect at {server.url}"


def _run_intervals(dag, pipeline, root: Path, hours: int, spark_task: str, first: int = 0) -> bool:
    """One Airflow run per hourly interval (``hours`` of them from hour ``first``), in order;
    whether all succeeded. Airflow's own output goes to ``<root>/airflow/runs.log``; each task's
    log is where the UI reads it. Each run's line comes from the outcome its job left for the
    quality gate, read without Spark: this process has started no JVM yet, so Airflow's forked
    workers and tasks inherit no py4j connection (a stopped session's gateway left in them hung a
    worker of the second run once)."""
    from framework.operations import outcome

    _executor_ending_every_worker()
    with _console_to(root / "airflow" / "runs.log") as console:
        for hour in range(first, first + hours):
            begin, end = (START + dt.timedelta(hours=h) for h in (hour, hour + 1))
            print(
                f"[4/5] Airflow runs {dag.dag_id} for [{begin}, {end}): spark_batch ({spark_task}), then quality_gate",
                file=console,
            )
            # dag.test() infers the data interval that ends at the logical date, as a manual run does;
            # the executor runs each task in a process of its own, which writes the task's log file.
            run = dag.test(logical_date=end.replace(tzinfo=dt.timezone.utc), use_executor=True)
            _started_when_its_tasks_did(run)
            if run.state != "success":
                break
            done = outcome.read(os.environ["FINALRESULTS_WAREHOUSE"], pipeline.name, "batch")
            print(
                f"      run {run.state}: batch {done.batch_id} (seq {done.seq}), rows published "
                f"{done.rows_published}, stream time {done.stream_time}, quality gate passed",
                file=console,
            )
    if run.state != "success":
        print(
            f"demo: the run ended {run.state}; Airflow's output: {root / 'airflow' / 'runs.log'}, "
            f"task logs under {root / 'airflow' / 'logs'}",
            file=sys.stderr,
        )
        return False
    return True


def _executor_ending_every_worker() -> None:
    """Airflow's LocalExecutor ends by putting one stop message on its queue per worker it finds
    alive, then waiting for every worker. Under load a message went missing: with the runs done,
    a worker waited on the queue for ever, and dag.test() with it (once in CI, once in a
    reproduction beside test_replay; apache/airflow#45329 is a flaky end() too). A message more
    per worker, put first, ends them all; what they leave unread goes with the queue (so wrapping
    twice would only add messages)."""
    from airflow.executors.local_executor import LocalExecutor

    end = LocalExecutor.end

    def end_every_worker(executor: LocalExecutor) -> None:
        for _ in executor.workers:
            executor.activity_queue.put(None)
        end(executor)

    LocalExecutor.end = end_every_worker


def _started_when_its_tasks_did(run) -> None:
    """dag.test() records a run as started at its logical date (2026-01-01), so the UI would show
    it lasting months: record the start of its first task instead."""
    from airflow.models import DagRun, TaskInstance
    from airflow.utils.session import create_session
    from sqlalchemy import func, select, update

    with create_session() as session:
        first = select(func.min(TaskInstance.start_date)).where(
            TaskInstance.dag_id == run.dag_id, TaskInstance.run_id == run.run_id
        )
        session.execute(update(DagRun).where(DagRun.id == run.id).values(start_date=first.scalar_subquery()))


def _report(rt, pipeline, last, root: Path) -> None:
    from framework.operations.quality import document_index
    from framework.operations.status import shown
    from framework.storage.metrics import KIP_NAMES

    print("[5/5] final results: users with fewer than 3 events in an hour (one row per closed hour)")
    rt.read_output(pipeline).orderBy("window_start", "user_id").show(100, truncate=False)
    print(f"metrics of the last batch ({last.batch_id}, seq {last.seq}):")
    for column, name in KIP_NAMES.items():
        print(f"  {name:<36} {shown(column, last[column])}")
    print("\nwhere things are:")
    for label, path in [
        ("results", rt.tables(pipeline).output),
        ("pipeline state", rt.tables(pipeline).root),
        ("quality docs", document_index(str(root / "warehouse"))),
        ("landing", root / "landing"),
        ("airflow home", root / "airflow"),
        ("airflow output", root / "airflow" / "runs.log"),
        ("spark log", root / "spark-demo.log"),
    ]:
        print(f"  {label:<15} {path}")
    print(f"  inspect with   .venv/bin/python -m framework status --warehouse {root / 'warehouse'}")


def _next_steps(root: Path, airflow: dict[str, str]) -> None:
    """How to see it all in Airflow's UI: the api-server command, the address and the login."""
    script = root / "airflow-ui.sh"
    exports = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in airflow.items())
    script.write_text(
        f"#!/bin/sh\n# Airflow's UI on the demo's Airflow home (written by scripts/demo.py)\n{exports}"
        f"exec {shlex.quote(str(Path(sys.executable).with_name('airflow')))} api-server -H 127.0.0.1 -p 8080\n"
    )
    password = json.loads(Path(airflow["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE"]).read_text())[USER]
    print(
        "\nsee it in Airflow's UI:\n"
        f"  sh {script}\n"
        f"  then open http://127.0.0.1:8080 and log in as {USER}, password {password}\n"
        "  (Dags > user_alerts > Final results: the batches, their quality gate, charts, Data Docs).\n"
        "  The DAGs stay paused: unpaused with a scheduler running, user_alerts would catch up every hour\n"
        f"  since {START:%Y-%m-%d} (catchup=True); set FINALRESULTS_END first to bound it."
    )


def run(root: Path, hours: int, connect: bool = False) -> int:
    """The whole demo (with ``connect``, its batches over Spark Connect); returns the exit status."""
    for part in ("airflow", "warehouse", "landing"):
        shutil.rmtree(root / part, ignore_errors=True)
    root.mkdir(parents=True, exist_ok=True)
    airflow = _configure(root)
    print(f"[1/5] airflow db migrate (AIRFLOW_HOME={root / 'airflow'})", flush=True)
    _airflow("db", "migrate")
    with ExitStack() as stack:
        if connect:
            print("[2/5] a Spark Connect server; connection spark_connect_default -> it", flush=True)
            spark_task = _thin_clients(root, stack)
        else:
            print("[2/5] connection spark_default -> local[*]", flush=True)
            _airflow("connections", "add", "spark_default", "--conn-type", "spark", "--conn-host", "local[*]")
            spark_task = "spark-submit"
        return _demo(root, hours, airflow, spark_task)


def _demo(root: Path, hours: int, airflow: dict[str, str], spark_task: str) -> int:
    """Steps 3 to 5 of the demo, its Airflow configured and its Spark connection made."""
    sys.path.insert(0, str(REPO))
    from framework import Runtime
    from jobs import sample_data
    from jobs.user_alerts import PIPELINE

    end = START + dt.timedelta(hours=hours)
    print(f"[3/5] sample data: events that arrived in [{START}, {end})", flush=True)
    _sample_data(root, end)
    records = len(sample_data.records("user_events", START, end))
    print(f"      {records} records in {root / 'landing' / 'user_events'}", flush=True)

    with _api_server(root / "airflow" / "api-server.log"):
        if not _run_intervals(_load_dags().user_alerts, PIPELINE, root, hours, spark_task):
            return 1
    rt = Runtime(_spark(root / "spark-demo.log"), str(root / "warehouse"))
    last = rt.read_metrics(PIPELINE).orderBy("seq", ascending=False).first()
    _report(rt, PIPELINE, last, root)
    _next_steps(root, airflow)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Command line of the demo."""
    parser = argparse.ArgumentParser(prog="demo.py", description="Run the user_alerts DAG through Airflow.")
    parser.add_argument(
        "--root", type=Path, default=REPO / "var" / "demo", help="scratch folder, wiped first (default: var/demo)"
    )
    parser.add_argument("--hours", type=int, default=3, help="hourly intervals to run (default: 3)")
    parser.add_argument("--connect", action="store_true", help="run the batches over a Spark Connect server it starts")
    args = parser.parse_args(argv)
    if args.hours < 1:
        parser.error("--hours must be at least 1")
    return run(args.root.resolve(), args.hours, args.connect)


if __name__ == "__main__":
    sys.exit(main())
