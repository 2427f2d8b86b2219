"""Where each version of a pipeline keeps its tables, and the switches table that says which
version is the pipeline (docs/operations.md#changing-a-pipeline).

Version 1 keeps the layout every pipeline had before versions: ``<warehouse>/<pipeline>/``. A
later version ``k`` keeps the same tables under ``<warehouse>/<pipeline>/_versions/v<k>/``, so
building it never touches the running version's. ``<warehouse>/<pipeline>/_versions/switches``
is a Delta table with one row per switch (``Switch``); the last row's version is the
pipeline's, and a pipeline with no row is at version 1. Each row is appended with Delta
transaction id (``SWITCH_APP``, its ``seq``): two switches racing for the same place in the
table cannot both land, and a switch re-run after a crash cannot land twice.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from pyspark.sql import SparkSession

from ..execution.streamtime import to_datetime
from . import files, tables, writes

FOLDER = "_versions"
SWITCH_APP = "finalresults-switch"  # Delta txnAppId of the switches table's rows
SCHEMA = "seq long, version long, previous long, since long, sink string, at timestamp"


def root(warehouse: str, name: str, version: int) -> str:
    """The folder of version ``version`` of pipeline ``name``'s tables."""
    base = f"{warehouse.rstrip('/')}/{name}"
    return base if version == 1 else f"{base}/{FOLDER}/v{version}"


def switches_path(warehouse: str, name: str) -> str:
    return f"{warehouse.rstrip('/')}/{name}/{FOLDER}/switches"


def _compared_path(warehouse: str, name: str) -> str:
    return f"{warehouse.rstrip('/')}/{name}/{FOLDER}/compared.txt"


def keep_comparison(spark: SparkSession, warehouse: str, name: str, text: str) -> None:
    """Keep the last comparison of two versions, as ``versions compare`` printed it, for the
    status (and the Airflow plugin's page, which reads the status) to show."""
    files.put_text(spark, _compared_path(warehouse, name), text)


def last_comparison(spark: SparkSession, warehouse: str, name: str) -> str | None:
    return files.get_text(spark, _compared_path(warehouse, name))


@dataclass(frozen=True)
class Switch:
    """One switch: from ``previous`` to ``version``, whose batches are the pipeline's from the
    interval starting at ``since`` (epoch ms; None when neither had run an interval)."""

    seq: int
    version: int
    previous: int
    since: int | None
    sink: str
    at: dt.datetime

    def describe(self) -> str:
        since = to_datetime(self.since) if self.since is not None else "its first interval"
        return f"switch {self.seq}: version {self.previous} -> {self.version} from {since} at {self.at:%Y-%m-%d %H:%M}"


def switches(spark: SparkSession, warehouse: str, name: str) -> list[Switch]:
    """The pipeline's switches, in order; empty if it never switched."""
    path = switches_path(warehouse, name)
    if not tables.exists(spark, path):
        return []
    return sorted((Switch(**r.asDict()) for r in tables.read(spark, path).collect()), key=lambda s: s.seq)


def current(spark: SparkSession, warehouse: str, name: str) -> int:
    """The version that is the pipeline: the last switch's, else 1."""
    done = switches(spark, warehouse, name)
    return done[-1].version if done else 1


def record(spark: SparkSession, warehouse: str, name: str, switch: Switch) -> Switch:
    """Append ``switch`` unless a switch holds its ``seq`` already; the switch at that ``seq``
    (``switch``, or the one that took the place first: the caller compares)."""
    path = switches_path(warehouse, name)
    row = spark.createDataFrame([switch.__dict__], SCHEMA)
    tables.create(spark, path, row.schema)
    tag = f"{writes.TAG}{name}:switch:{switch.seq}"
    try:
        writes.save(row, path, tag, txnAppId=SWITCH_APP, txnVersion=str(switch.seq))
    except Exception as e:
        if not writes.lost_race(e):  # another switch took the transaction version: read it below
            raise
    return next(s for s in switches(spark, warehouse, name) if s.seq == switch.seq)
