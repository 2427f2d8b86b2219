"""An S3 server on 127.0.0.1 for the tests: moto in server mode, started and stopped by them, and
the settings that put a warehouse on it (a bucket of its own, ``s3a://`` paths).

The server answers one request at a time (werkzeug without threads), as S3 answers a
conditional PUT atomically: two commits of one Delta version racing through a threaded moto
could both pass its "does the key exist?" check. Its s3a settings are per bucket
(``fs.s3a.bucket.<bucket>.*``), so the shared test session (conftest's ``spark``, started with
S3 support) reaches it without touching anything else, and each server gets a bucket name of its
own so that no cached s3a file system keeps an older server's endpoint.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

SERVE = """
import sys
from moto.server import DomainDispatcherApplication, create_backend_app
from werkzeug.serving import run_simple
run_simple("127.0.0.1", int(sys.argv[1]), DomainDispatcherApplication(create_backend_app), threaded=False)
"""
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}


@dataclass(frozen=True)
class S3:
    endpoint: str  # http://127.0.0.1:<port>
    bucket: str
    via: str | None = None  # where s3a sends its requests, if not to the server (a proxy: tests/s3faults.py)

    def url(self, *parts: str) -> str:
        return "/".join([f"s3a://{self.bucket}", *parts])

    def hadoop_conf(self) -> dict[str, str]:
        """The bucket's s3a settings, as a Hadoop configuration names them."""
        per_bucket = {
            "endpoint": self.via or self.endpoint,
            "endpoint.region": CREDENTIALS["AWS_DEFAULT_REGION"],
            "path.style.access": "true",
            "connection.ssl.enabled": "false",
            "access.key": CREDENTIALS["AWS_ACCESS_KEY_ID"],
            "secret.key": CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        }
        return {f"fs.s3a.bucket.{self.bucket}.{key}": value for key, value in per_bucket.items()}

    def spark_conf(self) -> dict[str, str]:
        """The same as Spark settings, for a session or spark-submit of its own."""
        return {f"spark.hadoop.{key}": value for key, value in self.hadoop_conf().items()}

    def reach_from(self, spark) -> None:
        """Let a running session (and every session of its SparkContext) use the bucket."""
        hadoop = spark._jsc.hadoopConfiguration()
        for key, value in self.hadoop_conf().items():
            hadoop.set(key, value)

    def env(self) -> dict[str, str]:
        """Environment for a client outside Spark (boto3, pyarrow: the quality-gate task)."""
        return dict(CREDENTIALS, AWS_ENDPOINT_URL=self.endpoint)

    def client(self, proxied: bool = False):
        """A boto3 client of the server, or (``proxied``) of the proxy it is ``behind``."""
        import boto3

        return boto3.client("s3", endpoint_url=self.via if proxied else self.endpoint, **_boto_credentials())

    def keys(self, prefix: str = "") -> list[str]:
        pages = self.client().get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix)
        return [o["Key"] for page in pages for o in page.get("Contents", [])]

    def copy(self, source: str, target: str, to: S3 | None = None) -> str:
        """Copy every object under folder ``source`` to folder ``target`` of this bucket or of
        bucket ``to`` (a warehouse copied with its Delta logs holds the same tables); the copy's
        ``s3a://`` URL."""
        client, into = self.client(), to or self
        for key in self.keys(f"{source}/"):
            copied = f"{target}/{key[len(source) + 1 :]}"
            client.copy_object(Bucket=into.bucket, Key=copied, CopySource={"Bucket": self.bucket, "Key": key})
        return into.url(target)

    def behind(self, proxy: str, name: str) -> S3:
        """A new bucket ``<bucket>-<name>`` on this server that s3a reaches through ``proxy``
        (boto3, for the tests' own look, still talks to the server)."""
        bucket = f"{self.bucket}-{name}"
        self.client().create_bucket(Bucket=bucket)
        return replace(self, bucket=bucket, via=proxy)


def _boto_credentials() -> dict[str, str]:
    return {
        "aws_access_key_id": CREDENTIALS["AWS_ACCESS_KEY_ID"],
        "aws_secret_access_key": CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        "region_name": CREDENTIALS["AWS_DEFAULT_REGION"],
    }


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def s3_server(log: Path):
    """A moto S3 server on 127.0.0.1 with one empty bucket; stopped on exit."""
    import boto3

    port = _free_port()
    with open(log, "w") as out:
        server = subprocess.Popen([sys.executable, "-c", SERVE, str(port)], stdout=out, stderr=out)
    s3 = S3(f"http://127.0.0.1:{port}", f"lake-{port}")
    try:
        client = boto3.client("s3", endpoint_url=s3.endpoint, **_boto_credentials())
        deadline = time.monotonic() + 60
        while True:
            try:
                client.create_bucket(Bucket=s3.bucket)
                break
            except Exception:  # not listening yet
                assert server.poll() is None and time.monotonic() < deadline, log.read_text()[-2000:]
                time.sleep(0.2)
        yield s3
    finally:
        server.terminate()
        server.wait(timeout=30)


def child_env(s3: S3) -> dict[str, str]:
    """Environment of a child process whose ``spark_session`` must reach the bucket: S3 support
    on (``FINALRESULTS_S3``) and the bucket's settings (``FINALRESULTS_TEST_CONF``, read by the
    test children)."""
    import json

    return dict(os.environ, FINALRESULTS_S3="1", FINALRESULTS_TEST_CONF=json.dumps(s3.spark_conf()))
