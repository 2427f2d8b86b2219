"""``python -m framework`` / ``finalresults``: run, backfill, replay, inspect and check pipelines.

Every command takes a job (``jobs/user_alerts.py`` or ``jobs.user_alerts``) whose module declares
``PIPELINE``, ``LANDING`` and ``SCHEDULE``. Paths default to $FINALRESULTS_WAREHOUSE and
$FINALRESULTS_LANDING, else ``var/warehouse`` and ``var/landing``. A failure prints one line
``finalresults: error: ...`` and exits 1 (2 for bad arguments).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
import time
from types import ModuleType

from ..errors import FrameworkError
from .jobs import (
    JobError,
    batch_id,
    check_interval,
    intervals,
    load_job,
    parse_duration,
    parse_time,
    replay_intervals,
    replay_summary,
    run_interval,
    summary,
)


def _schedule(job: ModuleType, every: str | None) -> dt.timedelta:
    if every:
        return parse_duration(every)
    schedule = getattr(job, "SCHEDULE", None)
    if not isinstance(schedule, dt.timedelta):
        raise JobError(f"pipeline {job.PIPELINE.name!r}: the job declares no timedelta SCHEDULE; pass --every")
    return schedule


def _spark(args: argparse.Namespace, what: str):
    from ..storage.session import spark_session

    return spark_session(f"finalresults-{what}", master=args.master, metastore=getattr(args, "metastore", None))


class _Progress:
    """Progress of a command over many intervals, one line on stderr per interval: done of total,
    elapsed, and about how long is left at the pace of the intervals that did work so far (an
    interval committed before is skipped at once and says nothing about the others)."""

    def __init__(self, what: str):
        self.what, self.started, self.worked = what, time.monotonic(), 0

    def __call__(self, done: int, total: int, worked: bool = True) -> None:
        self.worked += worked
        elapsed = time.monotonic() - self.started
        line = f"finalresults: {self.what}: {done}/{total} intervals, {_duration(elapsed)} elapsed"
        if done < total and self.worked:
            line += f", about {_duration(elapsed / self.worked * (total - done))} left"
        print(line, file=sys.stderr, flush=True)


def _duration(seconds: float) -> str:
    s = round(seconds)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60} s"
    return f"{s // 3600} h {s % 3600 // 60} min"


def cmd_run(args: argparse.Namespace) -> int:
    job = load_job(args.job)
    start = parse_time(args.batch_start, "--batch-start")
    end = parse_time(args.batch_end, "--batch-end") if args.batch_end else start + _schedule(job, None)
    check_interval(job.PIPELINE, start, end)
    print(
        summary(
            run_interval(
                _spark(args, job.PIPELINE.name),
                job.PIPELINE,
                job.LANDING,
                start,
                end,
                args.warehouse,
                args.landing,
                args.catalog,
            )
        )
    )
    return 0


def cmd_backfill(args: argparse.Namespace) -> int:
    job = load_job(args.job)
    todo = intervals(parse_time(args.start, "--from"), parse_time(args.stop, "--to"), _schedule(job, args.every))
    spark = _spark(args, job.PIPELINE.name)
    progress = _Progress(f"backfill {job.PIPELINE.name}")
    for n, (start, end) in enumerate(todo, 1):
        try:
            result = run_interval(
                spark, job.PIPELINE, job.LANDING, start, end, args.warehouse, args.landing, args.catalog
            )
        except FrameworkError as e:
            raise type(e)(
                f"{e} (backfill stopped at batch {batch_id(start)}; earlier batches are committed "
                "and are skipped when the backfill is run again)"
            ) from e
        print(summary(result), flush=True)
        progress(n, len(todo), worked=result.status == "committed")
    return 0


def cmd_replay(args: argparse.Namespace) -> int:
    job = load_job(args.job)
    start = parse_time(args.start, "--from")
    stop = parse_time(args.stop, "--to") if args.stop else None
    every = _schedule(job, args.every)
    if stop is not None:
        intervals(start, stop, every)  # refuse a misaligned range before Spark starts
    print(
        replay_summary(
            replay_intervals(
                _spark(args, f"{job.PIPELINE.name}-replay"),
                job.PIPELINE,
                job.LANDING,
                start,
                stop,
                every,
                args.warehouse,
                args.landing,
                progress=_Progress(f"replay {job.PIPELINE.name}"),
            )
        )
    )
    return 0


def _pipeline_roots(args: argparse.Namespace) -> list[tuple[str, str]]:
    if args.jobs:
        return [(p.name, os.path.join(args.warehouse, p.name)) for p in (load_job(j).PIPELINE for j in args.jobs)]
    if not os.path.isdir(args.warehouse):
        raise JobError(f"warehouse {args.warehouse!r} does not exist")
    return [
        (name, os.path.join(args.warehouse, name))
        for name in sorted(os.listdir(args.warehouse))
        if os.path.isdir(os.path.join(args.warehouse, name, "_ledger"))
    ]


def cmd_status(args: argparse.Namespace) -> int:
    from ..operations.status import pipeline_status

    roots = _pipeline_roots(args)
    if args.html:
        from ..operations import statuspage

        states = []
        if roots:
            spark = _spark(args, "status")
            states = [statuspage.read(spark, name, root) for name, root in roots]
        text = statuspage.page(args.warehouse, states)
        with open(args.html, "w", encoding="utf-8") as out:
            out.write(text)
        print(f"{args.html}: status of {len(roots)} pipeline(s)")
        return 0
    if not roots:
        print(f"no pipelines under {args.warehouse}")
        return 0
    spark = _spark(args, "status")
    print("\n\n".join(pipeline_status(spark, name, root) for name, root in roots))
    return 0


def cmd_describe(args: argparse.Namespace) -> int:
    from ..operations.status import table_paths

    pipeline = load_job(args.job).PIPELINE
    print(pipeline.describe())
    print("  Tables:")
    for label, path in table_paths(pipeline, args.warehouse):
        print(f"    {label:<13} {path}")
    return 0


def cmd_validate(args: argparse.Namespace) -> int:
    from ..operations.validation import validate_results

    pipeline = load_job(args.job).PIPELINE
    report = validate_results(_spark(args, f"{pipeline.name}-validate"), pipeline, args.warehouse)
    if report is None:
        print(f"{pipeline.name}: no result emitted yet: nothing to validate")
        return 0
    print(report.summary() + (f"\nData Docs: {report.docs}" if report.docs else ""))
    report.raise_for_failures()
    return 0


def parser() -> argparse.ArgumentParser:
    """The command line (one sub-parser per command, each with --help)."""
    warehouse = os.environ.get("FINALRESULTS_WAREHOUSE", "var/warehouse")
    landing = os.environ.get("FINALRESULTS_LANDING", "var/landing")
    root = argparse.ArgumentParser(
        prog="finalresults", description="Run, backfill, replay, inspect and check final-results pipelines."
    )
    commands = root.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def command(name: str, handler, text: str, job: bool = True, spark: bool = True, data: bool = False):
        p = commands.add_parser(name, help=text, description=text)
        if job:
            p.add_argument("job", help="job module: jobs/<name>.py or jobs.<name>")
        p.add_argument("--warehouse", default=warehouse, help=f"pipelines' Delta tables (default: {warehouse})")
        if data:
            p.add_argument("--landing", default=landing, help=f"landing Delta tables (default: {landing})")
        if spark:
            p.add_argument("--master", help="Spark master (default: $SPARK_MASTER or local[*])")
        p.set_defaults(handler=handler)
        return p

    run = command("run", cmd_run, "Run one batch: the records that arrived in [--batch-start, --batch-end).", data=True)
    run.add_argument("--batch-start", required=True, help="interval start, ISO timestamp (UTC if naive)")
    run.add_argument("--batch-end", help="interval end, exclusive (default: start + the job's SCHEDULE)")
    backfill = command("backfill", cmd_backfill, "Run consecutive intervals in order, from --from to --to.", data=True)
    for batches in (run, backfill):
        batches.add_argument(
            "--catalog",
            default=os.environ.get("FINALRESULTS_CATALOG"),
            help="also keep the pipeline's tables in this catalog schema (default: $FINALRESULTS_CATALOG)",
        )
        batches.add_argument(
            "--metastore",
            default=os.environ.get("FINALRESULTS_METASTORE"),
            help="folder of an embedded metastore for --catalog, one machine only (default: "
            "$FINALRESULTS_METASTORE; else the session's catalog)",
        )
    backfill.add_argument("--from", dest="start", required=True, help="first interval start, ISO timestamp")
    backfill.add_argument("--to", dest="stop", required=True, help="last interval end, ISO timestamp")
    backfill.add_argument("--every", help="interval length, e.g. 1h or 15m (default: the job's SCHEDULE)")
    replay = command(
        "replay",
        cmd_replay,
        (
            "Re-run committed batches from --from through the last committed one with the landing records as they "
            "are now, replacing their final rows atomically (state restored by Delta time travel)."
        ),
        data=True,
    )
    replay.add_argument("--from", dest="start", required=True, help="first replayed interval start, ISO timestamp")
    replay.add_argument(
        "--to",
        dest="stop",
        help="end of the range (default and only allowed value: the end of "
        "the last committed batch; later batches depend on the replayed state)",
    )
    replay.add_argument("--every", help="interval length, e.g. 1h or 15m (default: the job's SCHEDULE)")
    status = command("status", cmd_status, "Per pipeline: last batch, stream time, open windows, metrics.", job=False)
    status.add_argument("jobs", nargs="*", metavar="job", help="job modules (default: every pipeline in the warehouse)")
    status.add_argument(
        "--html",
        metavar="FILE",
        help="write the status as one self-contained HTML page with "
        "charts of each pipeline's metrics over its batches, instead of printing it",
    )
    command("describe", cmd_describe, "Print the topology and where its tables live.", spark=False)
    command("validate", cmd_validate, "Validate the committed results table with its expectation suite.")
    return root


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    args = parser().parse_args(argv)
    try:
        return args.handler(args)
    except FrameworkError as e:
        print(f"finalresults: error: {' '.join(str(e).split())}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("finalresults: interrupted", file=sys.stderr)
        return 130
