"""Validating a pipeline's committed results table: after each job's run (for the Airflow
quality-gate task) and ``finalresults validate``.

Each batch already audits its own rows before publishing them (``framework.operations.quality.gate``);
this checks the table as readers see it, with the pipeline's Great Expectations suite
(``expectations/``), and records the outcome in ``<warehouse>/quality_results`` and Data Docs.
After a job's run only the rows added since the table last passed are checked, with the older
rows they could duplicate (``_validate_since``): its cost follows the batch, not the table's
history. When the only commit since is the batch's own publication, its audit checked exactly
those rows and is taken as the table's validation (``_audited``). ``finalresults validate``
checks every row.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..definition.pipeline import Pipeline
from ..errors import FrameworkError
from .outcome import KINDS, Outcome, location, read_in_job

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from .quality import Report
    from .replay import ReplayResult
    from .runtime import BatchResult


def validate_results(spark: SparkSession, p: Pipeline, warehouse: str) -> Report | None:
    """The validation report of ``p``'s committed results, or None when no batch emitted any yet.

    Batches that closed no window leave nothing to check: a healthy young pipeline, not a
    failure. No committed batch at all is an error (FrameworkError).
    """
    from ..storage import bookkeeping, tables
    from . import quality
    from .runtime import Runtime

    rt = Runtime(spark, warehouse)
    if bookkeeping.last_committed(spark, rt.tables(p).root) is None:
        raise FrameworkError(f"pipeline {p.name!r}: no committed batch under {warehouse}: nothing to validate")
    if not tables.exists(spark, rt.tables(p).output):
        return None
    return quality.validate_table(spark, p, rt.read_output(p, version=p.version), warehouse_root=warehouse)


def _validate_since(
    spark: SparkSession, p: Pipeline, warehouse: str, version: int, earlier: list[Outcome]
) -> tuple[Report | None, int | None, str | None]:
    """Validate the results table at ``version``: the rows added since the last version an
    earlier outcome found valid (``quality.validate_added``), else the whole table; the report
    (None: commits since only removed rows, so what is left stays valid), the version after
    which the rows checked were added (None: the whole table was) and the suite's digest."""
    from ..storage import commitlog, tables
    from . import quality
    from .runtime import Runtime

    output = Runtime(spark, warehouse).tables(p).output
    passed = [e for e in earlier if e.success and e.table_version is not None and e.table_version < version]
    base = max(passed, key=lambda e: e.table_version or 0, default=None)
    if base is None or base.table_version is None:
        added, since, digest = None, None, None
    else:
        since, digest = base.table_version, base.suite_digest
        added = commitlog.files_added(spark, output, since, version)
    if added == set():
        return None, since, digest
    label = f"{quality.WHOLE_TABLE}-after-v{since}"
    report, incremental = quality.validate_added(
        spark, p, tables.read(spark, output, version), added, digest, label, warehouse_root=warehouse
    )
    return report, since if incremental else None, report.digest


def _audited(p: Pipeline, run: BatchResult, version: int, earlier: list[Outcome]) -> Report | None:
    """The batch's own audit, when it is what ``_validate_since`` would find at ``version``: the
    audit checked the batch's final rows with the published rows they could duplicate, as of
    the table version that passed the same suite last, and the batch's publication is the one
    commit since (any other commit, before or after it, moves the version further)."""
    audit = run.audit
    if audit is None or audit.table_version is None or not p.emission.final or version != audit.table_version + 1:
        return None
    passed = any(
        e.success and e.table_version == audit.table_version and e.suite_digest == audit.report.digest for e in earlier
    )
    return audit.report if passed and audit.report.success else None


def _ran(run: BatchResult | ReplayResult | list[BatchResult]) -> tuple[str, str, BatchResult | None, tuple[str, ...]]:
    """The outcome's kind and name of ``run``, the batch the status names as the last run's (none
    for a replay) and a backfill's intervals."""
    from .replay import ReplayResult

    if isinstance(run, ReplayResult):
        return "replay", f"{run.first}..{run.last}", None, ()
    if isinstance(run, list):
        return "backfill", f"{run[0].batch_id}..{run[-1].batch_id}", run[-1], tuple(r.batch_id for r in run)
    return "batch", run.batch_id, run, ()


def after_run(
    spark: SparkSession,
    p: Pipeline,
    warehouse: str,
    run: BatchResult | ReplayResult | list[BatchResult],
    run_id: str | None = None,
) -> Outcome:
    """Validate the results table after ``run`` (a batch committed or found committed, a replay,
    or a backfill's batches) and leave the outcome for the quality-gate task of Airflow run ``run_id``.

    The table is not validated again when an earlier outcome (of a batch or a replay) passed on
    the very version it is at now: then nobody changed it since, and Great Expectations is not
    imported. Any other commit on it (a batch's rows, a replay, an edit by hand, maintenance)
    or a failed earlier validation makes this one validate.

    A batch's audit stands for the validation when its publication is the only commit since the
    table last passed (``_audited``): Great Expectations does not run a second time over the same rows.

    Then the pipeline's status, this outcome included, is left beside it (``status.save``) for the
    Airflow plugin, which reads it without Spark."""
    from ..storage import files, tables
    from . import status
    from .replay import ReplayResult
    from .runtime import Runtime

    kind, batch, one, covered = _ran(run)
    last = one or (run.batches[-1] if isinstance(run, ReplayResult) and run.batches else None)
    seq, stream_time = (last.seq, last.stream_time) if last else (None, None)
    version = tables.latest_version(spark, Runtime(spark, warehouse).tables(p).output)
    earlier = [found for k in KINDS if (found := read_in_job(spark, warehouse, p.name, k)) is not None]
    same = next((e for e in earlier if e.success and e.table_version == version), None)
    report, since, digest = None, None, same.suite_digest if same else None
    if version is not None and same is None:
        audited = _audited(p, one, version, earlier) if kind == "batch" and one is not None else None
        if audited is not None:
            report, since, digest = audited, version - 1, audited.digest
        else:
            report, since, digest = _validate_since(spark, p, warehouse, version, earlier)
    found = Outcome(
        kind=kind,
        pipeline=p.name,
        batch_id=batch,
        seq=seq,
        rows_published=sum(r.emitted for r in run) if isinstance(run, list) else run.emitted,
        stream_time=stream_time.isoformat() if stream_time else None,
        validated=report is not None,
        failures=tuple(c.describe() for c in report.failed_critical) if report else (),
        summary=report.summary() if report else "",
        docs=report.docs if report else None,
        table_version=version,
        run_id=run_id,
        since_version=since,
        suite_digest=digest,
        batches=covered,
    )
    files.put_text(spark, location(warehouse, p.name, kind), found.to_json())
    status.save(spark, warehouse, p.name, one)
    return found
