"""A pipeline's Delta tables as tables of a catalog schema, so ``SELECT * FROM lake.user_alert_windows``
works, while the data stays under the warehouse path (docs/design.md#catalog-schema).

The data stays where the runtime keeps it, under the warehouse; the schema holds *external*
tables pointing there. The results table is named after the sink, the others
``<pipeline>_<table>`` (``user_alerts_ledger``, ``user_alerts_metrics``, ...). Registering is
idempotent; a name already registered for another location is refused, never repointed.
Which catalog keeps them is the session's: Spark's in-memory one (tables live as long as the
session), an embedded Derby metastore (``spark_session(metastore=...)``, local use) or the
deployment's Hive, Glue or Unity metastore.
"""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING, Collection
from urllib.parse import urlparse

from delta.tables import DeltaTable

from ..errors import FrameworkError
from . import files, locks, tables

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from ..definition.pipeline import Pipeline

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")


def check_schema(schema: str) -> str:
    """``schema`` if it is a plain identifier (it is put into SQL text); FrameworkError otherwise."""
    if not isinstance(schema, str) or not _IDENTIFIER.fullmatch(schema):
        raise FrameworkError(
            f"catalog schema {schema!r} must be an identifier ([A-Za-z_][A-Za-z0-9_]*, at most 128 characters)"
        )
    return schema


def table_names(p: Pipeline, layout: tables.Tables) -> list[tuple[str, str]]:
    """(catalog table name, path) of each table ``p`` may have."""
    results = p.sink or f"{p.name}_output"
    named = [
        (results, layout.output),
        (f"{p.name}_ledger", layout.ledger),
        (f"{p.name}_window_state", layout.state),
        (f"{p.name}_late_records", layout.late),
        (f"{p.name}_rejected_records", layout.rejected),
        (f"{p.name}_metrics", layout.metrics),
    ]
    if p.rate_limited:
        named.append(
            (f"{p.name}_{os.path.basename(layout.buffer(p.suppression.name))}", layout.buffer(p.suppression.name))
        )
    return named


def register(
    spark: SparkSession, schema: str, p: Pipeline, layout: tables.Tables, skip: Collection[str] = ()
) -> list[str]:
    """Register the tables of ``p`` that exist as external tables of ``schema``; the names
    (``schema.table``) registered now or before. Names in ``skip`` are known to be registered;
    any other name the schema holds for another location is refused (FrameworkError)."""
    todo = [(name, path) for name, path in table_names(p, layout) if f"{schema}.{name}" not in skip]
    if todo:
        spark.sql(f"CREATE SCHEMA IF NOT EXISTS `{check_schema(schema)}`")
    registered = []
    for name, path in ((name, _absolute(spark, path)) for name, path in todo):
        qualified = f"`{schema}`.`{name}`"
        if spark.catalog.tableExists(f"{schema}.{name}"):
            location = spark.sql(f"DESCRIBE DETAIL {qualified}").collect()[0]["location"]
            if not _same_location(location, path):
                raise FrameworkError(
                    f"pipeline {p.name!r}: catalog table {schema}.{name} already exists at "
                    f"{location}, not at {path}: pick another schema, or drop that table first"
                )
        elif tables.exists(spark, path):
            DeltaTable.createIfNotExists(spark).tableName(qualified).location(path).execute()
        else:
            continue  # not created yet: registered by a later batch
        registered.append(f"{schema}.{name}")
    return registered


def _absolute(spark: SparkSession, path: str) -> str:
    """A catalog resolves a relative location against its own warehouse folder; Delta wrote the
    table relative to the JVM's working folder, so that is where the location must point."""
    if urlparse(path).scheme:
        return path
    fs, qualified = files.fs_path(spark, path)
    return fs.makeQualified(qualified).toUri().getPath()


def _same_location(a: str, b: str) -> bool:
    def normal(location: str) -> str:
        return locks.local_path(location) or location.rstrip("/")

    return normal(a) == normal(b)
