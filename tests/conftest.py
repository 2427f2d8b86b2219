import json
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, os.path.dirname(__file__))
# The test JVMs' settings (JIT tier, interpreted expressions), for this process's sessions and
# every child process's: see the file.
os.environ["SPARK_CONF_DIR"] = os.path.join(os.path.dirname(__file__), "spark-conf")


# Every file, slowest first (worker seconds per file, two full runs' junit times averaged): two
# workers take whole files (--dist loadfile, --no-loadscope-reorder) in this order, so the last
# files to start are the shortest and neither worker runs alone for long at the end. Before every
# file was listed, the unlisted ones ran last in name order, and one worker ran alone for the
# last 100 s (bench/README.md#the-suite-on-2026-12-02).
SLOWEST_FIRST = (
    "test_connect.py",
    "test_airflow.py",
    "test_chunks.py",  # about 11 min alone since sessions, sliding windows and the gate joined it (2026-12-05)
    "test_versions.py",  # new on 2026-12-05: about 6 min alone (an Airflow run of three hours among them)
    "test_replay.py",
    "test_exactly_once.py",
    "test_airflow_scheduler.py",
    "test_rate_limit.py",
    "test_examples.py",
    "test_rate_limit_properties.py",
    "test_s3.py",
    "test_s3_faults.py",  # new on 2026-12-04: about 80 s alone
    "test_catalog.py",
    "test_retention.py",
    "test_operations.py",
    "test_kill.py",
    "test_bench.py",
    "test_cluster.py",
    "test_soak.py",
    "test_validation.py",
    "test_buffers.py",
    "test_upgrade.py",
    "test_properties.py",
    "test_airflow_plugin.py",
    "test_concurrency.py",
    "test_cli.py",
    "test_bad_input.py",
    "test_packaging.py",
    "test_intervals.py",
    "test_status_page.py",
    "test_quality.py",
    "test_downstream.py",
    "test_data_docs.py",
)


def pytest_collection_modifyitems(items):
    rank = {name: i for i, name in enumerate(SLOWEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


def _long_lived_jvm_options() -> str:
    """spark-defaults.conf's driver options without its stop at the quick JIT tier.

    The quick tier (C1) suits the short JVMs (a spark-submit, an Airflow task: one batch each).
    A worker's own JVM runs for half an hour, and there the optimising tier (C2) pays back
    within minutes: twelve tiny batches of four window types, alone, 58 s a round against
    88-107 s (JVM CPU 63 s against 87-104 s; bench/README.md#test-jvm)."""
    conf = Path(os.environ["SPARK_CONF_DIR"]) / "spark-defaults.conf"
    line = next(x for x in conf.read_text().splitlines() if x.startswith("spark.driver.defaultJavaOptions"))
    return " ".join(o for o in line.split()[1:] if not o.startswith("-XX:TieredStopAtLevel"))


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    from framework import spark_session

    # Interpreted expressions come from tests/spark-conf/spark-defaults.conf; the JIT tier is the
    # long-lived one (_long_lived_jvm_options).
    # One JVM serves a worker's share of the suite (half an hour of Delta tables): Spark's 1 GiB
    # default heap ran out near the end of CI and stopped the SparkContext under the last tests.
    # Catalog schemas (test_catalog) get their folders in a tmp dir, not in the checkout.
    # s3=True: the s3a file system and the S3 LogStore are loaded, for warehouses on the S3 server
    # some tests start (tests/s3.py); other tests never touch them.
    # local[1]: one task thread per worker JVM. The two workers' JVMs share two cores; with two
    # task threads each, two workers' warm tiny batches took 21.0 s a round where one thread each
    # took 17.5 s (alone: 15.9 -> 15.1 s). Shuffles keep two partitions, run one after the other.
    session = spark_session(
        "tests",
        master="local[1]",
        s3=True,
        conf={
            # two tasks per shuffle (still more than one partition): JVM CPU of a tiny batch,
            # tumbling 4.7 -> 4.1 s, rate-limited 12.8 -> 11.7 s against four
            "spark.sql.shuffle.partitions": "2",
            "spark.driver.memory": "4g",
            "spark.driver.defaultJavaOptions": _long_lived_jvm_options(),
            "spark.sql.warehouse.dir": str(tmp_path_factory.mktemp("spark-warehouse")),
        },
    )
    yield session
    session.stop()


@pytest.fixture(scope="module", autouse=True)
def _forget_delta_logs():
    """Each module's tables live in its own tmp dirs: drop their cached Delta logs afterwards."""
    yield
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        active._jvm.org.apache.spark.sql.delta.DeltaLog.clearCache()


@pytest.fixture(scope="module")
def s3(spark, tmp_path_factory):
    """A moto S3 server on 127.0.0.1 for the module's tests, reachable from ``spark``."""
    from s3server import s3_server

    with s3_server(tmp_path_factory.mktemp("s3") / "server.log") as server:
        server.reach_from(spark)
        yield server


@pytest.fixture
def warehouse(tmp_path):
    return str(tmp_path / "lake")


@pytest.fixture
def suites(tmp_path):
    """A directory of per-pipeline suite files: user_alerts caps events at 10 (critical) and warns above 2."""
    path = tmp_path / "expectations"
    path.mkdir()
    (path / "user_alerts.json").write_text(
        json.dumps(
            {
                "name": "user_alerts",
                "expectations": [
                    {
                        "type": "expect_column_values_to_be_between",
                        "kwargs": {"column": "events", "max_value": 10},
                        "meta": {"severity": "critical"},
                    },
                    {
                        "type": "expect_column_max_to_be_between",
                        "kwargs": {"column": "events", "max_value": 2},
                        "meta": {"severity": "warning"},
                    },
                ],
            }
        )
    )
    return path
