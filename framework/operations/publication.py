"""Publication: appending a committed attempt's staged rows to the results table.

An attempt stages its sink rows under ``_staging/<seq>-<attempt>`` and, before its commit
point, writes ``PUBLICATION`` there: what to publish. Once its ledger row is committed, whoever
finds the folder (the attempt itself, or the next run of any batch of the pipeline) publishes
it, once: Delta's transaction id skips a repeat, so publishing again, or beside another
publisher, changes nothing. The staged rows are removed before the marker, so a marker with
its staged rows missing means published. A replay's folder is published by
``publish_range``, replacing the range's rows in one commit. (The ledger, metrics and late
records need no publication: they are part of the commit point, ``state.commit``.)
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

from pyspark.sql import DataFrame, SparkSession

from ..definition.pipeline import Pipeline
from ..storage import files, sinks, tables, writes
from ..storage.ledger import LedgerRow
from .steps import Steps

PUBLICATION = "_publish.json"  # in a staging folder: what to publish once its attempt committed
REPLAYS = f"{writes.LEDGER_APP}.replay"  # Delta txnAppId of a replay's publications


@dataclass(frozen=True)
class Staged(tables.Tables):
    """A replay's tables: ``_state`` and the sink in the replay's staging folder, the buffer in
    place (read at recorded versions, like any attempt's); a MERGEd sink keeps its deletes as
    tombstones."""

    folder: str = ""

    @classmethod
    def of(cls, t: tables.Tables, p: Pipeline, folder: str) -> Staged:
        return cls(t.root, t.sink, tombstones=p.suppression is None, folder=folder)

    @property
    def state(self) -> str:
        return os.path.join(self.folder, "_state")

    @property
    def output(self) -> str:  # named as in the publication marker's list, whatever the sink's name
        return os.path.join(self.folder, "output")

    @property
    def staging(self) -> str:
        return os.path.join(self.folder, "_staging")


def mark(spark: SparkSession, folder: str, spec: dict) -> None:
    """Before an attempt's commit point, say in its staging ``folder`` what to publish once it
    committed: ``staged``, the names of the staged tables, ``schemas`` (of a batch's staged
    Parquet rows, by name), and for a replay its range."""
    files.put_text(spark, f"{folder}/{PUBLICATION}", json.dumps(spec))


def finish(steps: Steps, p: Pipeline, t: tables.Tables, last: LedgerRow | None) -> list[str]:
    """Publish committed batch ``last`` if it is still staged, and remove the staging
    folders of attempts that can no longer commit (an attempt of a committed sequence
    number that is not the committed one). Idempotent: safe to run again at any point, and
    beside another runner's ``finish``. Returns the staging folders left: attempts of later
    batches, maybe still running."""
    spark, left = steps.spark, []
    for name in files.list_names(spark, t.staging):
        seq, _, attempt = name.partition("-")
        folder = f"{t.staging}/{name}"
        spec = None
        if last is not None and attempt == last.attempt:
            spec = json.loads(files.get_text(spark, f"{folder}/{PUBLICATION}") or "null")
            if spec is not None and all(files.is_staged(spark, f"{folder}/{s}") for s in spec["staged"]):
                # a commit of another writer (OPTIMIZE, table properties) or of another publisher
                # of this batch may land meanwhile: publishing again skips what landed
                writes.retried(lambda: _publish(steps, p, t, folder, last, spec))
        elif last is None or not seq.isdigit() or int(seq) > last.seq:
            left.append(name)
            continue
        for staged in (spec or {}).get("staged", []):
            files.remove(spark, f"{folder}/{staged}")
        files.remove(spark, folder)
    return left


def _publish(steps: Steps, p: Pipeline, t: tables.Tables, folder: str, last: LedgerRow, spec: dict) -> None:
    """Publish a committed attempt's staged rows once (Delta skips a repeat)."""
    spark, tag = steps.spark, f"{writes.TAG}{p.name}.publish@{last.seq}:{last.attempt}"
    if spec["replay"]:
        publish_range(spark, p, t, folder, spec, tag)
        return
    if "output" in spec["staged"]:
        steps.step = "publishing results"
        sinks.publish(
            p,
            files.read_staged(spark, f"{folder}/output", spec.get("schemas", {}).get("output")),
            t.output,
            last.seq,
            tag,
            tombstones=t.tombstones,
        )


def publish_range(spark: SparkSession, p: Pipeline, t: tables.Tables, folder: str, spec: dict, tag: str) -> None:
    """Publish a committed replay's staged rows in one commit, skipped if this replay's
    publication landed already (Delta transaction id ``REPLAYS``, version = the replay's
    ledger fence): publishing again, or late beside another publisher, changes nothing."""
    staged = Staged.of(t, p, folder)
    once = {"txnAppId": REPLAYS, "txnVersion": str(spec["fence"])}
    sink = tables.read(spark, staged.output) if "output" in spec["staged"] else None
    if p.suppression is not None:
        first, last = _sql_string(spec["first_batch_id"]), _sql_string(spec["last_batch_id"])
        _replace(spark, sink, t.output, f"emitted_batch_id BETWEEN {first} AND {last}", tag, once)
    elif sink is not None:
        sinks.replace_all(p, sink, t.output, spec["output_base"], tag, once)


def _replace(spark: SparkSession, rows: DataFrame | None, target: str, where: str, tag: str, once: dict) -> None:
    """In one commit, replace the rows of ``target`` matching ``where`` by ``rows`` (None: by no rows)."""
    if rows is None:
        if not tables.exists(spark, target):
            return
        rows = spark.createDataFrame([], tables.read(spark, target).schema)
    tables.create(spark, target, rows.schema)
    writes.save(rows, target, tag, "overwrite", replaceWhere=where, **once)


def _sql_string(text: str) -> str:
    """``text`` as a Spark SQL string literal."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"
