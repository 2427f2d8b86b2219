"""Per-batch metrics with KIP-328's names (``-`` written ``_`` in column names).

One row per batch, kept in the batch's ledger row (``LedgerRow.metrics``, as JSON) and read by
``bookkeeping.read_metrics``; ``KIP_NAMES`` maps each column to its KIP name.
"""

from __future__ import annotations

import logging

log = logging.getLogger("framework.metrics")

COLUMNS = [
    ("records_in", "long"),
    ("late_record_drop_total", "long"),
    ("late_records", "long"),
    ("rejected_records_total", "long"),
    ("record_lateness_avg", "double"),
    ("record_lateness_max", "double"),
    ("suppression_buffer_count_current", "long"),
    ("suppression_buffer_count_max", "long"),
    ("suppression_buffer_size_current", "long"),
    ("suppression_buffer_size_max", "long"),
    ("suppression_emit_total", "long"),  # windows (or entries) the suppression emitted, before any filter
    ("rows_published", "long"),  # not KIP-328's: the rows the results table received, after the pipeline's steps
    ("windows_open", "long"),
    ("windows_closed", "long"),
    ("stream_time", "timestamp"),
    ("batch_duration_ms", "long"),
]
KIP_NAMES = {c: c.replace("_", "-") for c, _ in COLUMNS}
SCHEMA = "pipeline string, batch_id string, seq long, " + ", ".join(f"{c} {t}" for c, t in COLUMNS)
#: The ledger row's ``metrics`` JSON (stream time is a ledger column of its own).
JSON_SCHEMA = ", ".join(f"{c} {t}" for c, t in COLUMNS if c != "stream_time")


def report(pipeline: str, batch_id: str, seq: int, values: dict) -> None:
    """Log a committed batch's metrics, KIP names and values (missing ones None)."""
    log.info(
        "pipeline=%s batch=%s seq=%s %s",
        pipeline,
        batch_id,
        seq,
        " ".join(f"{KIP_NAMES[c]}={values.get(c)}" for c, _ in COLUMNS),
    )
