"""Validating a pipeline's committed results table: the Airflow quality-gate task and
``finalresults validate``.

Each batch already audits its own rows before publishing them (``framework.operations.quality.gate``);
this checks the whole table as readers see it, with the pipeline's Great Expectations suite
(``expectations/``), and records the outcome in ``<warehouse>/quality_results`` and Data Docs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..definition.pipeline import Pipeline
from ..errors import FrameworkError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from .quality import Report


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
