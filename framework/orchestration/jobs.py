"""A pipeline as a batch job: one data interval of a landing table -> one ``run_batch``.

A job module (``jobs/<name>.py``) declares ``PIPELINE``, the ``LANDING`` table it reads and its
``SCHEDULE``; this module does the rest, the same way for ``spark-submit jobs/<name>.py``, for
``python -m framework run`` and for the Airflow DAGs. A batch is the set of landing records whose
``ingest_time`` falls in ``[batch_start, batch_end)``; its id is the ISO form of ``batch_start``,
so ids increase with time and re-running an interval is an idempotent no-op (docs/design.md#crashes-and-re-runs).
With ``--replay`` the same entry point replays committed intervals from the landing table as it
is now (``replay_intervals``, docs/design.md#replay): the replay DAG submits that. A job's command
line is ``finalresults run``'s (``cli.job_parser``, ``cli.job_main``). After either,
the job validates the results table in its own Spark session and leaves the outcome for the DAG's
quality-gate task (``framework.operations.outcome``), which then needs no Spark of its own.
"""

from __future__ import annotations

import datetime as dt
import importlib.util
import logging
import os
import re
import sys
import threading
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Callable

from ..definition.pipeline import Pipeline
from ..errors import FrameworkError, SkippedIntervalError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from ..operations.chunk import Range
    from ..operations.outcome import Outcome
    from ..operations.replay import ReplayResult
    from ..operations.runtime import BatchResult

INGEST_TIME = "ingest_time"
_DURATION = re.compile(r"(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?")


class JobError(FrameworkError):
    """A job cannot start: unknown module, missing landing table, bad interval."""


def load_job(spec: str) -> ModuleType:
    """The job module named by ``spec``: a dotted name (``jobs.user_alerts``) or a file path.

    A dotted name that is not importable is also looked up as a file under the current folder,
    so ``finalresults run jobs.user_alerts`` works from the repository root.
    """
    path = Path(spec)
    if not spec.endswith(".py"):
        try:
            return _checked(importlib.import_module(spec), spec)
        except ModuleNotFoundError as e:
            if e.name is None or not spec.startswith(e.name):
                raise
            path = Path(*spec.split(".")).with_suffix(".py")
            if not path.is_file():
                raise JobError(
                    f"job {spec!r} not found: not importable and no file {path}; "
                    "pass the job file (jobs/<name>.py) or add its folder to PYTHONPATH"
                ) from None
    if not path.is_file():
        raise JobError(f"job file {spec!r} not found")
    module_spec = importlib.util.spec_from_file_location(f"finalresults_job_{path.stem}", path.resolve())
    if module_spec is None or module_spec.loader is None:
        raise JobError(f"job file {spec!r} cannot be loaded as a Python module")
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[module_spec.name] = module
    module_spec.loader.exec_module(module)
    return _checked(module, spec)


def _checked(module: ModuleType, spec: str) -> ModuleType:
    if not isinstance(getattr(module, "PIPELINE", None), Pipeline):
        raise JobError(f"job {spec!r} has no PIPELINE (a framework.Pipeline)")
    if not isinstance(getattr(module, "LANDING", None), str):
        raise JobError(f"job {spec!r} has no LANDING (the name of the landing table it reads)")
    return module


def versions_of(pipeline: Pipeline, kept: tuple | list = ()) -> dict[int, Pipeline]:
    """A job's definitions by version: its ``PIPELINE`` and the earlier (or later) versions it
    keeps in ``VERSIONS`` (each a ``Pipeline`` of the same name and its own version)."""
    defined = {pipeline.version: pipeline}
    for p in kept:
        if not isinstance(p, Pipeline) or p.name != pipeline.name:
            raise JobError(f"pipeline {pipeline.name!r}: VERSIONS holds {p!r}, not a Pipeline of that name")
        if defined.setdefault(p.version, p) != p:
            raise JobError(f"pipeline {pipeline.name!r}: two definitions of version {p.version}")
    return defined


def job_versions(job: ModuleType) -> dict[int, Pipeline]:
    """``versions_of`` a loaded job module."""
    return versions_of(job.PIPELINE, getattr(job, "VERSIONS", ()))


def current_pipeline(spark: SparkSession, warehouse: str, defined: dict[int, Pipeline]) -> Pipeline:
    """The definition of the version that is the pipeline now (``storage.versions.current``):
    what a job's run, backfill or replay runs, so a switch takes effect from the next run."""
    from ..errors import VersionError
    from ..storage import versions

    name = next(iter(defined.values())).name
    at = versions.current(spark, warehouse, name)
    if at not in defined:
        raise VersionError(
            f"pipeline {name!r} is at version {at}, which this job does not define (it defines {sorted(defined)}): "
            f"keep version {at}'s definition in the job's VERSIONS, or switch the pipeline to a version it defines"
        )
    return defined[at]


def build_version(
    spark: SparkSession,
    defined: dict[int, Pipeline],
    version: int,
    table: str,
    start: dt.datetime,
    every: dt.timedelta,
    warehouse: str,
    landing: str,
    chunk_records: int | None = None,
    progress: Callable[[list[BatchResult], str], None] | None = None,
) -> list[BatchResult]:
    """Build version ``version`` beside the pipeline's: its ``every``-long intervals from
    ``start`` (or from where its last committed one ended) over the landing history, in chunks,
    through the pipeline's last committed interval, and again while the pipeline committed more
    meanwhile, until it has caught up (then ``finalresults versions switch`` may make it the
    pipeline). The pipeline's own runs go on meanwhile."""
    from ..errors import VersionError
    from ..operations import versions
    from ..operations.chunk import CHUNK_RECORDS
    from ..operations.runtime import Runtime

    rt = Runtime(spark, warehouse, following=True)
    new = defined[version]
    ran: list[BatchResult] = []
    while True:
        pipeline = current_pipeline(spark, warehouse, defined)
        if pipeline.version == version:
            raise VersionError(f"pipeline {new.name!r} is at version {version} already: there is nothing to build")
        target, mine = versions.standing(rt, pipeline).last, versions.standing(rt, new).last
        if target is None or target.interval_end is None:
            raise VersionError(
                f"pipeline {new.name!r}: version {pipeline.version} has committed no interval of a job: "
                "there is nothing to follow"
            )
        begin = start if mine is None or mine.interval_end is None else _at(mine.interval_end)
        stop = _at(target.interval_end)
        if begin >= stop:
            return ran
        todo = landing_range(spark, landing, table, intervals(begin, stop, every))
        ran += rt.run_range(new, todo, chunk_records or CHUNK_RECORDS, progress=progress)


def _at(ms: int) -> dt.datetime:
    """An interval bound the ledger records (epoch ms) as the naive UTC time jobs use."""
    return dt.datetime(1970, 1, 1) + dt.timedelta(milliseconds=ms)


def parse_time(text: str, what: str) -> dt.datetime:
    """An ISO timestamp as naive UTC (Airflow renders aware ones; naive ones are taken as UTC)."""
    try:
        value = dt.datetime.fromisoformat(text.strip())
    except ValueError:
        raise JobError(f"{what} {text!r} is not an ISO timestamp (e.g. 2026-01-01T00:00:00+00:00)") from None
    if value.tzinfo is not None:
        value = value.astimezone(dt.timezone.utc).replace(tzinfo=None)
    return value


def batch_id(start: dt.datetime) -> str:
    """The id of the batch of the interval starting at ``start``: its ISO form, which sorts by time."""
    return start.isoformat(timespec="seconds")


def read_landing(spark: SparkSession, landing: str, table: str, start: dt.datetime, end: dt.datetime) -> DataFrame:
    """The landing records that arrived in ``[start, end)`` (``ingest_time``, naive UTC bounds)."""
    from pyspark.sql import functions as F

    from ..storage import tables

    path = os.path.join(landing, table)
    if not tables.exists(spark, path):
        raise JobError(
            f"landing table {table!r} not found at {path}; "
            "fill it first, e.g. python jobs/sample_data.py --from ... --to ..."
        )
    utc = dt.timezone.utc
    arrived = F.col(INGEST_TIME)
    return (
        spark.read.format("delta")
        .load(path)
        .filter((arrived >= F.lit(start.replace(tzinfo=utc))) & (arrived < F.lit(end.replace(tzinfo=utc))))
    )


def parse_duration(text: str) -> dt.timedelta:
    """``1h``, ``30m``, ``1h30m``, ``1d`` as a timedelta."""
    match = _DURATION.fullmatch(text.strip())
    if not text.strip() or not match:
        raise JobError(f"--every {text!r} is not a duration like 1h, 30m, 1h30m or 1d")
    d, h, m, s = (int(x or 0) for x in match.groups())
    every = dt.timedelta(days=d, hours=h, minutes=m, seconds=s)
    if every <= dt.timedelta(0):
        raise JobError("--every must be positive")
    return every


def intervals(start: dt.datetime, stop: dt.datetime, every: dt.timedelta) -> list[tuple[dt.datetime, dt.datetime]]:
    """The consecutive ``every``-long intervals from ``start`` to ``stop``, which must line up
    with them (batches are the DAG's data intervals)."""
    if not start < stop or (stop - start) % every:
        raise JobError(
            f"--to must be --from plus a whole number of {every} intervals "
            "(batches must line up with the DAG's data intervals)"
        )
    count = (stop - start) // every
    return [(start + i * every, start + (i + 1) * every) for i in range(count)]


def start_importing_quality() -> None:
    """Import the quality module (Great Expectations: seconds on a quiet machine, the largest
    part of the gate's cost in a fresh process) in a thread. A job's main thread spends those
    seconds waiting on the JVM (the session, the batch's queries); the audit's import then finds
    the module loaded, or waits for it. Call it once pyspark.sql is imported: the thread imports
    pandas and numpy first, so that it and the main thread meet only on top-level packages (two
    threads importing one package's submodules can each wait for the other's). Not a daemon: the
    process ends after the import does (a thread cut off mid-import at interpreter shutdown can
    abort it)."""
    threading.Thread(target=_import_quality, name="importing-quality").start()


def _import_quality() -> None:
    try:
        for name in ("numpy", "pandas", "..operations.quality"):
            importlib.import_module(name, __package__)
    except BaseException:  # the audit's own import raises it again, where it is reported
        logging.getLogger(__name__).debug("importing the quality module ahead failed", exc_info=True)


def check_interval(pipeline: Pipeline, start: dt.datetime, end: dt.datetime) -> None:
    """Refuse an empty or reversed interval (before any Spark work starts)."""
    if not start < end:
        raise JobError(f"pipeline {pipeline.name!r}: batch start {start} must be before batch end {end}")


def run_interval(
    spark: SparkSession,
    pipeline: Pipeline,
    table: str,
    start: dt.datetime,
    end: dt.datetime,
    warehouse: str,
    landing: str,
    catalog: str | None = None,
    allow_gap: bool = False,
    job: str | None = None,
) -> BatchResult:
    """Run the batch of ``pipeline`` for the data interval ``[start, end)`` of landing ``table``
    (its tables kept in catalog schema ``catalog`` too, if given); it must start where the last
    committed interval ended unless ``allow_gap``. ``job``, the job file run, goes into the
    command a refusal for a skipped interval names."""
    from ..operations.runtime import Runtime

    check_interval(pipeline, start, end)
    records = read_landing(spark, landing, table, start, end)
    try:
        return Runtime(spark, warehouse, catalog=catalog).run_batch(
            pipeline, batch_id(start), records, batch_end=end, batch_start=start, allow_gap=allow_gap
        )
    except SkippedIntervalError as e:
        raise (e.for_job(job) if job else e) from None


def backfill_intervals(
    spark: SparkSession,
    pipeline: Pipeline,
    table: str,
    todo: list[tuple[dt.datetime, dt.datetime]],
    warehouse: str,
    landing: str,
    catalog: str | None = None,
    chunk_records: int | None = None,
    progress: Callable[[list[BatchResult], str], None] | None = None,
    job: str | None = None,
) -> list[BatchResult]:
    """Run the consecutive intervals ``todo`` of ``pipeline`` from landing ``table``: one read
    of the landing records of the whole range, run in chunks of at most ``chunk_records``
    records (``Runtime.run_range``: each interval recorded as its own batch), or interval by
    interval for a pipeline a chunk cannot count; ``progress(results, how)`` after each chunk."""
    from ..operations.chunk import CHUNK_RECORDS
    from ..operations.runtime import Runtime

    try:
        return Runtime(spark, warehouse, catalog=catalog).run_range(
            pipeline, landing_range(spark, landing, table, todo), chunk_records or CHUNK_RECORDS, progress=progress
        )
    except SkippedIntervalError as e:
        raise (e.for_job(job) if job else e) from None


def replay_intervals(
    spark: SparkSession,
    pipeline: Pipeline,
    table: str,
    start: dt.datetime,
    stop: dt.datetime | None,
    every: dt.timedelta,
    warehouse: str,
    landing: str,
    progress: Callable[[int, int, str, int], None] | None = None,
    chunk_records: int | None = None,
) -> ReplayResult:
    """Replay the batches of the ``every``-long intervals from ``start`` to ``stop`` with the
    landing records as they are now (after a fix), in chunks (``Runtime.replay_range``). ``stop``
    defaults to the end of the last committed batch; a replay must reach it (see
    ``framework.operations.replay``). ``progress(done, total, chunk, ran)`` is called as each chunk
    has run (before the range commits), ``chunk`` saying which intervals it held (``chunk_line``),
    ``ran`` how many."""
    from ..operations.chunk import CHUNK_RECORDS
    from ..operations.runtime import Runtime
    from ..storage import bookkeeping

    rt = Runtime(spark, warehouse)
    if stop is None:
        last = bookkeeping.last_committed(spark, rt.tables(pipeline).root)
        if last is None:
            raise JobError(f"pipeline {pipeline.name!r}: no committed batch under {warehouse}: nothing to replay")
        stop = parse_time(last.batch_id, "the last committed batch id") + every
    first = rt.replay_start(pipeline, batch_id(start))  # the state before ``start`` may not be kept
    start = parse_time(first, "the first batch of its chunk")
    todo, done = intervals(start, stop, every), [0]

    def ran(results: list[BatchResult], how: str) -> None:
        done[0] += len(results)
        if progress is not None:
            progress(done[0], len(todo), chunk_line(results, how), len(results))

    return rt.replay_range(pipeline, landing_range(spark, landing, table, todo), chunk_records or CHUNK_RECORDS, ran)


def landing_range(spark: SparkSession, landing: str, table: str, todo: list[tuple[dt.datetime, dt.datetime]]) -> Range:
    """The intervals ``todo`` of landing ``table`` as one range: one read of their records."""
    from ..operations.chunk import Interval, Range

    records = read_landing(spark, landing, table, todo[0][0], todo[-1][1])
    return Range([Interval(batch_id(s), s, e) for s, e in todo], records, INGEST_TIME)


def chunk_line(results: list[BatchResult], how: str) -> str:
    """Which intervals a chunk (or a batch of a range) held, and how it ran, for a progress line."""
    return f"{results[0].batch_id}..{results[-1].batch_id}: {how}"


def summary(result: BatchResult) -> str:
    """One line a person (or an Airflow log) reads to know what a batch did."""
    return (
        f"{result.pipeline} batch {result.batch_id}: {result.status} (seq {result.seq}), "
        f"records in {result.metrics.get('records_in')}, rows published {result.emitted}, "
        f"late {result.dropped_late}, stream time {result.stream_time}"
    )


def replay_summary(result: ReplayResult, asked: dt.datetime | None = None) -> str:
    """One line on a replay: its range and the final rows it replaced; and why it started before
    the interval ``asked`` (it ran inside a chunk: the state before it was never kept)."""
    line = (
        f"{result.pipeline} replay {result.first}..{result.last}: {len(result.batches)} batch(es) re-run, "
        f"{result.removed} final row(s) replaced by {result.emitted}"
    )
    if asked is not None and batch_id(asked) != result.first:
        line += (
            f" (from {result.first}, the first interval of the chunk that holds {batch_id(asked)}: the state "
            "between a chunk's intervals is not kept; those intervals ran again with their landing records as now)"
        )
    return line


def gate_summary(found: Outcome) -> str:
    """One line on the results table's validation after a run, which the quality gate reports."""
    if not found.validated:
        return f"{found.pipeline} results: not validated again (unchanged since a validation that passed)"
    verdict = "valid" if found.success else f"{len(found.failures)} critical expectation(s) failed"
    return f"{found.pipeline} results: {verdict}; the quality_gate task reports it" + (
        f" (Data Docs: {found.docs})" if found.docs else ""
    )
