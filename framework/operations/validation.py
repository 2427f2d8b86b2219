"""Validating a pipeline's committed results table: after each job's run (for the Airflow
quality-gate task) and ``finalresults validate``.

Each batch already audits its own rows before publishing them (``framework.operations.quality.gate``);
this checks the whole table as readers see it, with the pipeline's Great Expectations suite
(``expectations/``), and records the outcome in ``<warehouse>/quality_results`` and Data Docs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..definition.pipeline import Pipeline
from ..errors import FrameworkError
from .outcome import Outcome, location

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
    from ..storage import ledger, tables
    from . import quality
    from .runtime import Runtime

    rt = Runtime(spark, warehouse)
    if ledger.last_committed(spark, rt.tables(p).ledger) is None:
        raise FrameworkError(f"pipeline {p.name!r}: no committed batch under {warehouse}: nothing to validate")
    if not tables.exists(spark, rt.tables(p).output):
        return None
    return quality.validate_table(spark, p, rt.read_output(p), warehouse_root=warehouse)


def after_run(spark: SparkSession, p: Pipeline, warehouse: str, run: BatchResult | ReplayResult) -> Outcome:
    """Validate the results table if ``run`` (a batch committed or found committed, or a
    replay) published rows, and leave the outcome for the quality-gate task (``outcome``).

    A run that published nothing left the table as the previous run's gate found it, so it is
    not validated again (and Great Expectations is not imported)."""
    from ..storage import files
    from .replay import ReplayResult

    if isinstance(run, ReplayResult):
        kind, batch, last = "replay", f"{run.first}..{run.last}", (run.batches[-1] if run.batches else None)
        seq, stream_time = (last.seq, last.stream_time) if last else (None, None)
    else:
        kind, batch, seq, stream_time = "batch", run.batch_id, run.seq, run.stream_time
    report = validate_results(spark, p, warehouse) if run.emitted else None
    found = Outcome(
        kind=kind,
        pipeline=p.name,
        batch_id=batch,
        seq=seq,
        rows_published=run.emitted,
        stream_time=stream_time.isoformat() if stream_time else None,
        validated=report is not None,
        failures=tuple(c.describe() for c in report.failed_critical) if report else (),
        summary=report.summary() if report else "",
        docs=report.docs if report else None,
    )
    files.put_text(spark, location(warehouse, p.name, kind), found.to_json())
    return found
