"""A pipeline's Delta tables as tables of a catalog schema, so ``SELECT * FROM lake.user_alert_windows``
works, while the data stays under the warehouse path (docs/design.md#catalog-schema).

The data stays where the runtime keeps it, under the warehouse; the schema holds *external*
tables pointing there: the results table, named after the sink, ``<pipeline>_state`` and a
rate-limiting buffer ``<pipeline>_buffer_<name>``. What ``_state`` holds is read through
views named as users know them: ``<pipeline>_window_state``, ``<pipeline>_ledger``,
``<pipeline>_metrics``, ``<pipeline>_rejected_records`` and, once a batch kept one,
``<pipeline>_late_records`` (the queries of ``framework.storage.bookkeeping``, written in SQL).
Registering is idempotent; a name already registered for another location is refused, never
repointed (an external table of the layout before ``_state``, at its old place in the
pipeline's folder, is replaced by its view).
Which catalog keeps them is the session's: Spark's in-memory one (tables live as long as the
session), an embedded Derby metastore (``spark_session(metastore=...)``, local use) or the
deployment's Hive, Glue or Unity metastore.
"""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING, Callable, Collection
from urllib.parse import urlparse

from ..definition.columns import BUCKET, ENTRY, LATE_BUCKET, LEDGER_BUCKET, REJECTED_BUCKET, SEQ
from ..errors import FrameworkError
from . import backend, bookkeeping, entries, ledger, locks, metrics, state, tables

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
    named = [(p.sink or f"{p.name}_output", layout.output), (f"{p.name}_state", layout.state)]
    buffer = state.buffer_path(layout, p)
    if buffer is not None:
        named.append((f"{p.name}_{os.path.basename(buffer)}", buffer))
    return named


def view_queries(schema: str, p: Pipeline, late_schema: str | None) -> list[tuple[str, str]]:
    """(view name, query) of each view over ``p``'s ``_state`` table registered in ``schema``;
    the late records' once a batch kept one (``late_schema``: theirs, as the ledger records it)."""
    state, ledger_view = f"`{schema}`.`{p.name}_state`", f"`{schema}`.`{p.name}_ledger`"
    metrics_columns = ", ".join(
        "timestamp_millis(stream_time) AS stream_time" if name == "stream_time" else f"m.{name}"
        for name, _ in metrics.COLUMNS
    )
    views = [
        (f"{p.name}_rejected_records", entries.query(state, REJECTED_BUCKET, bookkeeping.REJECTED_SCHEMA)),
        (f"{p.name}_window_state", f"SELECT * EXCEPT ({SEQ}, {ENTRY}) FROM {state} WHERE {BUCKET} >= 0"),
        (f"{p.name}_ledger", entries.query(state, LEDGER_BUCKET, ledger.LEDGER_SCHEMA)),
        (
            f"{p.name}_metrics",
            f"SELECT '{p.name}' AS pipeline, batch_id, seq, {metrics_columns} FROM (SELECT batch_id, seq, "
            f"stream_time, from_json(metrics, '{metrics.JSON_SCHEMA}') AS m FROM {ledger_view} "
            "WHERE status = 'committed')",
        ),
    ]
    if late_schema is not None:
        views.append((f"{p.name}_late_records", entries.query(state, LATE_BUCKET, late_schema)))
    return views


def register(
    spark: SparkSession,
    schema: str,
    p: Pipeline,
    layout: tables.Tables,
    skip: Collection[str] = (),
    late_schema: Callable[[], str | None] | None = None,
) -> list[str]:
    """Register the tables of ``p`` that exist as external tables of ``schema``, and the views
    over its ``_state``; the names (``schema.name``) registered now or before. Names in
    ``skip`` are known to be registered; any other name the schema holds for another location
    is refused (FrameworkError). ``late_schema`` gives the late records' schema (a caller that
    knows the ledger's rows); by default it is read from the ledger, while their view is not
    registered."""
    todo = [(name, path) for name, path in table_names(p, layout) if f"{schema}.{name}" not in skip]
    if todo:
        spark.sql(f"CREATE SCHEMA IF NOT EXISTS `{check_schema(schema)}`")
    registered = []
    for name, path in ((name, _absolute(spark, path)) for name, path in todo):
        qualified = f"`{schema}`.`{name}`"
        if spark.catalog.tableExists(f"{schema}.{name}"):
            _check_location(spark, p, schema, name, path)
        elif tables.exists(spark, path):
            spark.sql(f"CREATE TABLE IF NOT EXISTS {qualified} USING delta LOCATION {tables.literal(path)}")
        else:
            continue  # not created yet: registered by a later batch
        registered.append(f"{schema}.{name}")
    if f"{schema}.{p.name}_state" not in (*skip, *registered):
        return registered
    late = None
    if f"{schema}.{p.name}_late_records" not in skip:
        late = late_schema() if late_schema else bookkeeping.late_schema(tables.read(spark, layout.state))
    for name, query in view_queries(schema, p, late):
        if f"{schema}.{name}" in skip:
            registered.append(f"{schema}.{name}")
            continue
        if spark.catalog.tableExists(f"{schema}.{name}") and not _is_view(spark, schema, name):
            _check_location(spark, p, schema, name, _absolute(spark, layout.legacy(_LEGACY[name[len(p.name) + 1 :]])))
            spark.sql(f"DROP TABLE `{schema}`.`{name}`")  # external: the files stay
        spark.sql(f"CREATE OR REPLACE VIEW `{schema}`.`{name}` AS {query}")
        registered.append(f"{schema}.{name}")
    return registered


def point(spark: SparkSession, schema: str, p: Pipeline, layout: tables.Tables) -> None:
    """Point the names of ``schema`` that name the pipeline's tables at those of ``layout``
    (the version a switch made the pipeline's), each in one catalog change, so a reader of a
    name reads the old table or the new one; ``register`` then adds what is missing and
    re-creates the views. Delta's own check that a moved table keeps its schema is bypassed: the
    switch checked the results' columns (``operations.versions.check_columns``)."""
    for name, path in table_names(p, layout):
        path = _absolute(spark, path)
        if not spark.catalog.tableExists(f"{schema}.{name}") or not tables.exists(spark, path):
            continue
        location = spark.sql(f"DESCRIBE DETAIL `{schema}`.`{name}`").collect()[0]["location"]
        if not _same_location(location, path):
            with locks.session_conf(spark, {"spark.databricks.delta.alterLocation.bypassSchemaCheck": "true"}):
                spark.sql(f"ALTER TABLE `{schema}`.`{name}` SET LOCATION {tables.literal(path)}")


_LEGACY = {"window_state": "window_state", "ledger": "_ledger", "metrics": "metrics", "late_records": "late_records"}


def _is_view(spark: SparkSession, schema: str, name: str) -> bool:
    return spark.catalog.getTable(f"{schema}.{name}").tableType == "VIEW"


def _check_location(spark: SparkSession, p: Pipeline, schema: str, name: str, path: str) -> None:
    """Refuse catalog table ``schema.name`` unless it is the table at ``path``."""
    location = spark.sql(f"DESCRIBE DETAIL `{schema}`.`{name}`").collect()[0]["location"]
    if not _same_location(location, path):
        raise FrameworkError(
            f"pipeline {p.name!r}: catalog table {schema}.{name} already exists at "
            f"{location}, not at {path}: pick another schema, or drop that table first"
        )


def _absolute(spark: SparkSession, path: str) -> str:
    """A catalog resolves a relative location against its own warehouse folder; Delta wrote the
    table relative to the JVM's working folder, so that is where the location must point."""
    if urlparse(path).scheme:
        return path
    return backend.of(spark).qualified(path)


def _same_location(a: str, b: str) -> bool:
    def normal(location: str) -> str:
        return locks.local_path(location) or location.rstrip("/")

    return normal(a) == normal(b)
