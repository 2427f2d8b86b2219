"""The invariants every final-results table must satisfy (SPEC 7), checked with Spark.

This is the quality gate the Airflow DAGs and ``finalresults validate`` run until the Great
Expectations suites exist; it reads the committed table itself, so it catches what a bug in any
batch left there, not only in the last one:

- one row per key and window (``until_window_closes`` tables; refined tables MERGE on it too),
- no null keys or window bounds,
- ``window_end > window_start`` (``>=`` for sliding and session windows, reported inclusive),
- every row emitted after its window closed: ``emitted_stream_time >= close time``.

A check whose columns a ``select()`` step removed is reported as skipped, not passed.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import reduce
from typing import TYPE_CHECKING

from .errors import FrameworkError, QualityGateError
from .topology import Pipeline
from .windows import SessionWindows, SlidingWindows, TimeWindows

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


@dataclass(frozen=True)
class Check:
    """One invariant: how many rows break it (None when it could not be checked)."""

    name: str
    failures: int | None
    why_skipped: str = ""

    @property
    def ok(self) -> bool:
        return not self.failures

    def line(self) -> str:
        if self.failures is None:
            return f"SKIP  {self.name} ({self.why_skipped})"
        return f"{'PASS' if self.ok else 'FAIL'}  {self.name}: {self.failures} row(s) in violation"


@dataclass(frozen=True)
class Report:
    """The checks of one table."""

    pipeline: str
    table: str
    rows: int
    checks: tuple[Check, ...]

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    def text(self) -> str:
        head = f"{self.pipeline}: {self.rows} row(s) in {self.table}"
        if not self.checks:
            return f"{head} (no final result emitted yet: nothing to check)"
        return "\n".join([head, *("  " + c.line() for c in self.checks)])

    def raise_for_failures(self) -> None:
        """Raise QualityGateError naming every failed check, so the batch's consumers stop here."""
        failed = [c for c in self.checks if not c.ok]
        if failed:
            raise QualityGateError(
                f"pipeline {self.pipeline!r}: quality gate failed on {self.table}: "
                + "; ".join(f"{c.name} ({c.failures} rows)" for c in failed)
                + ". Fix the table before anyone downstream reads it.")


def close_offset_ms(p: Pipeline) -> int:
    """Close time minus the reported ``window_end`` (SPEC 2: end exclusive for time windows)."""
    w = p.windows
    if isinstance(w, TimeWindows):
        return w.grace_ms
    if isinstance(w, SlidingWindows):
        return 1 + w.grace_ms
    if isinstance(w, SessionWindows):
        return 1 + w.gap_ms + w.grace_ms
    raise ValueError(f"pipeline {p.name!r} has no windows")


def check_table(df: DataFrame, p: Pipeline) -> tuple[int, tuple[Check, ...]]:
    """Row count and checks of a results table ``df`` of pipeline ``p`` (two Spark jobs)."""
    from pyspark.sql import functions as F

    columns = set(df.columns)
    bounds = ["window_start", "window_end"] if p.windows is not None else []
    ident = [*p.keys, *bounds]
    missing = [c for c in ident if c not in columns]
    dropped = f"columns {missing} removed by select()"

    def count(condition):
        return F.sum(F.when(condition, 1).otherwise(0))

    measures = {"rows": F.count(F.lit(1))}
    if not missing:
        measures["nulls"] = count(reduce(lambda a, b: a | b, [F.col(c).isNull() for c in ident]))
    if p.windows is not None and not set(bounds) - columns:
        end, start = F.col("window_end"), F.col("window_start")
        measures["bounds"] = count(end <= start if isinstance(p.windows, TimeWindows) else end < start)
        if p.suppressed_final:
            emitted, closes = F.col("emitted_stream_time"), F.unix_millis(end) + close_offset_ms(p)
            measures["early"] = count(emitted.isNull() | (F.unix_millis(emitted) < closes))
    row = df.agg(*[v.alias(k) for k, v in measures.items()]).collect()[0].asDict()
    duplicates = None if missing else (df.groupBy(*ident).count().filter("count > 1")
                                       .agg(F.sum(F.col("count") - 1)).collect()[0][0] or 0)

    def measured(key: str) -> int | None:
        return int(row[key] or 0) if key in row else None

    windowed = "(key, window)" if p.windows is not None else "key"
    order = ">" if isinstance(p.windows, TimeWindows) else ">="
    checks = [Check(f"unique {windowed}", duplicates, dropped),
              Check(f"no null {'keys or bounds' if bounds else 'keys'}", measured("nulls"), dropped)]
    if p.windows is not None:
        checks.append(Check(f"window_end {order} window_start", measured("bounds"), dropped))
        if p.suppressed_final:
            checks.append(Check("emitted_stream_time >= close time", measured("early"), dropped))
    return int(row["rows"]), tuple(checks)


def validate(spark: SparkSession, p: Pipeline, warehouse: str) -> Report:
    """Check ``p``'s committed results under ``warehouse`` (``Report.raise_for_failures`` gates).

    Committed batches that emitted nothing yet (no window closed) leave nothing to check: that is
    a healthy pipeline, not a failure. No committed batch at all is an error.
    """
    from pyspark.sql import functions as F

    from . import state
    from .runtime import Runtime

    rt = Runtime(spark, warehouse)
    table = rt.tables(p).output
    last = (rt.ledger(p).filter("status = 'committed'").orderBy(F.desc("seq")).limit(1).collect()
            if state.exists(spark, rt.tables(p).ledger) else [])
    if not last:
        raise FrameworkError(f"pipeline {p.name!r}: no committed batch under {warehouse}: nothing to validate")
    if last[0].output_version is None:
        return Report(p.name, table, 0, ())
    rows, checks = check_table(rt.read_output(p), p)
    return Report(p.name, table, rows, checks)
