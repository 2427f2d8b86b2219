"""Moving a pipeline written by the layout before ``_state`` into it, once.

That layout kept ``_ledger``, ``window_state``, ``metrics`` and ``late_records`` as Delta tables
of their own. The upgrade reads them as the last committed batch left them and writes
``_state`` in one commit that creates the table: the window state at the version that batch
recorded, every ledger row (each with its metrics: rows from before metrics moved into the
ledger take theirs from the ``metrics`` table), and the late records (those a batch committed
but had not yet published from its staging folder included). Creating a table is atomic, so
an upgrade killed half-way left no ``_state`` and runs again from the start; of two at once,
one creates it and the other finds it. The old tables are left as they were (no batch reads
them again; remove them once no older version of the framework needs them). A sink and a
rate-limiting buffer keep their tables.

Ledger rows keep their ``state_version`` only in ``_state``'s sense (the version a batch planned
from), so upgraded rows have none: a replay starts at the upgrade or later.
"""

from __future__ import annotations

import dataclasses
import json
import logging

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from ..definition.columns import BUCKET, LATE_BUCKET
from ..errors import FrameworkError
from . import entries, files, ledger, tables, writes

log = logging.getLogger("framework.upgrade")


def needed(spark: SparkSession, t: tables.Tables) -> bool:
    """Whether the pipeline at ``t`` is in the layout before ``_state``."""
    return not tables.exists(spark, t.state) and tables.exists(spark, t.legacy("_ledger"))


def upgrade(spark: SparkSession, name: str, t: tables.Tables) -> bool:
    """Create ``_state`` from the pipeline's tables of the layout before it (see the module
    docstring); False if there is nothing to upgrade."""
    if not needed(spark, t):
        return False
    rows = [ledger.LedgerRow.of(r) for r in tables.read(spark, t.legacy("_ledger")).collect()]
    committed = ledger.committed_rows(rows)
    last = committed[-1] if committed else None
    if any(r.status == ledger.Status.STARTED and r.seq == (last.seq + 1 if last else 1) for r in rows):
        raise FrameworkError(
            f"pipeline {name!r}: its ledger holds an unfinished attempt of a protocol two versions old (status "
            "'started'); finish it with the version that wrote it (re-run that batch), then upgrade"
        )
    late = _late_records(spark, t, last)
    late_schema = late.schema.simpleString() if late is not None else None
    recorded = _metrics(spark, t)
    upgraded = [
        dataclasses.replace(
            r,
            state_version=None,
            metrics=r.metrics if r.metrics is not None else recorded.get(r.seq),
            late_schema=late_schema,
        )
        for r in rows
    ]
    data = ledger.to_frame(spark, upgraded)
    if late is not None:
        data = data.unionByName(entries.to_rows(late, F.col("seq"), LATE_BUCKET), allowMissingColumns=True)
    if last is not None and last.state_version is not None:
        path = t.legacy("window_state")
        windows = tables.read(spark, path, writes.same_rows(spark, path, last.state_version))
        data = windows.unionByName(data, allowMissingColumns=True)
    try:
        data.write.format("delta").partitionBy(BUCKET).options(**tables.properties(t.state)).option(
            "userMetadata", f"{writes.TAG}{name}.upgrade"
        ).mode("errorifexists").save(t.state)
    except Exception:
        if not tables.exists(spark, t.state):  # not another upgrader's table: a real failure
            raise
        return False
    log.info("pipeline %s: upgraded to the _state table (%d ledger rows)", name, len(rows))
    return True


def _metrics(spark: SparkSession, t: tables.Tables) -> dict[int, str]:
    """Metrics rows of the ``metrics`` table as ledger rows keep them (JSON, stream time aside), by seq."""
    path = t.legacy("metrics")
    if not tables.exists(spark, path):
        return {}
    out = {}
    for row in tables.read(spark, path).collect():
        values = row.asDict()
        out[values["seq"]] = json.dumps(
            {k: v for k, v in values.items() if k not in ("pipeline", "batch_id", "seq", "stream_time")}
        )
    return out


def _late_records(spark: SparkSession, t: tables.Tables, last: ledger.LedgerRow | None) -> DataFrame | None:
    """The late records of the old table, and those the last committed batch staged and did not publish."""
    parts = []
    if tables.exists(spark, t.legacy("late_records")):
        parts.append(tables.read(spark, t.legacy("late_records")))
    if last is not None:
        staged = f"{t.staging}/{last.seq}-{last.attempt}/late_records"
        if files.is_staged(spark, staged):
            parts.append(files.read_staged(spark, staged))
    if not parts:
        return None
    late = parts[0]
    for more in parts[1:]:
        late = late.unionByName(more).dropDuplicates()
    return late
