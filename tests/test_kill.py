"""kill -9 mid-batch: a separate Python process owns the SparkSession and runs batch b1 on a copy
of a warehouse that committed b0 (a Delta table copied with its log is the same table); it is
killed with SIGKILL (its JVM goes with it) at chosen write points of b1, or at a random moment of
b1 with the whole process group. Re-running b1 and b2 then leaves every table (results, state,
ledger, metrics, late records) exactly as a clean run leaves it: no final row duplicated, none
missing."""

import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from harness import in_parallel
from test_exactly_once import pipeline, run, snapshot

from framework import Runtime

TESTS = Path(__file__).resolve().parent
CHILD = """
import os, signal, sys
sys.path.insert(0, {tests!r})
from framework import Runtime, spark_session
from test_exactly_once import pipeline, run

warehouse, point = sys.argv[1], sys.argv[2]

def hook(at):
    if at == point:
        print("KILL", at, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)

spark = spark_session("killed", master="local[1]")
rt = Runtime(spark, warehouse, quality=False, before_write=hook)
print("START", 1, flush=True)
run(rt, pipeline("killed"), 1)
print("DONE", flush=True)
"""
DETERMINISTIC = ("buffer", "output", "commit_point", "publish")  # writes, staging, commit, publication
RANDOM_KILLS = 1


def _killed_run(warehouse: str, point: str, delay: float | None) -> str:
    """Run b1 in a child process on ``warehouse`` (b0 committed), SIGKILLed at ``point`` of b1 or
    ``delay`` seconds into it."""
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD.format(tests=str(TESTS)), warehouse, point],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    seen = []
    for line in child.stdout:
        seen.append(line.strip())
        if line.startswith("START 1") and delay is not None:
            time.sleep(delay)
            os.killpg(child.pid, signal.SIGKILL)
            break
    child.wait(timeout=600)
    try:
        os.killpg(child.pid, signal.SIGKILL)  # the JVM, if it outlived its parent
    except ProcessLookupError:
        pass
    assert child.returncode == -signal.SIGKILL, seen
    assert "DONE" not in seen, f"the kill came too late to interrupt b1: {seen}"
    return seen[-1]


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_kill_9_during_a_batch_then_rerun_equals_a_clean_run(spark, warehouse):
    rng = random.Random(20261122)
    kills = [(point, None) for point in DETERMINISTIC] + [("never", rng.uniform(1.0, 8.0)) for _ in range(RANDOM_KILLS)]

    run(Runtime(spark, f"{warehouse}/b0", quality=False), pipeline("killed"), 0)

    def clean():
        rt = Runtime(spark.newSession(), shutil.copytree(f"{warehouse}/b0", f"{warehouse}/clean"), quality=False)
        for i in (1, 2):
            run(rt, pipeline("killed"), i)
        return snapshot(rt, pipeline("killed"))

    def killed(index):
        point, delay = kills[index]
        lake = shutil.copytree(f"{warehouse}/b0", f"{warehouse}/kill{index}")
        last = _killed_run(lake, point, delay)
        rt = Runtime(spark.newSession(), lake, quality=False)
        run(rt, pipeline("killed"), 1)
        run(rt, pipeline("killed"), 2)
        return last, snapshot(rt, pipeline("killed"))

    reference, *outcomes = in_parallel([clean] + [lambda i=i: killed(i) for i in range(len(kills))])
    for (point, delay), (last, tables) in zip(kills, outcomes):
        assert tables == reference, f"killed at {point if delay is None else f'{delay:.1f}s into b1'} (last: {last})"
    print(f"kill points exercised: {len(kills)}", [last for last, _ in outcomes])
