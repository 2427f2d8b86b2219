"""The ledger: one row per batch, and the commit point.

The ledger row is appended with Delta's transaction id (``txnAppId``/``txnVersion`` = the
ledger's *fence* + 1, see ``commit_point``): a compare-and-append that Delta decides, so of two
attempts that read the same ledger, at most one commits, on any store. Maintenance commits set
no transaction id, so they never fence a batch out.
"""
from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession

from .tables import delta_snapshot
from .writes import LEDGER_APP, history_since, save, version_of

LEDGER_SCHEMA = (
    "seq long, batch_id string, status string, attempt string, fingerprint string, records_in long, "
    "stream_time_before long, stream_time long, state_version long, records_version long, "
    "output_version long, input_schema string, definition string, at timestamp, buffer_version long, "
    "windows_open long, output_base long, metrics string")


def ledger_head(spark: SparkSession, path: str) -> tuple[str, int, int]:
    """The ledger's id, current version and *fence*: the last transaction version a batch or
    replay committed with (``commit_point``), 0 before the first, from one snapshot."""
    snapshot = delta_snapshot(spark, path)
    recorded = snapshot.transactions().get(LEDGER_APP)
    return snapshot.metadata().id(), snapshot.version(), int(recorded.get()) if recorded.isDefined() else 0


def commit_point(df: DataFrame, path: str, read_version: int, fence: int, tag: str, mode: str = "append",
                 **options: str) -> int | None:
    """Write ``df`` to the ledger at ``path`` in one commit, unless another batch or replay
    committed to it since this attempt read it (at ``read_version``, with ``fence``, see
    ``ledger_head``). Returns the version this commit made, or None if it was fenced out.

    Delta keeps the last ``txnVersion`` of ``LEDGER_APP`` in the table's log: a write whose
    version is not above it is skipped, and of two racing ones the second fails. Every ledger
    write uses the fence it read + 1, so this is a compare-and-set decided by Delta; maintenance
    commits carry no transaction version and leave the fence as it was."""
    save(df, path, tag, mode, **options, txnAppId=LEDGER_APP, txnVersion=str(fence + 1))
    return version_of(history_since(df.sparkSession, path, read_version), tag)

