"""Cold batches, as Airflow runs them: every batch is its own ``spark-submit`` (a fresh Python
process and JVM), for this framework (A) and for Structured Streaming (B), alternating.

    .venv/bin/python bench/cold.py                      # 6 batches of 100,000 events
    .venv/bin/python bench/cold.py --batches 4 --events-per-batch 20000

A submits a job that builds the pipeline of ``vs_streaming`` (tumbling hour windows, 10 min
grace, ``lateness="batch"``) and runs ``Runtime.run_batch`` on one batch's file; B submits an
``availableNow`` query over the files so far on a persistent checkpoint (RocksDB state store,
watermark, append mode, Delta sink). Both use the same ``spark-submit`` command line (Delta's
package from the local Ivy cache, the same Spark settings) and the same ``spark_session``.

Reported per runner: the median wall time of a submit, and the job's own time after its Spark
session started (the rest is JVM start, package resolution and imports). A's and B's final rows
are compared at the end. Writes ``<results>/cold.json`` and ``cold.md``; asserts no timing.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from importlib.metadata import version
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(HERE), str(ROOT)]  # vs_streaming and framework, also inside spark-submit

import vs_streaming as vs  # noqa: E402
from pyspark.sql import SparkSession  # noqa: E402

from framework import spark_session  # noqa: E402

MARK = "cold-bench-seconds-after-start="  # printed by a worker: its time after the session started


def worker(runner: str, work: Path, batch: int) -> None:
    """One batch of ``runner`` (``a`` or ``b``) inside spark-submit."""
    started = time.monotonic()
    spark = spark_session(f"cold-{runner}", conf={"spark.sql.streaming.stateStore.providerClass": vs.ROCKSDB})
    ready = time.monotonic()
    r = vs.Runners(spark, work, vs.WORKLOADS["tumbling"])  # over the persistent work dir
    getattr(r, f"run_{runner}")(batch, work / "in" / f"batch-{batch:04d}.parquet")
    print(f"{MARK}{time.monotonic() - ready:.3f} session={ready - started:.3f}", flush=True)


def _submit(runner: str, work: Path, batch: int) -> tuple[float, float]:
    """Wall seconds of one spark-submit, and the worker's seconds after its session started."""
    spark_submit = Path(sys.executable).with_name("spark-submit")
    cmd = [
        str(spark_submit),
        "--master",
        "local[*]",
        "--packages",
        f"io.delta:delta-spark_2.13:{version('delta-spark')}",
        "--conf",
        "spark.ui.enabled=false",
        str(Path(__file__).resolve()),
        "worker",
        runner,
        str(work),
        str(batch),
    ]
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, SPARK_LOG_LEVEL="ERROR")
    start = time.monotonic()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.monotonic() - start
    if done.returncode != 0:
        raise RuntimeError(f"runner {runner}, batch {batch}: spark-submit failed:\n{done.stderr[-3000:]}")
    line = next(x for x in done.stdout.splitlines() if x.startswith(MARK))
    return wall, float(line[len(MARK) :].split()[0])


def _final_rows(spark: SparkSession, work: Path) -> dict:
    """A's and B's final rows compared (in this process, not timed)."""
    a = vs._spark_rows(spark.read.format("delta").load(str(work / "a" / "bench" / "final")))
    b = vs._spark_rows(spark.read.format("delta").load(str(work / "b_out")))
    return {"rows_a": len(a), "rows_b": len(b), "a_equals_b": a.equals(b)}


def run(spark: SparkSession, batches: int, events_per_batch: int, keys: int, results: Path) -> dict:
    """Generate the batches, submit A and B alternately batch by batch, compare their final
    rows (read with ``spark``, which the submits do not use), and write ``cold.json`` and
    ``cold.md`` under ``results``."""
    work = Path(tempfile.mkdtemp(prefix="bench-cold-"))
    try:
        (work / "in").mkdir()
        vs.generate(work / "in", events_per_batch * batches, keys, batches, 0.05, 0.005, 1)
        runs: dict[str, dict[str, list[float]]] = {n: {"wall": [], "after_start": []} for n in "AB"}
        for i in range(batches):
            for name in "AB":
                wall, after = _submit(name.lower(), work, i)
                runs[name]["wall"].append(round(wall, 2))
                runs[name]["after_start"].append(round(after, 2))
            print(
                f"batch {i}: A {runs['A']['wall'][-1]:.1f}s (after start {runs['A']['after_start'][-1]:.1f}s)  "
                f"B {runs['B']['wall'][-1]:.1f}s (after start {runs['B']['after_start'][-1]:.1f}s)",
                flush=True,
            )
        check = _final_rows(spark, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    med = {n: {k: round(statistics.median(v), 2) for k, v in r.items()} for n, r in runs.items()}
    rep = {
        "batches": batches,
        "events_per_batch": events_per_batch,
        "keys": keys,
        "runs": runs,
        "median": med,
        "ratio_a_over_b": round(med["A"]["wall"] / med["B"]["wall"], 2),
        "cross_check": check,
        "machine": {"cores": os.cpu_count(), "loadavg": os.getloadavg()[0]},
    }
    results.mkdir(parents=True, exist_ok=True)
    (results / "cold.json").write_text(json.dumps(rep, indent=1) + "\n")
    (results / "cold.md").write_text(markdown(rep))
    return rep


def markdown(rep: dict) -> str:
    med, check = rep["median"], rep["cross_check"]
    return (
        f"**cold batches** (one spark-submit each): {rep['batches']} batches of {rep['events_per_batch']:,} "
        f"events. A/B = {rep['ratio_a_over_b']} (median wall). A = B: {check['a_equals_b']} "
        f"({check['rows_a']:,} rows).\n\n| runner | median wall s | median s after session start |\n"
        "|---|---|---|\n"
        f"| A: this framework | {med['A']['wall']:.1f} | {med['A']['after_start']:.1f} |\n"
        f"| B: Structured Streaming | {med['B']['wall']:.1f} | {med['B']['after_start']:.1f} |\n"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", type=int, default=6)
    ap.add_argument("--events-per-batch", type=int, default=100_000)
    ap.add_argument("--keys", type=int, default=1_000)
    ap.add_argument("--results", type=Path, default=HERE / "results")
    args = ap.parse_args()
    spark = spark_session("cold-check")
    try:
        print(markdown(run(spark, args.batches, args.events_per_batch, args.keys, args.results)))
    finally:
        spark.stop()


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "worker":
        worker(sys.argv[2], Path(sys.argv[3]), int(sys.argv[4]))
    else:
        main()
