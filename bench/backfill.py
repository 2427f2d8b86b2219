"""History at scale: a month of hourly intervals caught up four ways over one landing table.

    .venv/bin/python bench/backfill.py                          # 30 days, 10,000 events an hour
    .venv/bin/python bench/backfill.py --days 2 --events 1000   # a quick look

The landing table holds ``--days`` of hourly intervals of ``--events`` events each (``ingest_time``
in the interval, event time up to a few minutes earlier, 0.5 % of records an hour late), as
``jobs/sample_data.py``'s tables do. Each row of the report is one run, in one Spark session:

- **per interval**: today's path, ``Runtime.run_batch`` per interval (what ``airflow backfill
  create`` or a backfill of chunk size 1 costs), measured on the first ``--measured`` intervals
  and extrapolated to the range (reported so);
- **chunked**: ``Runtime.run_range`` over the whole range (default chunk bound), one run;
- **Structured Streaming**: a Delta source over the landing table, ``withWatermark`` of the
  grace, the same window and aggregate, append mode to Delta, one ``trigger(availableNow=True)``
  with its default limits (``maxFilesPerTrigger`` 1,000);
- **floor**: the plain aggregate of the whole range appended to Delta (no state, no lateness,
  no per-interval bookkeeping).

For each: wall seconds, Spark jobs, Delta commits. The chunked tables are cross-checked row for
row against the per-interval ones over the measured intervals (results, ``emitted_batch_id`` and
``emitted_stream_time`` included, late records, each ledger row and its metrics but the
duration). Workloads: ``tumbling`` (1 h windows, 10 min grace; runs in chunks) and ``sessions``
(30 min gap; runs in chunks too). Writes
``bench/results/backfill-<workload>.json`` and ``.md``. No timing is asserted anywhere.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import shutil
import tempfile
import time
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from framework import BufferConfig, Pipeline, Runtime, SessionWindows, Suppressed, TimeWindows, agg, spark_session
from framework.operations.chunk import Interval, Range, chunk_refusal
from framework.orchestration.jobs import batch_id

T0 = dt.datetime(2026, 1, 1)
HOUR = dt.timedelta(hours=1)
GRACE = dt.timedelta(minutes=10)
RESULTS = Path(__file__).parent / "results"


def pipeline(workload: str) -> Pipeline:
    windows = (
        TimeWindows.of_size_and_grace(HOUR, GRACE)
        if workload == "tumbling"
        else SessionWindows.of_inactivity_gap_and_grace(dt.timedelta(minutes=30), GRACE)
    )
    return (
        Pipeline(f"backfill_{workload}", timestamp="ts", arrival="seq")
        .group_by("user_id")
        .windowed_by(windows)
        .aggregate(agg.count("events"), agg.sum("amount", "total"))
        .suppress(Suppressed.until_window_closes(BufferConfig.unbounded()))
        .to("windows")
    )


def generate(spark: SparkSession, path: str, hours: int, events: int) -> None:
    """``events`` records an hour for ``hours`` hours, 1,000 users, written once as Delta."""
    n = hours * events
    df = (
        spark.range(n)
        .withColumnRenamed("id", "seq")
        .withColumn("hour", (F.col("seq") / events).cast("long"))
        .withColumn("arrive_ms", F.col("hour") * 3_600_000 + (F.rand(7) * 3_600_000).cast("long"))
        .withColumn(
            "delay_ms",
            F.when(F.rand(11) < 0.005, F.lit(3_600_000)).otherwise((F.rand(13) * 300_000).cast("long")),
        )
        .select(
            "seq",
            F.timestamp_millis(F.lit(_ms(T0)) + F.col("arrive_ms")).alias("ingest_time"),
            F.timestamp_millis(F.lit(_ms(T0)) + F.col("arrive_ms") - F.col("delay_ms")).alias("ts"),
            F.format_string("u%04d", (F.rand(17) * 1000).cast("int")).alias("user_id"),
            (F.rand(19) * 100).cast("long").alias("amount"),
        )
    )
    df.repartition(8).write.format("delta").save(path)


def _ms(t: dt.datetime) -> int:
    return int((t - dt.datetime(1970, 1, 1)) / dt.timedelta(milliseconds=1))


def commits(folder: str) -> int:
    """Delta commits of every table under ``folder`` (its ``_delta_log/*.json`` files)."""
    return sum(1 for p in Path(folder).rglob("_delta_log/*.json") if p.stem.isdigit())


def timed(spark: SparkSession, work) -> tuple[float, int, object]:
    """Seconds and Spark jobs of ``work()``, and what it returned."""
    tracker = spark.sparkContext.statusTracker()
    group = f"bench-{time.monotonic_ns()}"
    spark.sparkContext.setJobGroup(group, group)
    start = time.monotonic()
    try:
        out = work()
    finally:
        seconds = time.monotonic() - start
        spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)
    return seconds, len(tracker.getJobIdsForGroup(group)), out


def intervals(hours: int) -> list[Interval]:
    return [Interval(batch_id(T0 + i * HOUR), T0 + i * HOUR, T0 + (i + 1) * HOUR) for i in range(hours)]


def per_interval(spark: SparkSession, p: Pipeline, landing: DataFrame, lake: str, todo: list[Interval]) -> None:
    rt = Runtime(spark, lake, quality=False)
    for iv in todo:
        mine = landing.filter((F.col("ingest_time") >= iv.start) & (F.col("ingest_time") < iv.end))
        rt.run_batch(p, iv.batch_id, mine, batch_end=iv.end, batch_start=iv.start)


def chunked(spark: SparkSession, p: Pipeline, landing: DataFrame, lake: str, todo: list[Interval]) -> int:
    rt = Runtime(spark, lake, quality=False)
    chunks: list[int] = []
    rt.run_range(p, Range(todo, landing, "ingest_time"), progress=lambda done, how: chunks.append(len(done)))
    return len(chunks)


def streaming(spark: SparkSession, p: Pipeline, landing_path: str, work: str) -> None:
    src = spark.readStream.format("delta").load(landing_path).withWatermark("ts", "10 minutes")
    if isinstance(p.windows, TimeWindows):
        window = F.window("ts", "1 hour")
    else:
        window = F.session_window("ts", "30 minutes")
    out = src.groupBy(window, "user_id").agg(F.count(F.lit(1)).alias("events"), F.sum("amount").alias("total"))
    q = (
        out.writeStream.format("delta")
        .outputMode("append")
        .option("checkpointLocation", f"{work}/ss_checkpoint")
        .trigger(availableNow=True)
        .start(f"{work}/ss_out")
    )
    q.awaitTermination()


def floor(spark: SparkSession, p: Pipeline, landing: DataFrame, work: str) -> None:
    window = F.window("ts", "1 hour") if isinstance(p.windows, TimeWindows) else F.session_window("ts", "30 minutes")
    out = landing.groupBy(window, "user_id").agg(F.count(F.lit(1)).alias("events"), F.sum("amount").alias("total"))
    out.write.format("delta").mode("append").save(f"{work}/floor_out")


def tables_of(spark: SparkSession, p: Pipeline, lake: str) -> dict[str, list[str]]:
    """Every table a cross-check compares, as sorted JSON rows (the duration aside)."""
    rt = Runtime(spark, lake, quality=False)
    ledger = rt.read_ledger(p)
    metrics = ledger.select("seq", F.expr("to_json(from_json(metrics, 'map<string,string>'))").alias("m"))
    frames = {
        "results": rt.read_output(p),
        "ledger": ledger.select("seq", "batch_id", "fingerprint", "records_in", "stream_time_before", "stream_time"),
        "metrics": metrics.select("seq", F.regexp_replace("m", '"batch_duration_ms":"[0-9]+",?', "").alias("m")),
    }
    try:
        frames["late"] = rt.read_late(p)
    except Exception:
        pass
    return {name: sorted(r[0] for r in df.select(F.to_json(F.struct("*"))).collect()) for name, df in frames.items()}


def run(spark: SparkSession, workload: str, days: int, events: int, measured: int) -> dict:
    hours = days * 24
    work = tempfile.mkdtemp(prefix=f"backfill-{workload}-")
    try:
        landing_path = f"{work}/landing"
        generate(spark, landing_path, hours, events)
        landing = spark.read.format("delta").load(landing_path)
        p, todo = pipeline(workload), intervals(hours)
        report: dict = {
            "workload": workload,
            "days": days,
            "events_per_hour": events,
            "intervals": hours,
            "runs_in_chunks": chunk_refusal(p) is None,
            "why_not": chunk_refusal(p),
            "date": dt.date.today().isoformat(),
        }
        s, jobs, _ = timed(spark, lambda: per_interval(spark, p, landing, f"{work}/one", todo[:measured]))
        report["per_interval"] = {
            "measured_intervals": measured,
            "wall_s_measured": round(s, 1),
            "wall_s": round(s / measured * hours, 1),
            "extrapolated": True,
            "jobs": round(jobs / measured * hours),
            "commits": round(commits(f"{work}/one") / measured * hours),
        }
        s, jobs, _ = timed(spark, lambda: chunked(spark, p, landing, f"{work}/check", todo[:measured]))
        check = tables_of(spark, p, f"{work}/check") == tables_of(spark, p, f"{work}/one")
        report["cross_check"] = {"intervals": measured, "chunked_equals_per_interval": check}
        s, jobs, n = timed(spark, lambda: chunked(spark, p, landing, f"{work}/chunked", todo))
        report["chunked"] = {"wall_s": round(s, 1), "jobs": jobs, "commits": commits(f"{work}/chunked"), "chunks": n}
        s, jobs, _ = timed(spark, lambda: streaming(spark, p, landing_path, work))
        report["structured_streaming"] = {"wall_s": round(s, 1), "jobs": jobs, "commits": commits(f"{work}/ss_out")}
        s, jobs, _ = timed(spark, lambda: floor(spark, p, landing, work))
        report["floor"] = {"wall_s": round(s, 1), "jobs": jobs, "commits": commits(f"{work}/floor_out")}
        c = report["chunked"]["wall_s"]
        report["ratios"] = {
            "per_interval_over_chunked": round(report["per_interval"]["wall_s"] / c, 1),
            "chunked_over_structured_streaming": round(c / report["structured_streaming"]["wall_s"], 2),
            "chunked_over_floor": round(c / report["floor"]["wall_s"], 2),
        }
        return report
    finally:
        shutil.rmtree(work, ignore_errors=True)


def markdown(rep: dict) -> str:
    rows = [
        ("per interval (extrapolated from {measured_intervals})".format(**rep["per_interval"]), rep["per_interval"]),
        (f"chunked ({rep['chunked']['chunks']} chunk{'s' if rep['chunked']['chunks'] != 1 else ''})", rep["chunked"]),
        ("Structured Streaming, availableNow", rep["structured_streaming"]),
        ("floor: plain aggregate", rep["floor"]),
    ]
    head = (
        f"{rep['workload']}: {rep['days']} days of hourly intervals, {rep['events_per_hour']:,} events an hour "
        f"({rep['date']}); runs in chunks: {rep['runs_in_chunks']}" + (f" ({rep['why_not']})" if rep["why_not"] else "")
    )
    lines = [head, "", "| run | wall s | Spark jobs | Delta commits |", "|---|---|---|---|"]
    lines += [f"| {name} | {r['wall_s']} | {r['jobs']:,} | {r['commits']:,} |" for name, r in rows]
    lines += ["", f"ratios: {rep['ratios']}; cross-check: {rep['cross_check']}"]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workload", choices=("tumbling", "sessions"), default="tumbling")
    ap.add_argument("--days", type=int, default=30)
    ap.add_argument("--events", type=int, default=10_000, help="events an hour")
    ap.add_argument("--measured", type=int, default=48, help="intervals run one by one (extrapolated)")
    args = ap.parse_args()
    spark = spark_session("bench-backfill")
    rep = run(spark, args.workload, args.days, args.events, min(args.measured, args.days * 24))
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"backfill-{args.workload}.json").write_text(json.dumps(rep, indent=2) + "\n")
    (RESULTS / f"backfill-{args.workload}.md").write_text(markdown(rep))
    print(markdown(rep))


if __name__ == "__main__":
    main()
