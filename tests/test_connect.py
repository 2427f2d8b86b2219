"""Spark Connect (#40), as far as it goes today: a thin client of a Connect server (a process of
its own, ``SPARK_REMOTE`` set, no JVM) reads what classic batches wrote: whether each table
exists, its id and version, the final results and the ledger, equal to the classic session's
answers.

The client runs in a subprocess: PySpark marks its whole process as a Connect client once a
Connect session starts (``SPARK_CONNECT_MODE_ENABLED``), which would turn this worker's classic
session's ``DeltaTable`` calls into Connect ones.
"""

import json
import os
import subprocess
import sys

import pytest
from connectserver import connect_server
from harness import results, run_stream, unsunk

from framework import Runtime
from framework.storage import tables

pytestmark = pytest.mark.timeout(900)

CLIENT = """
import json, os, sys
from framework import Runtime, spark_session
from framework.storage import tables
from harness import results, unsunk
import pyspark

warehouse = sys.argv[1]
spark = spark_session("connect-client")  # SPARK_REMOTE names the server
rt = Runtime(spark, warehouse, quality=False)
p = unsunk("thin").to("out")
t = rt.tables(p)
paths = {"state": t.state, "output": t.output, "none": t.root + "/none"}
got = {
    "session": type(spark).__module__,
    "exists": {name: tables.exists(spark, path) for name, path in paths.items()},
    "head": tables.head(spark, t.output),
    "rows": results(rt, p),
    "ledger": sorted(r["batch_id"] for r in rt.read_ledger(p).collect()),
}


def command_of(pid):
    try:
        with open(f"/proc/{pid}/stat") as stat:
            if stat.read().rsplit(")", 1)[1].split()[1] != str(os.getpid()):
                return None
        with open(f"/proc/{pid}/cmdline") as cmdline:
            return cmdline.read().split("\\0")[0]
    except OSError:  # gone meanwhile
        return None


# after the framework's calls: a JVM any of them started is still there
got["children"] = [c for c in (command_of(pid) for pid in os.listdir("/proc") if pid.isdigit()) if c]
got["gateway"] = pyspark.SparkContext._gateway is not None
print(json.dumps(got))
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with connect_server(tmp_path_factory.mktemp("connect") / "server.log") as running:
        yield running


def test_a_thin_client_reads_what_classic_batches_wrote(spark, server, warehouse):
    rt = Runtime(spark, warehouse, quality=False)
    p = unsunk("thin").to("out")
    run_stream(rt, p, [[("A", 1, 1), ("B", 4, 2)], [("A", 12, 3)], [("B", 30, 4)]])
    tests = os.path.dirname(__file__)
    env = dict(os.environ, SPARK_REMOTE=server.url, PYTHONPATH=os.pathsep.join([tests, os.path.dirname(tests)]))
    done = subprocess.run([sys.executable, "-c", CLIENT, warehouse], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["session"] == "pyspark.sql.connect.session" and not got["gateway"]
    assert not [c for c in got["children"] if "java" in c], got["children"]
    assert got["exists"] == {"state": True, "output": True, "none": False}
    assert tuple(got["head"]) == tables.head(spark, rt.tables(p).output)
    assert got["rows"] == json.loads(json.dumps(results(rt, p)))
    assert got["ledger"] == ["b0000", "b0001", "b0002"] and len(got["rows"]) == 3
