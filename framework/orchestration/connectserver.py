"""A Spark Connect server on 127.0.0.1 for one machine: what ``make demo CONNECT=1``, the
tests and ``bench/cold.py --connect`` run thin clients against. It starts from the pyspark install (its
``spark-submit`` and the ``spark-connect`` jar it ships) with Delta's jars, extensions and
catalog, and is stopped with its process group on leaving, whatever happens.

A client of it (``spark_session(remote=server.url)``) starts no JVM of its own: what it runs,
the server's JVM runs, on the same files as classic sessions on this machine. A production
server is the platform's (docs/operations.md#spark-connect lists the settings it needs).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from ..storage import jars
from ..storage import s3 as s3_support

SPARK_SUBMIT = Path(sys.executable).with_name("spark-submit")
SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
START_S = 180  # a JVM start on two shared cores


@dataclass(frozen=True)
class ConnectServer:
    port: int
    log: Path

    @property
    def url(self) -> str:
        return f"sc://127.0.0.1:{self.port}"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


@contextmanager
def connect_server(
    log: Path, master: str = "local[1]", shuffle_partitions: int = 2, s3: dict[str, str] | None = None
) -> Iterator[ConnectServer]:
    """A Connect server with Delta on a free loopback port, its output in ``log``; by default one
    task thread and two shuffle partitions, as the tests' own sessions. ``s3``: the server keeps
    warehouses on S3 too, with what a classic session's ``s3=True`` loads (hadoop-aws, the
    conditional-PUT LogStore for ``s3a://``) and these settings (the bucket's ``spark.hadoop.fs.s3a.*``)."""
    port = _free_port()
    packages = [jars.DELTA_PACKAGE, *(s3_support.packages() if s3 is not None else [])]
    on_s3 = s3_support.conf() if s3 is not None else {}
    given = [on_s3.pop("spark.jars")] if on_s3 else []  # the LogStore's jar, in spark-submit's --jars
    resolved = jars.recorded(packages)  # the files Ivy resolved at install: the JVM starts without resolving
    settings = {
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.shuffle.partitions": str(shuffle_partitions),
        "spark.sql.codegen.cache.maxEntries": "2000",  # static: what a classic session of ours has
        "spark.connect.grpc.binding.address": "127.0.0.1",
        "spark.connect.grpc.binding.port": str(port),
        "spark.ui.enabled": "false",
        **on_s3,
        **(s3 or {}),
    }
    command = [str(SPARK_SUBMIT), "--class", SERVER_CLASS, "--master", master, "--name", "finalresults-connect"]
    if resolved is None:
        command += ["--packages", ",".join(packages)]
    if files := [*(resolved or []), *given]:
        command += ["--jars", ",".join(files)]
    for key, value in settings.items():
        command += ["--conf", f"{key}={value}"]
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable)
    with open(log, "w") as out:
        server = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + START_S
        while not _listening(port):
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the Connect server did not start:\n{log.read_text()[-3000:]}")
            time.sleep(0.5)
        yield ConnectServer(port, log)
    finally:
        with suppress(ProcessLookupError):  # it may have died already (its log says why)
            os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
