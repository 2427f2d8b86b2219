"""What an operator asks first: where is this pipeline, and is it healthy?

Read from the ledger (the commit point) and the metrics table, by path, so ``status`` works for
any pipeline folder in a warehouse without its job module.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..definition.pipeline import Pipeline
from ..execution.streamtime import to_datetime
from ..storage.tables import Tables

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def table_paths(p: Pipeline, warehouse: str) -> list[tuple[str, str]]:
    """(label, path) of each Delta table of ``p`` under ``warehouse``, as the runtime lays them out."""
    t = Tables(f"{warehouse.rstrip('/')}/{p.name}", p.sink or "output")
    return [("results", t.output), ("window state, ledger, metrics, late records", t.state)]


def _time(ms: int | None) -> str:
    return "none yet" if ms is None else str(to_datetime(ms))


def pipeline_status(spark: SparkSession, name: str, root: str) -> str:
    """A few lines on pipeline ``name`` stored at ``root``: last batch, stream time, open windows."""
    from pyspark.sql import functions as F

    from ..storage import bookkeeping, files

    t = Tables(root, "output")
    if not bookkeeping.has_batches(spark, root):
        return f"{name}  ({root})\n  no batch has run yet"
    b = bookkeeping.last_committed(spark, root)
    seq = b.seq if b else 0
    staged = [name for name in files.list_names(spark, t.staging) if b and name.endswith(f"-{b.attempt}")]
    lines = [f"{name}  ({root})"]
    if b:
        lines += [
            f"  last batch     {b.batch_id} (seq {b.seq}), committed at {b.at:%Y-%m-%d %H:%M:%S} UTC",
            f"  stream time    {_time(b.stream_time)}",
        ]
        metrics = bookkeeping.read_metrics(spark, root)
        rows = metrics.filter(F.col("seq") == seq).collect() if metrics is not None else []
        if rows:
            totals = metrics.agg(F.sum("records_in"), F.sum("suppression_emit_total"), F.sum("late_records")).collect()[
                0
            ]
            m = rows[0]
            rejected = m.asDict().get("rejected_records_total")  # None in metrics from before quarantine
            lines += [
                f"  open windows   {m.windows_open}",
                f"  last batch     records in {m.records_in}{f' ({rejected} rejected)' if rejected else ''}, "
                f"emitted {m.suppression_emit_total}, "
                f"late {m.late_records}, dropped updates {m.late_record_drop_total}, "
                f"{m.batch_duration_ms} ms",
                f"  all batches    records in {totals[0]}, emitted {totals[1]}, late {totals[2]}",
            ]
    else:
        lines.append("  no batch committed yet")
    if staged:
        lines.append(
            f"  UNPUBLISHED    batch {b.batch_id} (seq {seq}) committed; its results are staged and "
            "are published by the next run of any batch of this pipeline"
        )
    return "\n".join(lines)
