"""``python -m framework`` / ``finalresults``: run, backfill, replay, inspect and check pipelines.

Every command takes a job (``jobs/user_alerts.py`` or ``jobs.user_alerts``) whose module declares
``PIPELINE``, ``LANDING`` and ``SCHEDULE``. Paths default to $FINALRESULTS_WAREHOUSE and
$FINALRESULTS_LANDING, else ``var/warehouse`` and ``var/landing``. A failure prints one line
``finalresults: error: ...`` and exits 1 (2 for bad arguments, with the command's usage).
A job's own command line (``spark-submit jobs/<name>.py``, what the DAGs submit) is ``run``'s,
built here too (``job_parser``, ``job_main``): the same flags, the same error format.

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
from collections.abc import Iterator
from contextlib import contextmanager
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING
from urllib.parse import urlparse

from ..definition.names import RESERVED_ROOT_ENTRIES
from ..definition.pipeline import Pipeline
from ..errors import FrameworkError, PublicationError, QualityGateError
from .console import JAVA_OPTIONS, default_log, quiet_session
from .jobs import (
    JobError,
    backfill_intervals,
    batch_id,
    build_version,
    check_interval,
    chunk_line,
    current_pipeline,
    gate_summary,
    intervals,
    job_versions,
    load_job,
    parse_duration,
    parse_time,
    replay_intervals,
    replay_summary,
    run_interval,
    start_importing_quality,
    summary,
    versions_of,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from ..operations.replay import ReplayResult
    from ..operations.runtime import BatchResult


def _schedule(job: ModuleType, every: str | None) -> dt.timedelta:
    if every:
        return parse_duration(every)
    schedule = getattr(job, "SCHEDULE", None)
    if not isinstance(schedule, dt.timedelta):
        raise JobError(f"pipeline {job.PIPELINE.name!r}: the job declares no timedelta SCHEDULE; pass --every")
    return schedule


def _spark(args: argparse.Namespace, what: str):
    """A Spark session for the command: of the ``--remote`` Spark Connect server, else a classic
    one, its JVM's output in a log file unless ``--verbose``."""
    from ..storage.session import remote_url, spark_session

    def start(conf: dict[str, str] | None = None):
        return spark_session(
            f"finalresults-{what}",
            master=args.master,
            metastore=getattr(args, "metastore", None),
            conf=conf,
            remote=args.remote,
        )

    if args.verbose or remote_url(args.remote):  # a thin client starts no JVM to quiet
        return start()
    return quiet_session(lambda: start(JAVA_OPTIONS), default_log())


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

    def __call__(self, done: int, total: int, worked: int = 1, chunk: str | None = None) -> None:
        """``done`` of ``total`` intervals, of which the last call's ``worked`` ran (not found
        committed); ``chunk``: which intervals it held."""
        self.worked += worked
        elapsed = time.monotonic() - self.started
        line = f"finalresults: {self.what}: {done}/{total} intervals, {_duration(elapsed)} elapsed"
        if chunk is not None:  # what the intervals that just ended ran as
            line += f" ({chunk})"
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
    start = parse_time(args.start, args.start_flag)
    end = parse_time(args.end, args.end_flag) if args.end else start + _schedule(job, None)
    check_interval(job.PIPELINE, start, end)
    _check_paths(args, job)
    spark = _spark(args, job.PIPELINE.name)
    with _leaving_status(spark, args.warehouse, job.PIPELINE.name) as committed:
        pipeline = current_pipeline(spark, args.warehouse, job_versions(job))
        result = _one_batch(spark, pipeline, job.LANDING, start, end, args, args.job)
        committed.append(result.status == "committed")
    print(summary(result))
    return 0


@contextmanager
def _leaving_status(spark: SparkSession, warehouse: str, name: str) -> Iterator[list[bool]]:
    """Leave the pipeline's status file after the command, as a job does (``status.save``), for
    ``finalresults status`` and the Airflow plugin to read without Spark, when the command changed
    it: a batch or replay committed (the caller appends True to the list it is given), an audit
    failed or a publication was cut short. A status costs a few Spark jobs: a command that only
    found its batches committed, or was refused, leaves the file as it was."""
    from ..operations import status

    committed: list[bool] = []
    try:
        yield committed
    except (QualityGateError, PublicationError):
        status.save(spark, warehouse, name)
        raise
    except FrameworkError:
        if any(committed):
            status.save(spark, warehouse, name)
        raise
    if any(committed):
        status.save(spark, warehouse, name)


def _one_batch(spark, pipeline: Pipeline, table: str, start, end, args: argparse.Namespace, job: str) -> BatchResult:
    """``run_interval`` with the paths, catalog and ``--allow-gap`` of ``args``."""
    paths = (args.warehouse, args.landing, args.catalog)
    return run_interval(spark, pipeline, table, start, end, *paths, allow_gap=args.allow_gap, job=job)


def cmd_backfill(args: argparse.Namespace) -> int:
    job = load_job(args.job)
    todo = intervals(
        parse_time(args.start, args.start_flag), parse_time(args.end, args.end_flag), _schedule(job, args.every)
    )
    _check_paths(args, job)
    spark = _spark(args, job.PIPELINE.name)
    with _leaving_status(spark, args.warehouse, job.PIPELINE.name) as committed:
        pipeline = current_pipeline(spark, args.warehouse, job_versions(job))
        _backfill(spark, pipeline, job.LANDING, todo, args, committed, args.job)
    return 0


def _backfill(
    spark: SparkSession,
    pipeline: Pipeline,
    table: str,
    todo: list,
    args: argparse.Namespace,
    committed: list,
    job: str,
) -> list[BatchResult]:
    """The batches of the intervals ``todo`` in order, in chunks (``backfill_intervals``): a line
    per interval and a summary on stdout, a progress line per chunk on stderr; a failure says
    where it stopped."""
    results: list[BatchResult] = []
    progress = _Progress(f"backfill {pipeline.name}")

    def ran(done: list[BatchResult], how: str) -> None:
        for result in done:
            print(summary(result), flush=True)
        results.extend(done)
        worked = [r.status == "committed" for r in done]
        committed.extend(worked)
        progress(len(results), len(todo), worked=sum(worked), chunk=chunk_line(done, how))

    try:
        backfill_intervals(
            spark, pipeline, table, todo, args.warehouse, args.landing, args.catalog, args.chunk_records, ran, job=job
        )
    except FrameworkError as e:  # the same error, its message saying where the backfill stopped
        stopped = batch_id(todo[len(results)][0]) if len(results) < len(todo) else "its end"
        e.args = (
            f"{e} (backfill stopped at batch {stopped}; earlier batches are committed "
            "and are skipped when the backfill is run again)",
        )
        raise
    worked = [r for r in results if r.status == "committed"]
    print(
        f"backfill {pipeline.name}: {len(results)} interval(s) in {_duration(time.monotonic() - progress.started)}"
        f": {len(worked)} committed, {len(results) - len(worked)} already committed; "
        f"records in {sum(r.metrics.get('records_in') or 0 for r in worked):,}, "
        f"rows published {sum(r.emitted for r in worked):,}"
    )
    return results


def cmd_replay(args: argparse.Namespace) -> int:
    job = load_job(args.job)
    start = parse_time(args.start, args.start_flag)
    stop = parse_time(args.end, args.end_flag) if args.end else None
    every = _schedule(job, args.every)
    if stop is not None:
        intervals(start, stop, every)  # refuse a misaligned range before Spark starts
    _check_paths(args, job)
    spark = _spark(args, f"{job.PIPELINE.name}-replay")
    progress = _Progress(f"replay {job.PIPELINE.name}")
    with _leaving_status(spark, args.warehouse, job.PIPELINE.name) as committed:
        ran = replay_intervals(
            spark,
            current_pipeline(spark, args.warehouse, job_versions(job)),
            job.LANDING,
            start,
            stop,
            every,
            args.warehouse,
            args.landing,
            progress=lambda done, total, chunk, ran: progress(done, total, worked=ran, chunk=chunk),
        )
        committed.append(True)
    print(replay_summary(ran, start))
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
    """The status each pipeline's last job or command left (no Spark), or with ``--live`` read
    from its tables; either way as text, ``--json`` or ``--html``."""
    from ..operations import status

    if args.last < 0:
        raise JobError(f"--last must be 0 or more, got {args.last}")
    names = _pipeline_names(args)
    if args.live:
        spark = _spark(args, "status") if names else None  # no pipelines: no Spark
        found = [status.read(spark, args.warehouse, name) for name in names if spark is not None]
        ages: dict[str, str | None] = {}
    else:
        found = [_left(status, args.warehouse, name) for name in names]
        ages = {s.name: _age(status.saved_at(args.warehouse, s.name)) for s in found}
    unread = [s.name for s in found if not (s.started or args.jobs or args.live)]  # no file, maybe tables
    found = [s for s in found if s.started or args.jobs]  # other folders are no pipeline's
    if args.html:
        from ..operations import quality, statuspage

        quality.document_index(args.warehouse)  # the page links GX's index; no audit builds it
        with open(args.html, "w", encoding="utf-8") as out:
            out.write(statuspage.page(args.warehouse, found, statuspage.local_links(args.warehouse)))
        print(f"{args.html}: status of {len(found)} pipeline(s)" + _as_of(ages))
    elif args.json:
        pipelines = [
            {
                **s.to_json(),
                "batches": s.batches[-args.last :] if args.last else [],
                "status_file_age": ages.get(s.name),
            }
            for s in found
        ]
        print(json.dumps({"warehouse": args.warehouse, "pipelines": pipelines}, indent=2, default=str))
    else:
        shown = [_with_age(status.text(s, args.last), ages, s.name, args.live) for s in found]
        print("\n\n".join(shown) if shown else f"no pipelines under {args.warehouse}")
        if unread:
            print(f"\nno status file in {', '.join(unread)}: --live reads their tables, if any")
    return 0


def _left(status: ModuleType, warehouse: str, name: str):
    """The status the last job or command of ``name`` left, or an empty one if none did."""
    return status.load(warehouse, name) or status.PipelineStatus(name, f"{warehouse.rstrip('/')}/{name}")


def _age(saved: dt.datetime | None) -> str | None:
    """How old a status file is, as a person reads it (``3 min 5 s``); None without a file."""
    if saved is None:
        return None
    return _duration(max(0.0, (dt.datetime.now(dt.timezone.utc) - saved).total_seconds()))


def _as_of(ages: dict[str, str | None]) -> str:
    known = [a for a in ages.values() if a is not None]
    return f" (from status files; {', '.join(f'{n} {a} old' for n, a in ages.items() if a)})" if known else ""


def _with_age(text: str, ages: dict[str, str | None], name: str, live: bool) -> str:
    """``text`` with a line after its heading saying where it comes from and how old it is."""
    if live:
        where = "the tables, now (--live)"
    elif ages.get(name) is None:
        where = "no status file: no job or command has left one; --live reads the tables"
    else:
        where = f"the status file the last run left, {ages[name]} ago; --live reads the tables"
    head, _, rest = text.partition("\n")
    return f"{head}\n  as of          {where}\n{rest}"


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

    job = load_job(args.job)
    _check_folder(args.warehouse, "--warehouse", writes=True)  # validation results go to the warehouse
    spark = _spark(args, f"{job.PIPELINE.name}-validate")
    pipeline = current_pipeline(spark, args.warehouse, job_versions(job))
    report = validate_results(spark, pipeline, args.warehouse)
    if report is None:
        print(f"{pipeline.name}: no result emitted yet: nothing to validate")
        return 0
    print(report.summary() + (f"\nData Docs: {report.docs}" if report.docs else ""))
    report.raise_for_failures()
    return 0


def cmd_versions_list(args: argparse.Namespace) -> int:
    """Each version the job defines: how far it has run, and which one is the pipeline."""
    from ..operations import versions as versioning
    from ..operations.runtime import Runtime
    from ..storage import versions

    job = load_job(args.job)
    defined = job_versions(job)
    spark = _spark(args, f"{job.PIPELINE.name}-versions")
    rt = Runtime(spark, args.warehouse)
    at = rt.current_version(job.PIPELINE)
    for k, p in sorted(defined.items()):
        mark = "  (the pipeline)" if k == at else ""
        print(f"version {k}: {versioning.standing(rt, p).through}; tables {rt.tables(p).root}{mark}")
    for done in versions.switches(spark, args.warehouse, job.PIPELINE.name):
        print(done.describe())
    return 0


def cmd_versions_build(args: argparse.Namespace) -> int:
    """Build a version beside the pipeline's until it has caught up (``jobs.build_version``)."""
    job = load_job(args.job)
    defined = _defining(job, args.version)
    _check_paths(args, job)
    start, every = parse_time(args.start, args.start_flag), _schedule(job, args.every)
    spark = _spark(args, f"{job.PIPELINE.name}-build")
    progress, done = _Progress(f"build {job.PIPELINE.name} version {args.version}"), [0]

    def ran(results: list[BatchResult], how: str) -> None:
        done[0] += len(results)
        progress(done[0], done[0], worked=len(results), chunk=chunk_line(results, how))

    built = build_version(
        spark, defined, args.version, job.LANDING, start, every, args.warehouse, args.landing, args.chunk_records, ran
    )
    print(f"version {args.version}: {len(built)} interval(s) run; it has caught up with the pipeline's")
    return 0


def cmd_versions_compare(args: argparse.Namespace) -> int:
    """Version ``--version``'s final rows against the pipeline's (or ``--against``'s)."""
    from ..operations import versions as versioning
    from ..operations.runtime import Runtime
    from ..storage import versions

    job = load_job(args.job)
    defined = _defining(job, args.version)
    spark = _spark(args, f"{job.PIPELINE.name}-compare")
    rt = Runtime(spark, args.warehouse)
    against = defined[args.against] if args.against else current_pipeline(spark, args.warehouse, defined)
    compared = versioning.compare(rt, against, defined[args.version]).describe()
    print(compared)
    with _leaving_status(spark, args.warehouse, job.PIPELINE.name) as changed:  # the plugin's page shows it
        versions.keep_comparison(spark, args.warehouse, job.PIPELINE.name, compared)
        changed.append(True)
    return 0


def cmd_versions_switch(args: argparse.Namespace) -> int:
    """Make version ``--to`` the pipeline (``operations.versions.switch``)."""
    from ..operations import versions as versioning
    from ..operations.runtime import Runtime

    job = load_job(args.job)
    defined = _defining(job, args.to)
    spark = _spark(args, f"{job.PIPELINE.name}-switch")
    rt = Runtime(spark, args.warehouse, catalog=args.catalog)
    with _leaving_status(spark, args.warehouse, job.PIPELINE.name) as changed:
        done = versioning.switch(rt, defined, args.to, breaking_columns=args.breaking_columns)
        changed.append(True)
    print(f"{job.PIPELINE.name}: {done.describe()}")
    return 0


def _defining(job: ModuleType, version: int) -> dict:
    """The job's versions, refusing ``version`` if the job does not define it (before Spark starts)."""
    defined = job_versions(job)
    if version not in defined:
        raise JobError(f"pipeline {job.PIPELINE.name!r}: the job defines versions {sorted(defined)}, not {version}")
    return defined


class _Formatter(argparse.HelpFormatter):
    """Help that shows each option by its first name only: later names are old spellings kept
    working (``--batch-start`` for ``--from``), not offered."""

    def _format_action_invocation(self, action: argparse.Action) -> str:
        if not action.option_strings or action.nargs == 0:
            return super()._format_action_invocation(action)
        return f"{action.option_strings[0]} {self._format_args(action, self._get_default_metavar_for_optional(action))}"


class _Spelled(argparse.Action):
    """Store the value and the flag as typed (``args.<dest>_flag``), so an error names it."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, values)
        setattr(namespace, f"{self.dest}_flag", option_string)


def _boolean(text: str) -> bool:
    """``--allow-gap``'s optional value: true/false, yes/no, 1/0 (Airflow renders True/False)."""
    value = text.strip().lower()
    if value not in ("true", "1", "yes", "false", "0", "no"):
        raise argparse.ArgumentTypeError(f"{text!r} is not true or false")
    return value in ("true", "1", "yes")


def _positive(text: str) -> int:
    """A whole number of at least 1 (``--chunk-records``)."""
    if not text.strip().isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of at least 1")
    return int(text)


def _paths(p: argparse.ArgumentParser, landing: bool = False) -> None:
    """``--warehouse`` (and ``--landing``), defaults from the environment."""
    warehouse = os.environ.get("FINALRESULTS_WAREHOUSE", "var/warehouse")
    p.add_argument("--warehouse", default=warehouse, help=f"pipelines' Delta tables (default: {warehouse})")
    if landing:
        folder = os.environ.get("FINALRESULTS_LANDING", "var/landing")
        p.add_argument("--landing", default=folder, help=f"landing Delta tables (default: {folder})")


def _interval(p: argparse.ArgumentParser, start: str, end: str, end_required: bool = False) -> None:
    """``--from`` and ``--to`` (old spellings ``--batch-start``, ``--batch-end``)."""
    p.add_argument("--from", "--batch-start", dest="start", action=_Spelled, required=True, help=start)
    p.add_argument("--to", "--batch-end", dest="end", action=_Spelled, required=end_required, help=end)
    p.set_defaults(start_flag="--from", end_flag="--to")


def _batches(p: argparse.ArgumentParser, gap: bool = False) -> None:
    """What running batches takes beside the interval: the catalog, and ``--allow-gap``."""
    p.add_argument(
        "--catalog",
        default=os.environ.get("FINALRESULTS_CATALOG"),
        help="also keep the pipeline's tables in this catalog schema (default: $FINALRESULTS_CATALOG)",
    )
    p.add_argument(
        "--metastore",
        default=os.environ.get("FINALRESULTS_METASTORE"),
        help="folder of an embedded metastore for --catalog, one machine only (default: "
        "$FINALRESULTS_METASTORE; else the session's catalog)",
    )
    if gap:
        p.add_argument(
            "--allow-gap",
            nargs="?",
            type=_boolean,
            const=True,
            default=False,
            metavar="BOOL",
            help="run the batch although it does not start where the last committed interval ended "
            "(the records between are skipped on purpose); alone it means true",
        )


def _every(p: argparse.ArgumentParser) -> None:
    p.add_argument("--every", help="interval length, e.g. 1h or 15m (default: the job's SCHEDULE)")


def _chunk_records(p: argparse.ArgumentParser, empty: bool = False) -> None:
    """``--chunk-records``; ``empty``: an empty value means the default (a DAG's template of an unset param)."""
    p.add_argument(
        "--chunk-records",
        type=(lambda text: _positive(text) if text.strip() else None) if empty else _positive,
        metavar="N",
        help="records a chunk of intervals holds at most: each chunk is one Spark batch and one commit, "
        "every interval still recorded as its own batch (default: 10,000,000; 1: one batch per interval)",
    )


def _command(commands, name: str, handler, text: str, job: bool = True, spark: bool = True, data: bool = False):
    """The sub-parser of one command: its job, its paths and, if it starts Spark, its flags."""
    p = commands.add_parser(name, help=text, description=text, allow_abbrev=False, formatter_class=_Formatter)
    if job:
        p.add_argument("job", help="job module: jobs/<name>.py or jobs.<name>")
    _paths(p, landing=data)
    if spark:
        p.add_argument("--master", help="Spark master (default: $SPARK_MASTER or local[*])")
        p.add_argument("--remote", help="Spark Connect server to run on, sc://host:port (default: $SPARK_REMOTE)")
        p.add_argument(
            "--verbose", action="store_true", help="show Spark's own output (JVM, Ivy, log4j): hidden by default"
        )
    p.set_defaults(handler=handler, parser=p)
    return p


def _batch_commands(commands) -> None:
    run = _command(commands, "run", cmd_run, "Run one batch: the records that arrived in [--from, --to).", data=True)
    _interval(
        run, "interval start, ISO timestamp (UTC if naive)", "interval end, exclusive (default: start + SCHEDULE)"
    )
    _batches(run, gap=True)
    backfill = _command(
        commands, "backfill", cmd_backfill, "Run consecutive intervals in order, from --from to --to.", data=True
    )
    _interval(backfill, "first interval start, ISO timestamp", "last interval end, ISO timestamp", end_required=True)
    _batches(backfill)
    _every(backfill)
    _chunk_records(backfill)
    replay = _command(
        commands,
        "replay",
        cmd_replay,
        "Re-run committed batches from --from through the last committed one with the landing records as they "
        "are now, replacing their final rows atomically (state restored by Delta time travel).",
        data=True,
    )
    _interval(
        replay,
        "first replayed interval start, ISO timestamp",
        "end of the range (default and only allowed value: the end of the last committed batch; later batches "
        "depend on the replayed state)",
    )
    _every(replay)


def _status_command(commands) -> None:
    status = _command(
        commands,
        "status",
        cmd_status,
        "Per pipeline: last batch, stream time, open windows, the results table's validation, and its last "
        "batches with their metrics and quality-gate audits, from the status file the last job left "
        "(no Spark; --live reads the tables).",
        job=False,
    )
    status.add_argument("jobs", nargs="*", metavar="job", help="job modules (default: every pipeline in the warehouse)")
    status.add_argument("--last", type=int, default=5, metavar="N", help="batches listed per pipeline (default: 5)")
    status.add_argument(
        "--live", action="store_true", help="start Spark and read the tables instead of the status file (slower)"
    )
    output = status.add_mutually_exclusive_group()
    output.add_argument(
        "--html",
        metavar="FILE",
        help="write the status as one self-contained HTML page with "
        "charts of each pipeline's metrics over event time, instead of printing it",
    )
    output.add_argument("--json", action="store_true", help="print the status as JSON (metrics as recorded, units)")


def _versions_commands(commands) -> None:
    """``finalresults versions list|build|compare|switch``: a changed pipeline, built beside the
    running one, compared with it and switched to (docs/operations.md#changing-a-pipeline)."""
    text = "Build, compare and switch a pipeline's versions (docs/operations.md#changing-a-pipeline)."
    versions = commands.add_parser("versions", help=text, description=text, allow_abbrev=False)
    actions = versions.add_subparsers(dest="action", metavar="ACTION", required=True)
    _command(actions, "list", cmd_versions_list, "The versions the job defines, how far each ran, and the switches.")
    build = _command(
        actions,
        "build",
        cmd_versions_build,
        "Run a version's intervals from --from over the landing history, in chunks, until it has caught up "
        "with the pipeline's; the pipeline's own runs go on.",
        data=True,
    )
    build.add_argument("--version", type=_positive, required=True, help="the version to build")
    build.add_argument("--from", dest="start", action=_Spelled, required=True, help="its first interval's start")
    build.set_defaults(start_flag="--from")
    _every(build)
    _chunk_records(build)
    compare = _command(
        actions, "compare", cmd_versions_compare, "How a version's final rows differ from the pipeline's."
    )
    compare.add_argument("--version", type=_positive, required=True, help="the version to compare")
    compare.add_argument("--against", type=_positive, help="the version to compare with (default: the pipeline's)")
    switch = _command(
        actions,
        "switch",
        cmd_versions_switch,
        "Make a version that has caught up the pipeline (readers, the catalog and the DAG's next run), or switch back.",
    )
    switch.add_argument("--to", type=_positive, required=True, help="the version to switch to")
    switch.add_argument(
        "--breaking-columns",
        action="store_true",
        help="switch although the results table loses a column or changes its type",
    )
    _batches(switch)


def parser() -> argparse.ArgumentParser:
    """The command line (one sub-parser per command, each with --help)."""
    root = argparse.ArgumentParser(
        prog="finalresults",
        description="Run, backfill, replay, inspect and check final-results pipelines.",
        allow_abbrev=False,
    )
    root.add_argument("--version", action="version", version=f"finalresults {_version()}")
    commands = root.add_subparsers(dest="command", metavar="COMMAND", required=True)
    _batch_commands(commands)
    _status_command(commands)
    _versions_commands(commands)
    _command(commands, "describe", cmd_describe, "Print the topology and where its tables live.", spark=False)
    _command(commands, "validate", cmd_validate, "Validate the committed results table with its expectation suite.")
    return root


def job_parser(prog: str) -> argparse.ArgumentParser:
    """A job's own command line (``spark-submit jobs/<name>.py``, what a DAG submits): ``run``'s
    flags for the job itself, with ``--replay`` for ``replay``'s, ``--backfill`` for
    ``backfill``'s and ``--run-id`` for the gate."""
    p = argparse.ArgumentParser(
        prog=prog,
        description="Run one batch of this pipeline: the landing records that arrived in [--from, --to). "
        "With --replay, replay the committed batches of the --every-long intervals from --from to --to "
        "(default: through the last committed batch). With --backfill, run the --every-long intervals from "
        "--from to --to in chunks, each recorded as its own batch. Then validate the results table for the "
        "quality gate.",
        allow_abbrev=False,
        formatter_class=_Formatter,
    )
    _paths(p, landing=True)
    _interval(
        p, "interval start, ISO timestamp (data_interval_start)", "interval end, exclusive (required unless --replay)"
    )
    _batches(p, gap=True)
    p.add_argument("--replay", action="store_true", help="replay a committed range (framework.replay)")
    p.add_argument("--backfill", action="store_true", help="run a range of intervals in chunks (as 'backfill')")
    p.add_argument("--every", help="with --replay or --backfill: the interval length, e.g. 1h")
    _chunk_records(p, empty=True)
    p.add_argument("--run-id", help="the Airflow run whose quality gate reads this run's validation outcome")
    return p


def _batch_ids(ran: BatchResult | ReplayResult | list[BatchResult]) -> list[str]:
    """The batch ids a job's run committed or found committed."""
    if isinstance(ran, list):
        return [r.batch_id for r in ran]
    return [r.batch_id for r in ran.batches] if hasattr(ran, "batches") else [ran.batch_id]


def _version() -> str:
    try:
        return version("finalresults")
    except PackageNotFoundError:  # run from a checkout that was not installed
        return "(not installed)"


def _one_line(e: Exception) -> str:
    """What failed, in one line: a framework error's message, an OS error's reason and file, the
    first line of Spark's (a Java exception's class and message, without its stack)."""
    from ..storage import classic

    if isinstance(e, OSError) and e.strerror:
        return f"{e.strerror}: {e.filename}" if e.filename else e.strerror
    if isinstance(e, FrameworkError):
        return " ".join(str(e).split())
    message = classic.message(e)
    return message.strip().splitlines()[0] if message.strip() else type(e).__name__


def _failed(e: Exception, verbose: bool) -> int:
    """The one error format of the command line and of a job's: ``finalresults: error: <one line>``
    on stderr and exit 1 for what a user can act on; a bug (or ``--verbose``) raises, with its traceback."""
    from pyspark.errors import PySparkException

    from ..storage import classic

    if verbose or not isinstance(e, (FrameworkError, OSError, PySparkException, classic.JavaError)):
        raise e
    print(f"finalresults: error: {_one_line(e)}", file=sys.stderr)
    return 1


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
        return _failed(e, getattr(args, "verbose", False))


def job_main(pipeline: Pipeline, table: str, argv: list[str] | None = None, versions: tuple | list = ()) -> int:
    """Entry point of ``spark-submit jobs/<name>.py`` (or, with ``SPARK_REMOTE`` set, of
    ``python jobs/<name>.py`` as a Spark Connect client): run one batch (or, with ``--replay``,
    a replay), then validate the results table for the quality gate; 0 on success (the
    validation's verdict is the gate's to report), 1 on error, as ``finalresults run`` does.
    The batch is the version's that is the pipeline now, of ``pipeline`` and the other
    ``versions`` the job keeps (``jobs.current_pipeline``): a switch takes effect from the next run."""
    args = job_parser(f"spark-submit {Path(sys.argv[0]).name}").parse_args(sys.argv[1:] if argv is None else argv)
    spark = None
    try:
        start = parse_time(args.start, args.start_flag)
        end = parse_time(args.end, args.end_flag) if args.end else None
        from ..operations import covered
        from ..operations.validation import after_run
        from ..storage import tables
        from ..storage.session import spark_session

        every = parse_duration(args.every or "") if args.replay or args.backfill else None
        if end is None and not args.replay:
            raise JobError(f"{args.end_flag} is required (unless --replay)")
        todo = intervals(start, end, every) if args.backfill and end is not None and every is not None else []
        if end is not None and every is None:
            check_interval(pipeline, start, end)
        kind = "-replay" if args.replay else "-backfill" if args.backfill else ""
        start_importing_quality()  # the batches' audits and the table's validation need it
        spark = spark_session(f"finalresults-{pipeline.name}{kind}", metastore=args.metastore)
        pipeline = current_pipeline(spark, args.warehouse, versions_of(pipeline, versions))
        landing = os.path.join(args.landing, table)
        read_at = tables.latest_version(spark, landing)  # what covered.json vouches for (before the read)
        ran: BatchResult | ReplayResult | list[BatchResult]
        if args.replay:
            assert every is not None  # parsed above
            ran = replay_intervals(spark, pipeline, table, start, end, every, args.warehouse, args.landing)
            print(replay_summary(ran, start))
        elif args.backfill:
            ran = _backfill(spark, pipeline, table, todo, args, [], sys.argv[0])
        else:
            ran = _one_batch(spark, pipeline, table, start, end, args, sys.argv[0])
            print(summary(ran))
        found = after_run(spark, pipeline, args.warehouse, ran, args.run_id)
        print(gate_summary(found))
        if found.success and read_at is not None:
            covered.record(spark, args.warehouse, pipeline.name, landing, read_at, _batch_ids(ran))
        return 0
    except FrameworkError as e:
        return _failed(e, verbose=False)
    finally:
        if spark is not None:
            spark.stop()
