"""Spark Connect (#40): thin clients of a Connect server (processes of their own, ``SPARK_REMOTE``
set, no JVM) read what classic batches wrote (whether each table exists, its id and version, the
results, the ledger, the commit files); write, read, list and remove the small files beside the
tables in a form that a classic session and the quality-gate task (no Spark) read too; and run
batches with the guarantees of classic ones: equal rows and ledger, a crash before each write
point then a re-run, a client killed with a write in flight then a re-run beside it, two clients
racing one batch, a client racing a classic job; and the worked examples. With the warehouse on
the tests' S3 server, where the server's conditional-PUT LogStore makes commits atomic: batches,
a client killed with a write in flight then a re-run, two clients racing one batch. The Airflow
run of the demo over Connect is in ``test_airflow.py``.

Each client runs in a subprocess: PySpark marks its whole process as a Connect client once a
Connect session starts (``SPARK_CONNECT_MODE_ENABLED``), which would turn this worker's classic
session's ``DeltaTable`` calls into Connect ones.
"""

import json
import os
import random
import signal
import subprocess
import sys

import pytest
import reference as ref
from harness import expected, frame, results, run_stream, unsunk
from test_concurrency import race
from test_exactly_once import BATCHES, IDS, pipeline, run, snapshot

from framework import Runtime
from framework.operations import outcome
from framework.orchestration.connectserver import connect_server
from framework.orchestration.jobs import load_job
from framework.storage import classic, commitlog, files, tables

pytestmark = pytest.mark.timeout(900)

CLIENT = """
import json, os, sys
from framework import Runtime, spark_session
from framework.storage import commitlog, tables
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
    "commits": commitlog.commits_after(spark, t.state, 0),  # read by name, in one job
    "past_head": commitlog.commits_after(spark, t.state, 1000),
}


def condition(ask):  # a table that is there but cannot be read is not "no table"
    try:
        return ["answered", ask()]
    except Exception as e:
        return ["raised", e.getCondition()]


got["corrupt"] = {f.__name__: condition(lambda: f(spark, sys.argv[2])) for f in (tables.head, tables.exists)}


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


SMALL_FILES = """
import json, sys
from framework import spark_session
from framework.storage import files

root = sys.argv[1]
spark = spark_session("connect-files")
got = {"classic": files.get_text(spark, f"{root}/classic.txt")}
files.put_text(spark, f"{root}/connect.json", sys.argv[2])
got["connect"] = files.get_text(spark, f"{root}/connect.json")
got["names"] = files.list_names(spark, f"{root}/staging")
got["marker"] = files.get_text(spark, f"{root}/staging/3-abc/batch_id")
got["staged"] = [files.is_staged(spark, f"{root}/staging/{name}/output") for name in ("3-abc", "4-def")]
files.remove(spark, f"{root}/staging/3-abc/output")
files.remove(spark, f"{root}/staging/4-def")
files.put_text(spark, f"{root}/gone.json", "soon gone")
files.remove(spark, f"{root}/gone.json")
got["after"] = {
    "names": files.list_names(spark, f"{root}/staging"),
    "staged": files.is_staged(spark, f"{root}/staging/3-abc/output"),
    "gone": files.get_text(spark, f"{root}/gone.json"),
    "missing": files.get_text(spark, f"{root}/missing.json"),
    "none": files.list_names(spark, f"{root}/none"),
}
parts = [f"{root}/parts/{i}.bin" for i in range(7)]
got["first_missing"] = [  # one missing, first, fourth or last of seven
    files.first_missing(spark, [*parts[:i], f"{root}/parts/x{i}", *parts[i + 1 :]]) for i in (0, 3, 6)
]
got["none_missing"] = files.first_missing(spark, parts)
print(json.dumps(got))
"""


CRASHES = """
import json, sys
from framework import Runtime, spark_session
from framework.operations.attempt import WRITE_POINTS
from harness import frame, results, unsunk

root, batches = sys.argv[1], json.loads(sys.argv[2])
spark = spark_session("connect-crashes")
p = unsunk("crash").to("out")
offsets = [sum(len(b) for b in batches[:i]) for i in range(len(batches))]


class Crash(Exception):
    pass


def crash_at(point):
    def fail(at):
        if at == point:
            raise Crash(point)
    return fail


def run(rt, i):
    return rt.run_batch(p, f"b{i}", frame(spark, batches[i], offsets[i])).status


def snapshot(rt):
    return [results(rt, p), sorted((r["seq"], r["batch_id"], r["status"]) for r in rt.read_ledger(p).collect())]


got = {"session": type(spark).__module__}
for point in ("none", *(at for at in WRITE_POINTS if at != "buffer")):  # this pipeline has no buffer
    rt = Runtime(spark, f"{root}/{point}", quality=False)
    statuses = [run(rt, 0)]
    try:
        statuses.append(run(Runtime(spark, f"{root}/{point}", quality=False, before_write=crash_at(point)), 1))
    except Crash:
        statuses.append("crashed")
    statuses.append(run(rt, 1))
    got[point] = {"statuses": statuses, "after_b1": snapshot(rt)}
got["none"]["statuses"].append(run(rt := Runtime(spark, f"{root}/none", quality=False), 2))
got["none"]["after_b2"] = snapshot(rt)
print(json.dumps(got))
"""

RACER = """
import json, os, sys, time
from framework import Runtime, spark_session
from framework.errors import ConcurrentBatchError
from harness import frame, unsunk

warehouse, barrier, name, batch = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
spark = spark_session("connect-racer")


def meet(at):  # both clients reach their commit point before either passes it
    if at == "commit_point":
        open(os.path.join(barrier, name), "w").close()
        deadline = time.monotonic() + 300
        while len(os.listdir(barrier)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)


rt = Runtime(spark, warehouse, quality=False, before_write=meet)
try:
    print(json.dumps(rt.run_batch(unsunk("race").to("out"), "b0001", frame(spark, batch, 2)).status))
except ConcurrentBatchError:
    print(json.dumps("fenced out"))
"""


EXAMPLES = """
import json, sys
from framework import spark_session
import test_examples

spark = spark_session("connect-examples")
root, names = sys.argv[1], sys.argv[2:]
for name in names:  # each with its own assertions, on a warehouse of its own
    getattr(test_examples, name)(spark, f"{root}/{name}")
print(json.dumps(names))
"""
# test_examples.py's own tests, one per window type: the blog's alert (tumbling, with its quality
# gate: GX over Connect), KIP-450's sliding windows, KIP-94's session merge: 49 s from a client
# of a one-thread server (130 s with two more examples, while the race below ran beside them).
EXAMPLES_OVER_CONNECT = [
    "test_blog_alert_when_fewer_than_3_events_in_an_hour",
    "test_kip450_four_records_make_seven_sliding_windows",
    "test_kip94_a_record_between_two_sessions_merges_exactly_those_two",
]


KILLED = """
import json, os, signal, sys, threading, time
from framework import Runtime, spark_session
from harness import frame, unsunk

warehouse, point, delay, batches = sys.argv[1], sys.argv[2], float(sys.argv[3]), json.loads(sys.argv[4])
spark = spark_session("connect-killed")
p = unsunk("killed").to("out")


def kill_soon(at="b1"):  # SIGKILL ``delay`` s after ``point`` of b1: the write just sent is in flight
    if at == point:
        print("KILL", at, flush=True)
        threading.Timer(delay, os.kill, (os.getpid(), signal.SIGKILL)).start()


Runtime(spark, warehouse, quality=False).run_batch(p, "b0", frame(spark, batches[0], 0))
kill_soon()
rt = Runtime(spark, warehouse, quality=False, before_write=kill_soon)
rt.run_batch(p, "b1", frame(spark, batches[1], len(batches[0])))
time.sleep(60)  # a batch that finished before the kill is killed all the same
"""

RERUNS = """
import json, sys
from framework import Runtime, spark_session
from framework.errors import ConcurrentBatchError
from harness import frame, results, unsunk

warehouses, batches = json.loads(sys.argv[1]), json.loads(sys.argv[2])
spark = spark_session("connect-reruns")
p = unsunk("killed").to("out")
got = {}
for warehouse in warehouses:
    rt, statuses = Runtime(spark, warehouse, quality=False), []
    for i in (1, 2):
        offset = sum(len(b) for b in batches[:i])
        try:
            statuses.append(rt.run_batch(p, f"b{i}", frame(spark, batches[i], offset)).status)
        except ConcurrentBatchError:  # the killed client's commit landed meanwhile: Airflow retries
            statuses.append("fenced out, retried: " + rt.run_batch(p, f"b{i}", frame(spark, batches[i], offset)).status)
    ledger = sorted((r["seq"], r["batch_id"], r["status"]) for r in rt.read_ledger(p).collect())
    got[warehouse] = {"statuses": statuses, "rows": results(rt, p), "ledger": ledger}
print(json.dumps(got))
"""


def _client_env(server):
    """The environment of a Connect client process of ``server`` that imports the tests' harness."""
    tests = os.path.dirname(__file__)
    return dict(os.environ, SPARK_REMOTE=server.url, PYTHONPATH=os.pathsep.join([tests, os.path.dirname(tests)]))


def _client(server, script, *args):
    """Run ``script`` in a Connect client process of ``server``; what it printed last, as JSON."""
    done = subprocess.run(
        [sys.executable, "-c", script, *args], env=_client_env(server), capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def server(tmp_path_factory, s3):
    """The module's Connect server, which keeps warehouses on local disk and in ``s3``'s bucket."""
    with connect_server(tmp_path_factory.mktemp("connect") / "server.log", s3=s3.spark_conf()) as running:
        yield running


def test_a_thin_client_reads_what_classic_batches_wrote(spark, server, warehouse, tmp_path):
    rt = Runtime(spark, warehouse, quality=False)
    p = unsunk("thin").to("out")
    run_stream(rt, p, [[("A", 1, 1), ("B", 4, 2)], [("A", 12, 3)], [("B", 30, 4)]])
    corrupt = tmp_path / "corrupt" / "_delta_log"
    corrupt.mkdir(parents=True)
    (corrupt / f"{0:020d}.json").write_text('{"commitInfo": ')  # a first commit cut short
    got = _client(server, CLIENT, warehouse, str(corrupt.parent))
    assert got["session"] == "pyspark.sql.connect.session" and not got["gateway"]
    assert not [c for c in got["children"] if "java" in c], got["children"]
    assert got["exists"] == {"state": True, "output": True, "none": False}
    assert tuple(got["head"]) == tables.head(spark, rt.tables(p).output)
    assert got["rows"] == json.loads(json.dumps(results(rt, p)))
    assert got["ledger"] == ["b0000", "b0001", "b0002"] and len(got["rows"]) == 3
    commits = commitlog.commits_after(spark, rt.tables(p).state, 0)
    assert got["commits"] == [list(c) for c in commits] and len(commits) >= 2 and got["past_head"] is None
    for ask, (what, condition) in got["corrupt"].items():  # not taken for a missing table: raised
        assert what == "raised" and not condition.startswith(tables.NO_TABLE), (ask, condition)


def test_small_files_written_over_connect_read_as_classic_ones_and_back(spark, server, tmp_path):
    """The staging markers, the gate's outcome and the status, written, read, listed and removed
    by a thin client, and read by a classic session and by the quality-gate task (no Spark); a
    classic write over the client's form replaces it. And the first of many files that is missing
    (a replay's restore point after VACUUM), found by the server."""
    root = str(tmp_path)
    classic_text, connect_text = 'line one\nline "two"', '{"a": "x\\ny"}\n second line'
    files.put_text(spark, f"{root}/classic.txt", classic_text)
    for name in ("3-abc", "4-def"):
        files.stage(spark.range(3), f"{root}/staging/{name}/output")
        files.put_text(spark, f"{root}/staging/{name}/batch_id", f"b-{name}")
    (tmp_path / "parts").mkdir()
    for i in range(7):
        (tmp_path / "parts" / f"{i}.bin").write_bytes(b"x")
    got = _client(server, SMALL_FILES, root, connect_text)
    assert got["first_missing"] == [f"{root}/parts/x{i}" for i in (0, 3, 6)] and got["none_missing"] is None
    assert got["classic"] == classic_text and got["connect"] == connect_text
    assert got["names"] == ["3-abc", "4-def"] and got["marker"] == "b-3-abc" and got["staged"] == [True, True]
    assert got["after"] == {"names": ["3-abc"], "staged": False, "gone": None, "missing": None, "none": []}
    # what the client wrote and removed, as a classic session and the gate task read it
    assert os.path.isdir(f"{root}/connect.json")
    assert files.get_text(spark, f"{root}/connect.json") == connect_text == outcome.read_text(f"{root}/connect.json")
    assert files.get_text(spark, f"{root}/gone.json") is None and outcome.read_text(f"{root}/gone.json") is None
    assert not files.is_staged(spark, f"{root}/staging/3-abc/output")
    files.put_text(spark, f"{root}/connect.json", "classic again")
    assert os.path.isfile(f"{root}/connect.json") and outcome.read_text(f"{root}/connect.json") == "classic again"
    classic.write_file(spark, f"{root}/gone.json", "in place")  # as put_text writes on an object store
    assert os.path.isfile(f"{root}/gone.json") and files.get_text(spark, f"{root}/gone.json") == "in place"


def test_batches_of_a_thin_client_crashing_before_any_write_end_as_a_clean_classic_run(spark, server, tmp_path):
    """From a thin client: batches b0-b2 (an emission, a late record) give the rows and ledger of
    a classic session's run of them; and where b1 crashes before each write point (the staged
    rows, the commit point, publication) and is run again, the rows and ledger of b1 run once."""
    batches = [[["A", 1, 1], ["B", 4, 2]], [["A", 12, 3], ["B", 3, 9]], [["B", 30, 4]]]
    got = _client(server, CRASHES, str(tmp_path / "thin"), json.dumps(batches))
    assert got.pop("session") == "pyspark.sql.connect.session"
    clean = got.pop("none")
    assert clean["statuses"] == ["committed", "committed", "already committed", "committed"]
    rt, p = Runtime(spark, str(tmp_path / "classic"), quality=False), unsunk("crash").to("out")
    run_stream(rt, p, [[tuple(r) for r in b] for b in batches], ids=["b0", "b1", "b2"])
    ledger = sorted((r["seq"], r["batch_id"], r["status"]) for r in rt.read_ledger(p).collect())
    assert clean["after_b2"] == json.loads(json.dumps([results(rt, p), ledger]))
    assert len(clean["after_b2"][0]) == 3 and len(clean["after_b1"][0]) == 2
    assert sorted(got) == ["commit_point", "output", "publish"]
    for point, after in got.items():
        assert after["statuses"][1] == "crashed", point
        assert after["statuses"][2] == ("already committed" if point == "publish" else "committed"), point
        assert after["after_b1"] == clean["after_b1"], point


def test_two_thin_clients_racing_one_batch_commit_it_once(spark, server, tmp_path):
    """Two clients of one server run batch b1 at once, meeting at their commit point: one
    commits, the other is fenced out; the rows are a clean run's."""
    batches = [[("A", 1, 1), ("B", 4, 2)], [("A", 12, 3)], [("B", 30, 4)]]
    clean = Runtime(spark, str(tmp_path / "clean"), quality=False)
    p = unsunk("race").to("out")
    run_stream(clean, p, batches)
    rt = Runtime(spark, str(tmp_path / "raced"), quality=False)
    rt.run_batch(p, "b0000", frame(spark, batches[0]))
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    tests = os.path.dirname(__file__)
    env = dict(os.environ, SPARK_REMOTE=server.url, PYTHONPATH=os.pathsep.join([tests, os.path.dirname(tests)]))
    command = [sys.executable, "-c", RACER, str(tmp_path / "raced"), str(barrier)]
    racers = [
        subprocess.Popen([*command, name, json.dumps(batches[1])], env=env, stdout=subprocess.PIPE, text=True)
        for name in ("one", "two")
    ]
    outcomes = sorted(json.loads(r.communicate(timeout=600)[0].strip().splitlines()[-1]) for r in racers)
    assert outcomes == ["committed", "fenced out"]
    assert rt.run_batch(p, "b0001", frame(spark, batches[1], 2)).status == "already committed"
    rt.run_batch(p, "b0002", frame(spark, batches[2], 3))
    assert results(rt, p) == results(clean, p)


def test_the_worked_examples_pass_from_a_thin_client(server, tmp_path):
    """The source documents' examples (``EXAMPLES_OVER_CONNECT``) run by a thin client, each
    test asserting what it asserts in a classic session."""
    assert _client(server, EXAMPLES, str(tmp_path), *EXAMPLES_OVER_CONNECT) == EXAMPLES_OVER_CONNECT


def test_a_thin_client_and_a_classic_job_racing_one_batch_commit_it_once(spark, server, warehouse, tmp_path):
    """test_concurrency's race with one runner a thin client and the other a classic job with its
    own JVM (as spark-submit starts one), on one warehouse on local disk: each commits a batch of
    its own pipeline, and of the batch both run at once, one commits it and the other is refused
    or finds it committed; the tables are a clean run's."""
    race(spark, f"{warehouse}/shared", f"{warehouse}/clean", tmp_path / "gate", remote=server.url)


def test_a_thin_client_killed_with_a_write_in_flight_then_rerun_ends_as_a_clean_run(spark, server, tmp_path):
    """SIGKILL of a client 0.2 s after it sent b1's staged rows, its commit point or its
    publication to the server, and at a random moment of b1: the server may still finish what the
    client sent. A new client runs b1 and b2 again at once, beside whatever the server still runs
    (a commit point that lands meanwhile fences it out, and it runs again, as Airflow's retry
    would): every warehouse ends with the rows and ledger of a clean run."""
    batches = [[("A", 1, 1), ("B", 4, 2)], [("A", 12, 3), ("C", 3, 4)], [("B", 30, 5)]]
    clean = Runtime(spark, str(tmp_path / "clean"), quality=False)
    p = unsunk("killed").to("out")
    run_stream(clean, p, batches, ids=["b0", "b1", "b2"])
    expected = {
        "rows": json.loads(json.dumps(results(clean, p))),
        "ledger": [list(r) for r in sorted((r.seq, r.batch_id, r.status) for r in clean.read_ledger(p).collect())],
    }
    assert len(expected["rows"]) == 3
    kills = {"output": 0.2, "commit_point": 0.2, "publish": 0.2, "b1": random.Random(20261128).uniform(0.5, 4.0)}
    env = _client_env(server)
    for point, delay in kills.items():
        args = [str(tmp_path / point), point, str(delay), json.dumps(batches)]
        done = subprocess.run([sys.executable, "-c", KILLED, *args], env=env, capture_output=True, text=True)
        assert done.returncode == -signal.SIGKILL and f"KILL {point}" in done.stdout, done.stderr[-3000:]
    got = _client(server, RERUNS, json.dumps([str(tmp_path / point) for point in kills]), json.dumps(batches))
    for point in kills:
        reran = got[str(tmp_path / point)]
        assert {k: reran[k] for k in expected} == expected, (point, reran)
        assert reran["statuses"][-1] in ("committed", "fenced out, retried: committed"), (point, reran)


REPLAY = """
import json, sys
from framework import Runtime, spark_session
from framework.operations.replay import ReplayBatch
from harness import frame
from test_exactly_once import BATCHES, pipeline

warehouse, fixed = sys.argv[1], json.loads(sys.argv[2])
spark = spark_session("connect-replay")
rt = Runtime(spark, warehouse, quality=False)
inputs = [fixed, BATCHES[2]]
offsets = [len(BATCHES[0]), len(BATCHES[0]) + len(BATCHES[1])]
batches = [ReplayBatch(f"b000{i + 1}", frame(spark, rows, offsets[i])) for i, rows in enumerate(inputs)]
done = rt.replay(pipeline("replay"), batches)
print(json.dumps({"range": [done.first, done.last], "ran": len(done.batches)}))
"""


def test_a_replay_from_a_thin_client_equals_a_clean_run_of_the_fixed_input(spark, server, tmp_path):
    """A thin client replays b0001-b0002 of a classic warehouse with b0001's input fixed: every
    table a reader sees (the ledger aside: the replay records itself there) equals a clean
    classic run of the fixed input, and differs from what was there before."""
    from test_exactly_once import BATCHES, pipeline, snapshot
    from test_replay import FIXED

    p = pipeline("replay")
    replayed = Runtime(spark, str(tmp_path / "lake"), quality=False)
    clean = Runtime(spark, str(tmp_path / "clean"), quality=False)
    run_stream(replayed, p, BATCHES)
    run_stream(clean, p, [BATCHES[0], FIXED, BATCHES[2]])

    def readers_see(rt):
        return {name: rows for name, rows in snapshot(rt, p).items() if name != "ledger"}

    before = readers_see(replayed)
    done = _client(server, REPLAY, str(tmp_path / "lake"), json.dumps(FIXED))
    assert done == {"range": ["b0001", "b0002"], "ran": 2}
    assert readers_see(replayed) == readers_see(clean) != before


VERSIONS = """
import json, sys
from framework import Runtime, VersionSwitchedError, spark_session
from framework.operations import versions
from harness import frame, unsunk

warehouse, batches = sys.argv[1], json.loads(sys.argv[2])
spark = spark_session("connect-versions")
v1, v2 = unsunk("versioned").to("out"), unsunk("versioned", version=2).to("out")
follower, rt = Runtime(spark, warehouse, quality=False, following=True), Runtime(spark, warehouse, quality=False)
for i in (0, 1):
    follower.run_batch(v2, f"b000{i}", frame(spark, batches[i], sum(len(b) for b in batches[:i])))
switched = versions.switch(rt, {1: v1, 2: v2}, 2)
third = frame(spark, batches[2], len(batches[0]) + len(batches[1]))
try:
    rt.run_batch(v1, "b0002", third)
    refused = None
except VersionSwitchedError as e:
    refused = type(e).__name__
ran = rt.run_batch(v2, "b0002", third).status
print(json.dumps({"switch": [switched.previous, switched.version], "refused": refused, "ran": ran}))
"""


def test_a_thin_client_builds_a_version_and_switches_to_it(spark, server, tmp_path):
    """A thin client builds version 2 of a pipeline whose version 1 classic batches ran, switches
    to it, and runs the next batch on it; version 1 refuses that batch. Read classically, the
    pipeline's results are version 2's, equal to a clean run of the three batches."""
    from test_exactly_once import BATCHES

    warehouse = str(tmp_path / "lake")
    v1, v2 = unsunk("versioned").to("out"), unsunk("versioned", version=2).to("out")
    rt = Runtime(spark, warehouse, quality=False)
    run_stream(rt, v1, BATCHES[:2])
    done = _client(server, VERSIONS, warehouse, json.dumps(BATCHES))
    assert done == {"switch": [1, 2], "refused": "VersionSwitchedError", "ran": "committed"}
    clean = Runtime(spark, str(tmp_path / "clean"), quality=False)
    run_stream(clean, v1, BATCHES)
    assert rt.current_version(v1) == 2 and results(rt, v1) == results(clean, v1)
    committed = {
        p.version: sorted(r.batch_id for r in rt.read_ledger(p).filter("status = 'committed'").collect())
        for p in (v1, v2)
    }
    assert committed == {1: ["b0000", "b0001"], 2: ["b0000", "b0001", "b0002"]}


def test_the_command_line_runs_as_a_thin_client(spark, server, tmp_path):
    """``finalresults backfill``, ``status --live``, ``validate`` and ``replay`` with ``--remote``:
    each runs over the Connect server (the batches' audits and the validation included), and a
    replay of unchanged input leaves the results as they were."""
    from test_cli import ALERTS, END, ROOT, START

    sys.path.insert(0, str(ROOT))
    from jobs import sample_data

    landing, warehouse = str(tmp_path / "landing"), str(tmp_path / "warehouse")
    sample_data.generate(spark, landing, START, END, tables=("user_events",))
    paths = ["--warehouse", warehouse, "--landing", landing, "--remote", server.url]
    env = {k: v for k, v in os.environ.items() if k != "SPARK_REMOTE"}

    def cli(*args):
        done = subprocess.run([sys.executable, "-m", "framework", *args], env=env, capture_output=True, text=True)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
        return done.stdout

    hours = cli("backfill", ALERTS, "--from", START.isoformat(), "--to", END.isoformat(), *paths).splitlines()
    assert [line.split(": ")[1].split(" (")[0] for line in hours[:-1]] == ["committed"] * 3, hours
    status = cli("status", "--live", *paths[:2], *paths[-2:])
    assert "last batch     2026-01-01T02:00:00 (seq 3)" in status, status
    assert "valid" in cli("validate", ALERTS, *paths[:2], *paths[-2:])
    pipeline = load_job(ALERTS).PIPELINE
    before = sorted(map(str, Runtime(spark, warehouse).read_output(pipeline).collect()))
    cli("replay", ALERTS, "--from", "2026-01-01T01:00", *paths)
    assert sorted(map(str, Runtime(spark, warehouse).read_output(pipeline).collect())) == before and before


ON_S3 = """
import json, os, signal, sys, threading, time
from framework import ConcurrentBatchError, Runtime, spark_session
from test_exactly_once import pipeline, run

warehouses, indices, mode, hook = json.loads(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3], sys.argv[4:]
spark = spark_session("connect-s3")  # SPARK_REMOTE names the server, whose conf reaches the bucket


def kill(at):  # SIGKILL ``hook[1]`` s after write point ``hook[0]``: the write just sent is in flight
    if at == hook[0]:
        print("KILL", at, flush=True)
        threading.Timer(float(hook[1]), os.kill, (os.getpid(), signal.SIGKILL)).start()


def meet(at):  # both racers (``hook``: the barrier folder, a name) reach their commit point before either passes it
    if at == "commit_point":
        open(os.path.join(*hook), "w").close()
        deadline = time.monotonic() + 300
        while len(os.listdir(hook[0])) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)


got = {}
for warehouse in warehouses:
    rt = Runtime(spark, warehouse, quality=False, before_write={"kill": kill, "race": meet}.get(mode))
    got[warehouse] = []
    for i in indices:
        try:
            got[warehouse].append(run(rt, pipeline("on_s3"), i).status)
        except ConcurrentBatchError:  # another attempt's commit point landed first: a racer's, a killed client's
            got[warehouse].append("fenced out")
            if mode == "run":  # as Airflow's retry would
                got[warehouse].append(run(rt, pipeline("on_s3"), i).status)
if mode == "kill":
    time.sleep(60)  # a batch that finished before the kill is killed all the same
print(json.dumps(got))
"""


@pytest.fixture(scope="module")
def s3_after_b0(spark, s3):
    """A warehouse in the S3 bucket where batch b0 of ``pipeline("on_s3")`` committed (a classic
    run: a Delta table copied with its log is the same table, so scenarios start from copies)."""
    run(Runtime(spark, s3.url("connect_b0"), quality=False), pipeline("on_s3"), 0)
    return "connect_b0"


@pytest.fixture(scope="module")
def clean_on_s3(spark, server, s3, s3_after_b0):
    """A thin client runs b1 and b2 on a copy in the bucket: what a reader sees after it (every
    table, read by a classic session)."""
    lake = s3.copy(s3_after_b0, "connect_clean")
    assert _client(server, ON_S3, json.dumps([lake]), "[1, 2]", "run") == {lake: ["committed", "committed"]}
    return snapshot(Runtime(spark, lake, quality=False), pipeline("on_s3"))


def test_batches_of_a_thin_client_on_s3_give_the_reference_models_results(spark, s3, clean_on_s3):
    """Runtime over Connect on an ``s3a://`` warehouse: the LogStore in force is the server's
    (its conf), which commits atomically, so the runtime starts; its batches give the final rows of
    the reference model, and a classic session reads every table they wrote."""
    want = expected(ref.run(ref.Tumbling(10, 2), BATCHES), IDS)
    lake = Runtime(spark, s3.url("connect_clean"), quality=False)
    assert results(lake, pipeline("on_s3")) == want and want
    assert {"output", "late", "metrics", "ledger", "state"} <= set(clean_on_s3)


def test_a_thin_client_on_s3_killed_with_its_commit_in_flight_then_rerun_ends_as_a_clean_run(
    spark, server, s3, s3_after_b0, clean_on_s3
):
    """SIGKILL of a client 0.2 s after it sent b1's commit point to the server, which may still
    make the commit's conditional PUT; a new client runs b1 and b2 again: b1 commits, or finds
    it committed (and publishes it), or is fenced out by the commit landing meanwhile and runs
    again, as Airflow's retry would. Every table is then the clean run's. (test_kill and the
    local-disk test above kill at every write point.)"""
    lake = s3.copy(s3_after_b0, "connect_killed")
    args = [json.dumps([lake]), "[1]", "kill", "commit_point", "0.2"]
    done = subprocess.run([sys.executable, "-c", ON_S3, *args], env=_client_env(server), capture_output=True, text=True)
    assert done.returncode == -signal.SIGKILL and "KILL commit_point" in done.stdout, done.stderr[-3000:]
    reran = _client(server, ON_S3, json.dumps([lake]), "[1, 2]", "run")[lake]  # b1: any of the three outcomes
    assert reran[-1] == "committed", reran
    assert snapshot(Runtime(spark, lake, quality=False), pipeline("on_s3")) == clean_on_s3


def test_two_thin_clients_racing_one_batch_on_s3_commit_it_once(spark, server, s3, s3_after_b0, clean_on_s3, tmp_path):
    """Two clients run b1 at once on one warehouse in the bucket, meeting at their commit point,
    so the server's conditional PUTs of one Delta version race: one commits, the other is fenced
    out; the batch is then committed once, and b2 after it ends as the clean run."""
    lake = s3.copy(s3_after_b0, "connect_race")
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    command = [sys.executable, "-c", ON_S3, json.dumps([lake]), "[1]", "race", str(barrier)]
    racers = [
        subprocess.Popen([*command, name], env=_client_env(server), stdout=subprocess.PIPE, text=True)
        for name in ("one", "two")
    ]
    outcomes = sorted(json.loads(r.communicate(timeout=600)[0].strip().splitlines()[-1])[lake] for r in racers)
    assert outcomes == [["committed"], ["fenced out"]]
    rt = Runtime(spark, lake, quality=False)
    assert run(rt, pipeline("on_s3"), 1).status == "already committed"
    assert run(rt, pipeline("on_s3"), 2).status == "committed"
    assert snapshot(rt, pipeline("on_s3")) == clean_on_s3
