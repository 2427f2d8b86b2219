"""Runners in two OS processes (each its own JVM and SparkSession, one warehouse), as two Airflow
workers, or a retried task and the zombie of its first try, would run them. Threads in one JVM
(test_exactly_once) share Delta's log cache; processes share nothing but the files.

Each process first runs its own pipeline, at the same moment as the other: pipelines sharing a
warehouse do not disturb each other. Then both run batch b0 of one more pipeline: they start it
together (both create the pipeline's ledger) and meet again just before the batch's commit point
(both have planned and written their state): one commits, the other stops with
ConcurrentBatchError or, had it come second, reports "already committed". The processes meet at
files in a gate folder."""

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import reference as ref
from harness import expected, frame, results
from test_exactly_once import pipeline, snapshot
from test_exactly_once import run as run_index

from framework import ConcurrentBatchError, PublicationError, Runtime
from framework.storage import locks

TESTS = Path(__file__).resolve().parent
RACED = ("raced", [("A", 1, 1), ("B", 2, 2), ("A", 12, 3)])
OWN = {
    "1": ("own1", [("A", 25, 4), ("B", 14, 6), ("A", 40, 5)]),  # B 14 is late
    "2": ("own2", [("C", 5, 1), ("C", 40, 2)]),
}
CHILD = """
import json, os, sys, time
from pathlib import Path
sys.path.insert(0, {tests!r})
from framework import ConcurrentBatchError, Runtime, spark_session
from harness import frame
from test_concurrency import OWN, RACED
from test_exactly_once import pipeline

lake, gate, me = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
other = "2" if me == "1" else "1"

def meet(step, wait=True):
    (gate / f"{{step}}.{{me}}").touch()
    deadline = time.monotonic() + 300
    while wait and not (gate / f"{{step}}.{{other}}").exists():
        if time.monotonic() > deadline:
            sys.exit(f"the other runner never reached {{step!r}}")
        time.sleep(0.002)

# on one core with one shuffle partition (the JIT tier and interpreted expressions come from
# tests/spark-conf, as for every test JVM)
spark = spark_session("racer" + me, master="local[1]", conf={{
    "spark.sql.adaptive.enabled": "false", "spark.sql.shuffle.partitions": "1",
    **json.loads(os.environ.get("FINALRESULTS_TEST_CONF", "{{}}"))}})  # test_s3: the S3 server's settings
name, batch = OWN[me]
meet("own")
print("OWN", Runtime(spark, lake, quality=False).run_batch(pipeline(name), "b0", frame(spark, batch)).status,
      flush=True)
rt = Runtime(spark, lake, quality=False, before_write=lambda at: at == "commit_point" and meet("claim"))
meet("race")
try:
    print("RACE", rt.run_batch(pipeline(RACED[0]), "b0", frame(spark, RACED[1])).status, flush=True)
except ConcurrentBatchError as e:
    print("RACE refused", " ".join(str(e).split()), flush=True)
finally:
    meet("claim", wait=False)   # a runner that stopped before its claim must not hold up the other
"""


def _racer(lake: str, gate: Path, me: str, env: dict[str, str] | None) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", CHILD.format(tests=str(TESTS)), lake, str(gate), me],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env=env,
    )


@pytest.mark.slow
def test_two_processes_commit_one_batch_once_and_leave_other_pipelines_alone(spark, warehouse, tmp_path):
    race(spark, f"{warehouse}/shared", f"{warehouse}/clean", tmp_path / "gate")


def race(spark, lake: str, clean_lake: str, gate: Path, env: dict[str, str] | None = None, remote: str = "") -> None:
    """The race of this module's docstring on warehouse ``lake`` (the children get ``env``:
    test_s3 runs it on S3), checked against a clean run in ``clean_lake``. With ``remote``, the
    first runner is a thin client of that Spark Connect server (test_connect), the second a
    classic job with its own JVM, as a spark-submit's."""
    gate.mkdir()
    base = dict(os.environ if env is None else env)
    envs = {me: base for me in OWN} | ({"1": dict(base, SPARK_REMOTE=remote)} if remote else {})
    racers = [_racer(lake, gate, me, envs[me]) for me in OWN]
    raced = pipeline(RACED[0])
    try:
        clean = Runtime(spark, clean_lake, quality=False)  # the reference, while the racers start
        clean.run_batch(raced, "b0", frame(spark, RACED[1]))
        outputs = [racer.communicate(timeout=600) for racer in racers]
    finally:
        for racer in racers:
            if racer.poll() is None:
                os.killpg(racer.pid, signal.SIGKILL)  # with its JVM
    said = []
    for racer, (out, err) in zip(racers, outputs):
        assert racer.returncode == 0, err[-3000:]
        said.append(dict(line.split(" ", 1) for line in out.splitlines() if line.startswith(("OWN ", "RACE "))))

    assert [s["OWN"] for s in said] == ["committed", "committed"]
    race = sorted(s["RACE"] for s in said)
    assert race[0] == "committed" and (race[1] == "already committed" or race[1].startswith("refused")), race
    if race[1].startswith("refused"):
        assert "pipeline 'raced', batch 'b0': another attempt of this batch" in race[1]
    shared = Runtime(spark, lake, quality=False)
    assert snapshot(shared, raced) == snapshot(clean, raced)
    for name, batch in OWN.values():  # a clean run of these is the reference model's (test_examples)
        assert results(shared, pipeline(name)) == expected(ref.run(ref.Tumbling(10, 2), [batch]), ["b0"]), name
    for name in (RACED[0], *(n for n, _ in OWN.values())):  # the loser of the race committed nothing
        assert [r.status for r in shared.read_ledger(pipeline(name)).collect()] == ["committed"], name


HOLD = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_CREAT | os.O_RDWR)
fcntl.flock(fd, fcntl.LOCK_EX)
print("held", flush=True)
sys.stdin.readline()
"""


def test_a_writer_frozen_inside_its_commit_stops_a_retry_with_an_error_naming_it(spark, warehouse, monkeypatch):
    """A writer frozen inside a commit (a stopped process, a paused VM) holds that table's commit
    lock until it is resumed or killed, and the lock cannot be taken from it. The chaos soak met
    it: a child frozen at one write point while its other thread was inside the buffer's commit;
    the retry beside it waited, then failed with a bare TimeoutError naming no pipeline or batch.
    Here another process holds the state table's lock (before the commit point: nothing of b1
    committed), then a thread of this process holds the results table's (after it: b1 committed,
    its rows staged; a thread's wait had no limit at all). Each wait ends in an error naming the
    pipeline, the batch, the write point and the holder; the re-runs leave a clean run's tables."""
    monkeypatch.setattr(locks, "LOCK_WAIT_S", 3.0)
    p = pipeline("frozen")
    rt = Runtime(spark, f"{warehouse}/w", quality=False)
    run_index(rt, p, 0)
    t = rt.tables(p)

    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, f"{t.state}.lock"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline() == "held\n"
        with pytest.raises(ConcurrentBatchError) as refused:
            run_index(rt, p, 1)
    finally:
        holder.communicate("go\n", timeout=60)
    message = str(refused.value)
    for part in ("'frozen'", "'b1'", "'commit_point'", f"{t.state}.lock", "another process", "is not committed"):
        assert part in message, part
    assert [r.seq for r in rt.read_ledger(p).filter("status = 'committed'").collect()] == [1]

    release = threading.Event()
    held = threading.Event()

    def hold_results():
        with locks.committing(t.output):
            held.set()
            release.wait(120)  # the old code waited here until released, then published

    thread = threading.Thread(target=hold_results)
    thread.start()
    try:
        assert held.wait(60)
        with pytest.raises(PublicationError) as unpublished:
            run_index(rt, p, 1)
    finally:
        release.set()
        thread.join()
    message = str(unpublished.value)
    for part in ("'frozen'", "'b1'", "publishing results", f"{t.output}.lock", "another thread", "IS committed"):
        assert part in message, part

    assert run_index(rt, p, 1).status == "already committed"  # and publishes the staged rows
    assert run_index(rt, p, 2).status == "committed"
    clean = Runtime(spark.newSession(), f"{warehouse}/clean", quality=False)
    for i in range(3):
        run_index(clean, p, i)
    assert snapshot(rt, p) == snapshot(clean, p)
