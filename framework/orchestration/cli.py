"""``python -m framework`` / ``finalresults``: run, backfill, replay, inspect and check pipelines.

Every command takes a job (``jobs/user_alerts.py`` or ``jobs.user_alerts``) whose module declares
``PIPELINE``, ``LANDING`` and ``SCHEDULE``. Paths default to $FINALRESULTS_WAREHOUSE and
$FINALRESULTS_LANDING, else ``var/warehouse`` and ``var/landing``. A failure prints one line
``finalresults: error: ...`` and exits 1 (2 for bad arguments, with the command's usage).

Everything that can be checked without Spark is checked before it starts (arguments, the job,
the warehouse and landing folders on local disk, the landing table), because starting it takes
tens of seconds. Spark starts quietly (``console.quiet_session``); ``--verbose`` shows its output.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import time
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from types import ModuleType
from urllib.parse import urlparse

from ..definition.names import RESERVED_ROOT_ENTRIES
from ..errors import FrameworkError
from .console import JAVA_OPTIONS, default_log, quiet_session
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
    """A Spark session for the command, quiet unless ``--verbose``."""
    from ..storage.session import spark_session

    def start(conf: dict[str, str] | None = None):
        return spark_session(
            f"finalresults-{what}", master=args.master, metastore=getattr(args, "metastore", None), conf=conf
        )

    return start() if args.verbose else quiet_session(lambda: start(JAVA_OPTIONS), default_log())


def _local(path: str) -> Path | None:
    """``path`` as a local path, or None for an object-store URI (checked by Spark, later)."""
    scheme = urlparse(path).scheme
    if len(scheme) > 1 and scheme != "file":
        return None
    return Path(urlparse(path).path if scheme == "file" else path)


def _check_folder(path: str, option: str, writes: bool) -> None:
    """Refuse a local ``path`` that cannot be the folder ``option`` names: a file, or (when the
    command ``writes``) a place this user cannot write; it may not exist yet."""
    folder = _local(path)
    if folder is None:
        return
    existing = next(p for p in (folder, *folder.parents) if p.exists())
    if not existing.is_dir():
        raise JobError(f"{option} {path!r}: {existing} is a file, not a folder")
    if writes and not os.access(existing, os.W_OK | os.X_OK):
        raise JobError(f"{option} {path!r}: no permission to write in {existing}")


def _check_paths(args: argparse.Namespace, job: ModuleType) -> None:
    """The warehouse and the job's landing table, checked before Spark starts (local disk only)."""
    _check_folder(args.warehouse, "--warehouse", writes=True)
    _check_folder(args.landing, "--landing", writes=False)
    landing = _local(args.landing)
    if landing is not None and not (landing / job.LANDING / "_delta_log").is_dir():
        raise JobError(
            f"landing table {job.LANDING!r} not found at {landing / job.LANDING}; "
            "fill it first, e.g. python jobs/sample_data.py --from ... --to ..."
        )


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
    _check_paths(args, job)
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
                args.allow_gap,
                args.job,
            )
        )
    )
    return 0


def cmd_backfill(args: argparse.Namespace) -> int:
    job = load_job(args.job)
    todo = intervals(parse_time(args.start, "--from"), parse_time(args.stop, "--to"), _schedule(job, args.every))
    _check_paths(args, job)
    spark = _spark(args, job.PIPELINE.name)
    progress = _Progress(f"backfill {job.PIPELINE.name}")
    results = []
    for n, (start, end) in enumerate(todo, 1):
        try:
            result = run_interval(
                spark, job.PIPELINE, job.LANDING, start, end, args.warehouse, args.landing, args.catalog, job=args.job
            )
        except FrameworkError as e:  # the same error, its message saying where the backfill stopped
            e.args = (
                f"{e} (backfill stopped at batch {batch_id(start)}; earlier batches are committed "
                "and are skipped when the backfill is run again)",
            )
            raise
        print(summary(result), flush=True)
        progress(n, len(todo), worked=result.status == "committed")
        results.append(result)
    ran = [r for r in results if r.status == "committed"]
    print(
        f"backfill {job.PIPELINE.name}: {len(results)} interval(s) in {_duration(time.monotonic() - progress.started)}"
        f": {len(ran)} committed, {len(results) - len(ran)} already committed; "
        f"records in {sum(r.metrics.get('records_in') or 0 for r in ran):,}, emitted {sum(r.emitted for r in ran):,}"
    )
    return 0


def cmd_replay(args: argparse.Namespace) -> int:
    job = load_job(args.job)
    start = parse_time(args.start, "--from")
    stop = parse_time(args.stop, "--to") if args.stop else None
    every = _schedule(job, args.every)
    if stop is not None:
        intervals(start, stop, every)  # refuse a misaligned range before Spark starts
    _check_paths(args, job)
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


def _pipeline_names(args: argparse.Namespace) -> list[str]:
    """The pipelines to report on: the jobs' or, by default, every folder of the warehouse that
    is not one of the framework's own entries (a folder without batches reports so)."""
    if args.jobs:
        return [load_job(j).PIPELINE.name for j in args.jobs]
    _check_folder(args.warehouse, "--warehouse", writes=False)
    folder = _local(args.warehouse)
    if folder is None:
        raise JobError(f"warehouse {args.warehouse!r} is not on local disk: name the jobs to report on")
    if not folder.is_dir():
        raise JobError(f"warehouse {args.warehouse!r} does not exist")
    return sorted(
        p.name
        for p in folder.iterdir()
        if p.is_dir() and p.name not in RESERVED_ROOT_ENTRIES and not p.name.startswith(".")
    )


def cmd_status(args: argparse.Namespace) -> int:
    from ..operations import status

    if args.last < 0:
        raise JobError(f"--last must be 0 or more, got {args.last}")
    names = _pipeline_names(args)
    found = [status.read(_spark(args, "status"), args.warehouse, name) for name in names] if names else []
    found = [s for s in found if s.started or args.jobs]  # other folders are no pipeline's
    if args.html:
        from ..operations import statuspage

        with open(args.html, "w", encoding="utf-8") as out:
            out.write(statuspage.page(args.warehouse, found, statuspage.local_links(args.warehouse)))
        print(f"{args.html}: status of {len(found)} pipeline(s)")
    elif args.json:
        pipelines = [{**s.to_json(), "batches": s.batches[-args.last :] if args.last else []} for s in found]
        print(json.dumps({"warehouse": args.warehouse, "pipelines": pipelines}, indent=2, default=str))
    elif not found:
        print(f"no pipelines under {args.warehouse}")
    else:
        print("\n\n".join(status.text(s, args.last) for s in found))
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
    _check_folder(args.warehouse, "--warehouse", writes=True)  # validation results go to the warehouse
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
        prog="finalresults",
        description="Run, backfill, replay, inspect and check final-results pipelines.",
        allow_abbrev=False,
    )
    root.add_argument("--version", action="version", version=f"finalresults {_version()}")
    commands = root.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def command(name: str, handler, text: str, job: bool = True, spark: bool = True, data: bool = False):
        p = commands.add_parser(name, help=text, description=text, allow_abbrev=False)
        if job:
            p.add_argument("job", help="job module: jobs/<name>.py or jobs.<name>")
        p.add_argument("--warehouse", default=warehouse, help=f"pipelines' Delta tables (default: {warehouse})")
        if data:
            p.add_argument("--landing", default=landing, help=f"landing Delta tables (default: {landing})")
        if spark:
            p.add_argument("--master", help="Spark master (default: $SPARK_MASTER or local[*])")
            p.add_argument(
                "--verbose", action="store_true", help="show Spark's own output (JVM, Ivy, log4j): hidden by default"
            )
        p.set_defaults(handler=handler, parser=p)
        return p

    run = command("run", cmd_run, "Run one batch: the records that arrived in [--batch-start, --batch-end).", data=True)
    run.add_argument("--batch-start", required=True, help="interval start, ISO timestamp (UTC if naive)")
    run.add_argument("--batch-end", help="interval end, exclusive (default: start + the job's SCHEDULE)")
    run.add_argument(
        "--allow-gap",
        action="store_true",
        help="run the batch although it does not start where the last committed interval ended",
    )
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
    status = command(
        "status",
        cmd_status,
        "Per pipeline: last batch, stream time, open windows, the results table's validation, and its last "
        "batches with their metrics and quality-gate audits.",
        job=False,
    )
    status.add_argument("jobs", nargs="*", metavar="job", help="job modules (default: every pipeline in the warehouse)")
    status.add_argument("--last", type=int, default=5, metavar="N", help="batches listed per pipeline (default: 5)")
    output = status.add_mutually_exclusive_group()
    output.add_argument(
        "--html",
        metavar="FILE",
        help="write the status as one self-contained HTML page with "
        "charts of each pipeline's metrics over event time, instead of printing it",
    )
    output.add_argument("--json", action="store_true", help="print the status as JSON (metrics as recorded, units)")
    command("describe", cmd_describe, "Print the topology and where its tables live.", spark=False)
    command("validate", cmd_validate, "Validate the committed results table with its expectation suite.")
    return root


def _version() -> str:
    try:
        return version("finalresults")
    except PackageNotFoundError:  # run from a checkout that was not installed
        return "(not installed)"


def _one_line(e: Exception) -> str:
    """What failed, in one line: a framework error's message, an OS error's reason and file, the
    first line of Spark's (a Java exception's class and message, without its stack)."""
    from py4j.protocol import Py4JJavaError

    if isinstance(e, OSError) and e.strerror:
        return f"{e.strerror}: {e.filename}" if e.filename else e.strerror
    if isinstance(e, FrameworkError):
        return " ".join(str(e).split())
    message = str(e.java_exception) if isinstance(e, Py4JJavaError) else str(e)
    return message.strip().splitlines()[0] if message.strip() else type(e).__name__


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit status (2 for bad arguments, with the command's usage)."""
    args, unknown = parser().parse_known_args(argv)
    if unknown:
        args.parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    try:
        return args.handler(args)
    except KeyboardInterrupt:
        print("finalresults: interrupted", file=sys.stderr)
        return 130
    except Exception as e:
        from py4j.protocol import Py4JJavaError
        from pyspark.errors import PySparkException

        expected = isinstance(e, (FrameworkError, OSError, PySparkException, Py4JJavaError))
        if not expected or getattr(args, "verbose", False):
            raise  # a bug, or asked for: the traceback says where
        print(f"finalresults: error: {_one_line(e)}", file=sys.stderr)
        return 1
