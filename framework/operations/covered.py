"""The intervals a pipeline's jobs committed and whose results passed validation, with the landing
table's version they read: what lets an Airflow run of such an interval end at once, with no
Spark job (docs/operations.md#backfill).

A job that committed batches (one, or a backfill's) and found the results table valid adds their
ids to ``<warehouse>/<pipeline>/_gate/covered.json``, with the landing table's Delta version it
read them at. The pipeline DAG's first task (``covered_check``) reads that file and the landing
table's latest version without Spark, as the quality gate reads its outcome: if the run's batch
is there and nothing was written to the landing table since, a run of the job would only report
"already committed" and validate a table nobody changed, so the run ends there. Any other case
(another landing version, a batch not listed, a file that cannot be read) runs the job as always:
the file can only spare work, never decide a result.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING

from ..definition.names import GATE

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

_COMMIT = re.compile(r"(\d{20})\.json")  # a Delta commit file of a table's log


def location(warehouse: str, pipeline: str) -> str:
    return f"{warehouse.rstrip('/')}/{pipeline}/{GATE}/covered.json"


def record(spark: SparkSession, warehouse: str, pipeline: str, landing: str, version: int, ids: list[str]) -> None:
    """Add batches ``ids`` (committed, their results valid) read from landing table ``landing`` at
    Delta ``version``; batches recorded with another landing table or version are dropped: the
    file vouches only for what the current landing table holds."""
    from ..storage import files

    where = location(warehouse, pipeline)
    text = files.get_text(spark, where)
    known = json.loads(text) if text else {}
    same = known.get("landing") == landing and known.get("version") == version
    kept = set(known.get("batches", [])) if same else set()
    files.put_text(
        spark, where, json.dumps({"landing": landing, "version": version, "batches": sorted(kept | set(ids))})
    )


def covers(warehouse: str, pipeline: str, batch: str, landing: str) -> str | None:
    """Why batch ``batch`` needs no job (committed, valid, the landing table unchanged since), as
    a line for the task log; None when the job must run. Reads files only, as an Airflow worker can."""
    from .outcome import filesystem, read_text

    try:
        text = read_text(location(warehouse, pipeline))
        known = json.loads(text) if text else None
        if not known or known.get("landing") != landing or batch not in known.get("batches", []):
            return None
        from pyarrow.fs import FileSelector

        fs, log = filesystem(f"{landing.rstrip('/')}/_delta_log")
        names = [i.base_name for i in fs.get_file_info(FileSelector(log))]
        versions = [int(m.group(1)) for name in names if (m := _COMMIT.fullmatch(name))]
    except (OSError, ValueError, TypeError):  # unreadable: the job decides, as without the file
        return None
    if max(versions, default=-1) != known.get("version"):
        return None
    return (
        f"pipeline {pipeline!r}: batch {batch!r} is committed and its results passed validation, and the "
        f"landing table has not changed since (version {known['version']}): already committed, no Spark job"
    )
