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

import dataclasses
import json
import os
from dataclasses import dataclass, field

from pyspark.sql import DataFrame, SparkSession

from ..definition.pipeline import Pipeline
from ..storage import files, sinks, tables, writes
from ..storage.ledger import LedgerRow
from .steps import Steps

PUBLICATION = "publish.json"  # in a staging folder: what to publish once its attempt committed
# its name in folders that earlier versions staged: hidden from Spark Connect's reads, still read
# here, so that a batch committed before an upgrade is published after it
PUBLICATION_BEFORE = "_publish.json"
REPLAYS = f"{writes.LEDGER_APP}.replay"  # Delta txnAppId of a replay's publications


@dataclass(frozen=True)
class Staged(tables.Tables):
    """A replay's tables: ``_state`` and the sink in the replay's staging folder, the buffer in
    place (read at recorded versions, like any attempt's); a MERGEd sink keeps its deletes as
    tombstones."""

    folder: str = ""

    @classmethod
    def of(cls, t: tables.Tables, p: Pipeline, folder: str) -> Staged:
        return cls(t.root, t.sink, tombstones=not p.emission.appended, folder=folder)

    @property
    def state(self) -> str:
        return os.path.join(self.folder, "_state")

    @property
    def output(self) -> str:  # named as in the publication marker's list, whatever the sink's name
        return os.path.join(self.folder, "output")

    @property
    def staging(self) -> str:
        return os.path.join(self.folder, "_staging")


@dataclass(frozen=True)
class ReplayedRange:
    """A replay's part of a ``Manifest``: the range it replaces in the sink, and its commit
    point's fence, which makes its publication once (Delta transaction id ``REPLAYS``)."""

    first_batch_id: str
    last_batch_id: str
    output_base: int | None  # a sink without suppression: its version before the range
    fence: int


@dataclass(frozen=True)
class Manifest:
    """What a staging folder publishes once its attempt committed, written there (as
    ``PUBLICATION``) before the commit point: the names of the staged tables, the schemas of a
    batch's staged Parquet rows by name (manifests of earlier versions have none: publication
    reads the files' own), and for a replay its range. Stored flat, as earlier versions wrote it."""

    staged: tuple[str, ...]
    schemas: dict[str, str] = field(default_factory=dict)
    replay: ReplayedRange | None = None

    def to_json(self) -> str:
        flat = {"replay": self.replay is not None, "staged": list(self.staged), "schemas": self.schemas}
        return json.dumps({**flat, **(dataclasses.asdict(self.replay) if self.replay else {})})

    @classmethod
    def from_json(cls, text: str) -> Manifest:
        flat = json.loads(text)
        replay = None
        if flat["replay"]:
            replay = ReplayedRange(*(flat[f.name] for f in dataclasses.fields(ReplayedRange)))
        return cls(tuple(flat["staged"]), flat.get("schemas", {}), replay)


def mark(spark: SparkSession, folder: str, manifest: Manifest) -> None:
    """Before an attempt's commit point, say in its staging ``folder`` what to publish once it
    committed."""
    files.put_text(spark, f"{folder}/{PUBLICATION}", manifest.to_json())


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
        manifest = None
        if last is not None and attempt == last.attempt:
            text = files.get_text(spark, f"{folder}/{PUBLICATION}", f"{folder}/{PUBLICATION_BEFORE}")
            manifest = Manifest.from_json(text) if text else None
            if manifest is not None and all(files.is_staged(spark, f"{folder}/{s}") for s in manifest.staged):
                # a commit of another writer (OPTIMIZE, table properties) or of another publisher
                # of this batch may land meanwhile: publishing again skips what landed
                writes.retried(lambda: _publish(steps, p, t, folder, last, manifest))
        elif last is None or not seq.isdigit() or int(seq) > last.seq:
            left.append(name)
            continue
        for staged in manifest.staged if manifest else ():
            files.remove(spark, f"{folder}/{staged}")
        files.remove(spark, folder)
    return left


def _publish(steps: Steps, p: Pipeline, t: tables.Tables, folder: str, last: LedgerRow, manifest: Manifest) -> None:
    """Publish a committed attempt's staged rows once (Delta skips a repeat)."""
    spark, tag = steps.spark, f"{writes.TAG}{p.name}.publish@{last.seq}:{last.attempt}"
    if manifest.replay is not None:
        publish_range(spark, p, t, folder, manifest, tag)
        return
    if "output" in manifest.staged:
        steps.step = "publishing results"
        sinks.publish(
            p,
            files.read_staged(spark, f"{folder}/output", manifest.schemas.get("output")),
            t.output,
            last.seq,
            tag,
            tombstones=t.tombstones,
        )


def publish_range(
    spark: SparkSession, p: Pipeline, t: tables.Tables, folder: str, manifest: Manifest, tag: str
) -> None:
    """Publish a committed replay's staged rows in one commit, skipped if this replay's
    publication landed already (Delta transaction id ``REPLAYS``, version = the replay's
    ledger fence): publishing again, or late beside another publisher, changes nothing."""
    replay = manifest.replay
    assert replay is not None  # a replay's manifest
    staged = Staged.of(t, p, folder)
    once = {"txnAppId": REPLAYS, "txnVersion": str(replay.fence)}
    sink = tables.read(spark, staged.output) if "output" in manifest.staged else None
    if p.emission.appended:
        first, last = tables.literal(replay.first_batch_id), tables.literal(replay.last_batch_id)
        _replace(spark, sink, t.output, f"emitted_batch_id BETWEEN {first} AND {last}", tag, once)
    elif sink is not None:
        sinks.replace_all(p, sink, t.output, replay.output_base, tag, once)


def _replace(spark: SparkSession, rows: DataFrame | None, target: str, where: str, tag: str, once: dict) -> None:
    """In one commit, replace the rows of ``target`` matching ``where`` by ``rows`` (None: by no rows)."""
    if rows is None:
        if not tables.exists(spark, target):
            return
        rows = spark.createDataFrame([], tables.read(spark, target).schema)
    tables.create(spark, target, rows.schema)
    writes.save(rows, target, tag, "overwrite", replaceWhere=where, **once)
