"""Cold batches, as Airflow runs them: every batch is its own ``spark-submit`` (a fresh Python
process and JVM), for this framework with the quality gate off (A) and on (A+), and for
Structured Streaming (B), alternating.

    .venv/bin/python bench/cold.py                      # 6 batches of 100,000 events
    .venv/bin/python bench/cold.py --batches 4 --events-per-batch 20000
    .venv/bin/python bench/cold.py --connect            # and the same as thin clients

A submits a job that builds the pipeline of ``vs_streaming`` (tumbling hour windows, 10 min
grace, ``lateness="batch"``) and runs ``Runtime.run_batch`` on one batch's file; A+ does the
same with the batch's audit on (``quality=True``, the default) and then validates the results
table as a DAG's job does for its quality gate (``validation.after_run``); B submits an
``availableNow`` query over the files so far on a persistent checkpoint (RocksDB state store,
watermark, append mode, Delta sink). All use the command line a DAG's ``spark-submit`` gets
(Delta's jars as ``--jars``, the files Ivy resolved at install, or ``--packages`` when none are
recorded) and the same ``spark_session``.

With ``--connect`` it starts a Spark Connect server (``framework.orchestration.connectserver``,
``local[*]``) before the first batch, and each batch also runs as an Airflow worker would run
it with a ``spark_connect`` connection: a Python process (no spark-submit, no JVM) that is a thin
client of that warm server, for A (T), A+ (T+) and B (BT, the same availableNow query over the
same server), on warehouses of their own.

Reported per runner: the median wall time of a submit, and the job's own time after its Spark
session started (the rest is JVM start and imports). A's, A+'s and B's final rows are compared
at the end. Writes ``<results>/cold.json`` and ``cold.md``; asserts no timing.
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
from contextlib import ExitStack
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(HERE), str(ROOT)]  # vs_streaming and framework, also inside spark-submit

import vs_streaming as vs  # noqa: E402
from pyspark.sql import SparkSession  # noqa: E402

from framework import spark_session  # noqa: E402
from framework.orchestration.connectserver import connect_server  # noqa: E402
from framework.orchestration.jobs import start_importing_quality  # noqa: E402
from framework.storage import jars  # noqa: E402

MARK = "cold-bench-seconds-after-start="  # printed by a worker: its time after the session started
# runner name -> the worker's argument, which also names A's and A+'s warehouse under the work dir
RUNNERS = {"A": "a", "A+": "a_gate", "B": "b"}
# the same workers as thin clients of a Connect server, in the work dir's folder THIN
THIN_RUNNERS = {"T": "a", "T+": "a_gate", "BT": "b"}
THIN = "thin"


def worker(runner: str, work: Path, batch: int) -> None:
    """One batch of ``runner`` (``a``, ``a_gate`` or ``b``) inside spark-submit."""
    started = time.monotonic()
    gate = runner == "a_gate"
    if gate:  # as a DAG's job does (``cli.job_main``)
        start_importing_quality()
    spark = spark_session(f"cold-{runner}", conf={"spark.sql.streaming.stateStore.providerClass": vs.ROCKSDB})
    ready = time.monotonic()
    r = vs.Runners(spark, work, vs.WORKLOADS["tumbling"], quality=gate, a=runner)  # over the persistent work dir
    path = work / "in" / f"batch-{batch:04d}.parquet"
    if runner == "b":
        r.run_b(batch, path)
    else:
        result = r.rt.run_batch(r.pipeline, f"b{batch:04d}", spark.read.parquet(str(path)))
        if gate:  # what a DAG's job does after its batch, for the quality_gate task
            from framework.operations.validation import after_run

            after_run(spark, r.pipeline, str(r.warehouse), result)
    print(f"{MARK}{time.monotonic() - ready:.3f} session={ready - started:.3f}", flush=True)


def _jar_args() -> list[str]:
    """Delta's jars on the command line as a DAG passes them (``orchestration.airflow``)."""
    files = jars.for_submit(jars.DELTA_PACKAGE)[1]
    return ["--jars", files] if files else ["--packages", jars.DELTA_PACKAGE]


def _submit(name: str, work: Path, batch: int, remote: str | None) -> tuple[float, float]:
    """Wall seconds of one batch of runner ``name``, and the worker's seconds after its session
    started: a spark-submit, or for a thin runner a Python process with ``SPARK_REMOTE=remote``."""
    worker = [str(Path(__file__).resolve()), "worker"]
    if name in THIN_RUNNERS:
        runner, env = THIN_RUNNERS[name], dict(os.environ, SPARK_REMOTE=str(remote))
        cmd = [sys.executable, *worker, runner, str(work / THIN), str(batch)]
    else:
        runner, env = RUNNERS[name], dict(os.environ, PYSPARK_PYTHON=sys.executable, SPARK_LOG_LEVEL="ERROR")
        spark_submit = Path(sys.executable).with_name("spark-submit")
        cmd = [str(spark_submit), "--master", "local[*]", *_jar_args(), "--conf", "spark.ui.enabled=false"]
        cmd += [*worker, runner, str(work), str(batch)]
    start = time.monotonic()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.monotonic() - start
    if done.returncode != 0:
        raise RuntimeError(f"runner {name}, batch {batch}: its process failed:\n{done.stderr[-3000:]}")
    line = next(x for x in done.stdout.splitlines() if x.startswith(MARK))
    return wall, float(line[len(MARK) :].split()[0])


def _final_rows(spark: SparkSession, work: Path, names: tuple[str, ...]) -> dict:
    """The runners' final rows compared with B's (in this process, not timed)."""
    rows = {}
    for name in names:
        arg = THIN_RUNNERS.get(name) or RUNNERS[name]
        runs = work / THIN if name in THIN_RUNNERS else work
        path = runs / "b_out" if arg == "b" else runs / arg / "bench" / "final"
        rows[name] = vs._spark_rows(spark.read.format("delta").load(str(path)))
    return {
        "rows": {name: len(r) for name, r in rows.items()},
        "equal_to_b": {name: r.equals(rows["B"]) for name, r in rows.items() if name != "B"},
    }


def run(
    spark: SparkSession,
    batches: int,
    events_per_batch: int,
    keys: int,
    results: Path,
    names: tuple[str, ...] = tuple(RUNNERS),
    hours_per_batch: int = 1,
    remote: str | None = None,
) -> dict:
    """Generate the batches, submit the runners ``names`` (B among them) one after another batch
    by batch, compare their final rows (read with ``spark``, which the submits do not use), and
    write ``cold.json`` and ``cold.md`` under ``results``. A batch spans ``hours_per_batch`` of
    event time: with more than one, a batch closes its own first windows (a one-batch smoke run
    has final rows to compare). The thin runners (``THIN_RUNNERS``) need ``remote``, a Connect
    server's URL."""
    work = Path(tempfile.mkdtemp(prefix="bench-cold-"))
    try:
        (work / "in").mkdir()
        (work / THIN).mkdir()
        (work / THIN / "in").symlink_to(work / "in")
        span = batches * hours_per_batch * vs.HOUR
        vs.generate(work / "in", events_per_batch * batches, keys, batches, 0.05, 0.005, 1, span)
        runs: dict[str, dict[str, list[float]]] = {n: {"wall": [], "after_start": []} for n in names}
        for i in range(batches):
            for name in names:
                wall, after = _submit(name, work, i, remote)
                runs[name]["wall"].append(round(wall, 2))
                runs[name]["after_start"].append(round(after, 2))
            print(
                f"batch {i}: "
                + "  ".join(
                    f"{n} {runs[n]['wall'][-1]:.1f}s (after start {runs[n]['after_start'][-1]:.1f}s)" for n in names
                ),
                flush=True,
            )
        check = _final_rows(spark, work, names)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    med = {n: {k: round(statistics.median(v), 2) for k, v in r.items()} for n, r in runs.items()}
    rep = {
        "batches": batches,
        "events_per_batch": events_per_batch,
        "keys": keys,
        "runs": runs,
        "median": med,
        "ratio_over_b": {n: round(med[n]["wall"] / med["B"]["wall"], 2) for n in names if n != "B"},
        "ratio_over_bt": {n: round(med[n]["wall"] / med["BT"]["wall"], 2) for n in names if n in ("T", "T+")},
        "cross_check": check,
        "machine": {"cores": os.cpu_count(), "loadavg": os.getloadavg()[0]},
    }
    results.mkdir(parents=True, exist_ok=True)
    (results / "cold.json").write_text(json.dumps(rep, indent=1) + "\n")
    (results / "cold.md").write_text(markdown(rep))
    return rep


LABELS = {
    "A": "A: this framework, gate off",
    "A+": "A+: this framework, gate on (audit, validation)",
    "B": "B: Structured Streaming",
    "T": "T: A as a thin client of a warm Connect server",
    "T+": "T+: A+ as a thin client of a warm Connect server",
    "BT": "BT: B as a thin client of the same server",
}


def markdown(rep: dict) -> str:
    med, check = rep["median"], rep["cross_check"]
    over = [*rep["ratio_over_b"].items()] + [(f"{n}/BT", r) for n, r in rep.get("ratio_over_bt", {}).items()]
    ratios = ", ".join(f"{n if '/' in n else n + '/B'} = {r}" for n, r in over)
    equal = ", ".join(f"{n} = B: {e}" for n, e in check["equal_to_b"].items())
    return (
        f"**cold batches** (one spark-submit each): {rep['batches']} batches of {rep['events_per_batch']:,} "
        f"events. {ratios} (median wall). {equal} ({check['rows']['B']:,} rows).\n\n"
        "| runner | median wall s | median s after session start |\n|---|---|---|\n"
        + "".join(f"| {LABELS[n]} | {m['wall']:.1f} | {m['after_start']:.1f} |\n" for n, m in med.items())
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", type=int, default=6)
    ap.add_argument("--events-per-batch", type=int, default=100_000)
    ap.add_argument("--keys", type=int, default=1_000)
    ap.add_argument("--results", type=Path, default=HERE / "results")
    ap.add_argument("--connect", action="store_true", help="also thin clients of a Connect server it starts")
    args = ap.parse_args()
    spark = spark_session("cold-check")
    try:
        with ExitStack() as stack:
            names, remote = tuple(RUNNERS), None
            if args.connect:
                cores = os.cpu_count() or 2
                log = Path(tempfile.gettempdir()) / "bench-cold-connect.log"
                server = stack.enter_context(connect_server(log, "local[*]", shuffle_partitions=max(2, 2 * cores)))
                names, remote = (*names, *THIN_RUNNERS), server.url
            rep = run(spark, args.batches, args.events_per_batch, args.keys, args.results, names, remote=remote)
        print(markdown(rep))
    finally:
        spark.stop()


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "worker":
        worker(sys.argv[2], Path(sys.argv[3]), int(sys.argv[4]))
    else:
        main()
