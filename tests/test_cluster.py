"""The jobs run on a real Spark cluster: a standalone master and two workers on 127.0.0.1,
started from the pyspark installation, a job of ``jobs/`` submitted to it with spark-submit in
client mode (Delta's and the S3 jars resolved by ``--packages``, as in local mode), and the final
rows equal those of local mode, emission batch and stream time included. Landing data and the
warehouse are in a bucket of the S3 server the tests start (tests/s3server.py), as in
production: no worker shares the driver's disk."""

import datetime as dt
import http.client
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
START, END = dt.datetime(2026, 1, 1), dt.datetime(2026, 1, 1, 2)  # one two-hour batch: one submission


def _free_ports(n: int) -> list[int]:
    """``n`` distinct free ports: held open together, so that no two are the same (one picked
    after another could be one a process has not bound yet: a worker's UI on the master's port)."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _alive_workers(ui_port: int) -> int:
    """Workers the master's UI reports alive; 0 while it does not answer with its JSON yet."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/json/", timeout=5) as r:
            return len([w for w in json.load(r)["workers"] if w["state"] == "ALIVE"])
    except (OSError, ValueError, KeyError, http.client.HTTPException):  # not up, or a page not JSON yet
        return 0


@pytest.fixture
def cluster(tmp_path):
    """``spark://`` URL of a master with two one-core workers; stopped afterwards."""
    env = dict(
        os.environ,
        SPARK_LOCAL_IP="127.0.0.1",
        PYSPARK_PYTHON=sys.executable,
        SPARK_WORKER_DIR=str(tmp_path / "work"),
        SPARK_LOG_DIR=str(tmp_path / "logs"),
    )
    port, ui, *worker_uis = _free_ports(4)
    log = open(tmp_path / "cluster.log", "w")
    spark_class = str(BIN / "spark-class")
    procs = [
        subprocess.Popen(
            [
                spark_class,
                "org.apache.spark.deploy.master.Master",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--webui-port",
                str(ui),
            ],
            env=env,
            stdout=log,
            stderr=log,
        )
    ]
    url = f"spark://127.0.0.1:{port}"
    procs += [
        subprocess.Popen(
            [
                spark_class,
                "org.apache.spark.deploy.worker.Worker",
                url,
                "--host",
                "127.0.0.1",
                "--cores",
                "1",
                "--memory",
                "1g",
                "--webui-port",
                str(worker_ui),
            ],
            env=env,
            stdout=log,
            stderr=log,
        )
        for worker_ui in worker_uis
    ]
    try:
        deadline = time.monotonic() + 180
        while _alive_workers(ui) < 2:
            assert time.monotonic() < deadline, (tmp_path / "cluster.log").read_text()[-3000:]
            time.sleep(1)
        yield url
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(timeout=60)
        log.close()


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_a_job_submitted_to_a_standalone_cluster_gives_the_final_rows_of_local_mode(spark, s3, cluster, tmp_path):
    from framework import Runtime
    from framework.orchestration.airflow import DELTA_PACKAGE
    from framework.orchestration.jobs import run_interval
    from framework.storage import jars
    from framework.storage import s3 as s3_support

    sys.path.insert(0, str(ROOT))  # the job modules, as the other tests that submit one import them
    from jobs import sample_data, user_alerts

    landing = s3.url("landing")
    sample_data.generate(spark, landing, START, END, tables=["user_events"])
    on_cluster, local = s3.url("cluster_lake"), str(tmp_path / "local_lake")
    s3_conf = {**s3.spark_conf(), "spark.delta.logStore.s3a.impl": s3_support.LOGSTORE_CLASS}
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1")
    packages = [DELTA_PACKAGE, *s3_support.packages()]
    resolved = jars.recorded(packages)  # as a DAG submits: the files the install resolved, else Ivy
    jar_arguments = (
        ["--jars", ",".join([*resolved, str(s3_support.LOGSTORE_JAR)])]
        if resolved
        else ["--packages", ",".join(packages), "--jars", str(s3_support.LOGSTORE_JAR)]
    )
    done = subprocess.run(
        [
            str(BIN / "spark-submit"),
            "--master",
            cluster,
            "--deploy-mode",
            "client",
            *jar_arguments,
            *[arg for key, value in s3_conf.items() for arg in ("--conf", f"{key}={value}")],
            "--executor-memory",
            "512m",
            "--conf",
            f"spark.pyspark.python={sys.executable}",
            str(ROOT / "jobs" / "user_alerts.py"),
            "--batch-start",
            START.isoformat(),
            "--batch-end",
            END.isoformat(),
            "--warehouse",
            on_cluster,
            "--landing",
            landing,
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert "committed" in done.stdout
    run_interval(spark, user_alerts.PIPELINE, user_alerts.LANDING, START, END, local, landing)

    executors = list((tmp_path / "work").glob("app-*/*/stderr"))
    assert len({e.parent.parent for e in executors}) == 1  # the batch ran as an application on the workers
    got = Runtime(spark, on_cluster).read_output(user_alerts.PIPELINE)
    want = Runtime(spark, local).read_output(user_alerts.PIPELINE)
    assert want.count() > 0
    assert sorted(got.collect()) == sorted(want.collect())
