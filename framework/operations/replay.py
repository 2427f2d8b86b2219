"""Replay a committed range of batches with (corrected) input: SPEC 6(b).

What a replay of batches ``first .. last`` does:

- The range must end at the last committed batch. Every batch after a replayed one planned from
  the state the replay changes, so replaying only the middle of the history would leave later
  results computed from state that no longer exists; such a range is refused, naming the later
  batches to include.
- The range runs batch by batch through the ordinary batch protocol (``framework.runtime``),
  starting from the state versions the ledger recorded for the batch before the range, under
  the same batch ids and sequence numbers, so every row, emission batch and stream time is what
  a first run over this input gives: replaying the same input again changes nothing. A version
  that VACUUM (or log cleanup) removed stops the replay before anything is written.
- State tables are advanced in place, as by any attempt: readers and later batches read them
  only at the versions the ledger names, so until the replay commits its writes are invisible.
  The per-batch logs (ledger, sink, metrics, late records) go to a staging folder.
- The commit point is one ledger commit: the range's rows become ``replaced`` and the replayed
  batches ``committed``. Like a batch's, it lands only if no other batch or replay committed
  since the replay read the ledger: of two replays at once, or a replay and the next batch, one
  wins and the other fails, having published nothing.
- Then the staged rows are published, one commit per table: an append-only sink's rows emitted
  in the range are replaced (``replaceWhere`` on ``emitted_batch_id``), a MERGEd sink goes back
  to its version before the range and takes the range's changes, metrics and late records are
  replaced on ``seq``. Whoever finds the replay committed and unpublished publishes it again.
"""
from __future__ import annotations

import datetime as dt
import json
import os
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable

from py4j.protocol import Py4JJavaError
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from ..definition.pipeline import Pipeline
from ..errors import ConcurrentBatchError, ReplayError
from ..storage import files, ledger, sinks, tables, writes
from .runtime import PUBLICATION, BatchResult, Runtime

if TYPE_CHECKING:
    from pyspark.sql import Row

STATE_TABLES = ("state", "records", "buffer")  # ledger columns <name>_version
REPLAYS = f"{writes.LEDGER_APP}.replay"  # Delta txnAppId of a replay's publications


@dataclass(frozen=True)
class ReplayBatch:
    """One batch of a replayed range: its id, its (corrected) input and the interval end."""

    batch_id: str
    input_df: DataFrame
    batch_end: dt.datetime | None = None


@dataclass(frozen=True)
class ReplayResult:
    """What ``replay`` did: the batches re-run, and the final rows of the range before and after."""

    pipeline: str
    first: str
    last: str
    batches: tuple[BatchResult, ...]
    removed: int   # rows the range had emitted before the replay
    emitted: int   # rows it emits now


@dataclass(frozen=True)
class _Staged(tables.Tables):
    """A replay's tables: state in place, the per-batch logs (ledger, sink, metrics, late
    records) in the replay's staging folder; a MERGEd sink keeps its deletes as tombstones."""

    folder: str = ""
    tombstones: bool = False

    @property
    def ledger(self) -> str:
        return os.path.join(self.folder, "_ledger")

    @property
    def late(self) -> str:
        return os.path.join(self.folder, "late_records")

    @property
    def metrics(self) -> str:
        return os.path.join(self.folder, "metrics")

    @property
    def output(self) -> str:  # named as in the publication marker's list, whatever the sink's name
        return os.path.join(self.folder, "output")

    @property
    def staging(self) -> str:
        return os.path.join(self.folder, "_staging")


class _StagedRuntime(Runtime):
    """The caller's runtime (same settings and quality gate) writing to ``_Staged`` tables."""

    def __init__(self, rt: Runtime, tables: _Staged):
        self.__dict__.update(rt.__dict__)
        self._staged, self.catalog = tables, None  # the catalog names the live tables, never staged ones

    def tables(self, p: Pipeline) -> tables.Tables:
        return self._staged


def _staged_tables(t: tables.Tables, p: Pipeline, folder: str) -> _Staged:
    return _Staged(t.root, t.sink, folder, tombstones=p.suppression is None)


def replay(rt: Runtime, pipeline: Pipeline,
           batches: Iterable[ReplayBatch | tuple[str, DataFrame]]) -> ReplayResult:
    """Re-run committed batches ``batches`` (in order, through the last committed one) with
    their given input, replacing their results atomically (see the module docstring).

    Raises ``ReplayError`` for a range that is not the committed tail or state that VACUUM
    removed, and ``ConcurrentBatchError`` when another batch or replay committed first; any
    failure of a batch (bad input, quality gate) leaves what readers see as it was.

    Example::

        rt.replay(alerts, [ReplayBatch("2026-01-01T01", fixed_df), ReplayBatch("2026-01-01T02", df2)])
    """
    p = pipeline.check_complete()
    todo = [b if isinstance(b, ReplayBatch) else ReplayBatch(*b) for b in batches]
    if not todo:
        raise ReplayError(f"pipeline {p.name!r}: a replay needs at least one batch")
    spark, t = rt.spark, rt.tables(p)
    where = f"pipeline {p.name!r}, replay of {todo[0].batch_id!r}..{todo[-1].batch_id!r}"
    seen, rows = rt._read_ledger(t.ledger)
    committed = sorted((r for r in rows if r.status == "committed"), key=lambda r: r.seq)
    rt.finish(p, committed[-1] if committed else None)
    before, range_rows = _range(where, committed, [b.batch_id for b in todo])
    first, last = range_rows[0], range_rows[-1]
    for name in STATE_TABLES:
        path = _state_path(rt, p, t, name)
        if path is not None and before is not None:
            _check_available(spark, where, name, path, before[f"{name}_version"])

    base = _output_base(where, p, first, before)
    if base is not None:
        _check_available(spark, where, "output", t.output, base)
    attempt = uuid.uuid4().hex
    staged = _staged_tables(t, p, f"{t.staging}/{last.seq + 1}-{attempt}")
    tag = f"{writes.TAG}{p.name}.replay@{first.seq}:{attempt}"
    committing = False
    try:
        _seed(spark, staged.ledger, before, tables.read(spark, t.ledger, seen[1]).schema)
        results = tuple(_StagedRuntime(rt, staged).run_batch(p, b.batch_id, b.input_df, b.batch_end) for b in todo)
        if [r.seq for r in results] != [r.seq for r in range_rows]:
            raise ReplayError(f"{where}: replayed sequence numbers {[r.seq for r in results]} differ from the "
                              f"committed ones {[r.seq for r in range_rows]}")
        removed = _emitted_since(spark, p, t, first.batch_id, last.batch_id)
        staged_names = [n for n, path in (("output", staged.output), ("late_records", staged.late),
                                    ("metrics", staged.metrics)) if tables.exists(spark, path)]
        files.put_text(spark, f"{staged.folder}/{PUBLICATION}", json.dumps(
            {"replay": True, "staged": staged_names, "first_seq": first.seq, "first_batch_id": first.batch_id,
             "last_seq": last.seq, "last_batch_id": last.batch_id, "output_base": base, "fence": seen[2] + 1}))
        committing = True
        new_last = _commit(spark, where, t, staged, seen, first, last, attempt, tag)
    except BaseException as e:
        if not committing:  # after the commit point was tried, ``finish`` decides: publish or remove
            files.remove(spark, staged.folder)
        if isinstance(e, ConcurrentBatchError):  # fenced out, in a replayed batch or at the end
            raise ConcurrentBatchError(f"{where}: another batch or replay committed while this replay ran; this "
                                       "replay published nothing. Run it again over the range as it is now.") from e
        if isinstance(e, (Py4JJavaError, PySparkException)):
            raise ReplayError(f"{where}: failed: {_first_line(e)}. Nothing was published; fix the cause (see the "
                              "chained Spark error) and run it again.") from e
        raise
    rt.finish(p, new_last)
    return ReplayResult(p.name, first.batch_id, last.batch_id, results, removed, sum(r.emitted for r in results))


def _output_base(where: str, p: Pipeline, first: Row, before: Row | None) -> int | None:
    """The version of a MERGEd sink before the range: recorded by its first batch (or, in a
    ledger from before ``output_base``, by the batch before it as ``output_version``)."""
    if p.suppression is not None or before is None:
        return None
    if first.asDict().get("output_base") is not None:
        return first["output_base"]
    if before["output_version"] is not None:
        return before["output_version"]
    raise ReplayError(f"{where}: batch {first.batch_id!r} was itself replayed inside a longer range, so the "
                      "results table never existed as it was before it; replay from the start of that range")


def _state_path(rt: Runtime, p: Pipeline, t: tables.Tables, name: str) -> str | None:
    """The path of state table ``name`` (a ledger ``<name>_version`` column), if ``p`` has it."""
    return rt._buffer_path(p) if name == "buffer" else getattr(t, name)


# ---- checks before anything is written -------------------------------------------------------
def _range(where: str, committed: list, ids: list[str]) -> tuple:
    """The committed ledger row before the range (or None) and the rows of ``ids``, which must
    be the committed tail, in order."""
    position = {r.batch_id: i for i, r in enumerate(committed)}
    if ids[0] not in position:
        raise ReplayError(f"{where}: batch {ids[0]!r} is not committed; a replay re-runs committed batches "
                          "(run new ones with run_batch, run or backfill)")
    tail = committed[position[ids[0]]:]
    expected = [r.batch_id for r in tail]
    if ids == expected:
        return (committed[position[ids[0]] - 1] if position[ids[0]] else None), tail
    if ids == expected[:len(ids)]:
        later = expected[len(ids):]
        raise ReplayError(
            f"{where}: {len(later)} later committed batch(es) ({later[0]!r}..{later[-1]!r}) were computed from "
            "the state this replay changes; replay through the last committed batch "
            f"{expected[-1]!r} (the range must end there)")
    raise ReplayError(f"{where}: the batches must be the committed ones from {ids[0]!r} on, in order: "
                      f"expected {expected}, got {ids}")


def _first_line(e: Exception) -> str:
    return (str(e).strip().splitlines() or [type(e).__name__])[0][:300]


def _check_available(spark: SparkSession, where: str, name: str, path: str, version: int | None) -> None:
    """Refuse a replay whose restore point is gone: the version's log entry or any of its files."""
    if version is None:
        return
    try:
        inputs = tables.read(spark, path, version).inputFiles()
    except (Py4JJavaError, PySparkException) as e:
        raise ReplayError(f"{where}: table {name!r} version {version} ({path}), the state before the range, is no "
                          f"longer available: {_first_line(e)}. Nothing was written. Replay a later range, or "
                          "keep delta.logRetentionDuration longer than the oldest range to replay.") from None
    jvm = spark._jvm
    conf = spark._jsc.hadoopConfiguration()
    for f in inputs:
        hadoop_path = jvm.org.apache.hadoop.fs.Path(f)
        if not hadoop_path.getFileSystem(conf).exists(hadoop_path):
            raise ReplayError(
                f"{where}: table {name!r} version {version} ({path}), the state before the range, is no longer "
                f"available: its file {f} was removed (VACUUM). Nothing was written. Replay a later range, or "
                "keep delta.deletedFileRetentionDuration longer than the oldest range to replay.")


# ---- writing ---------------------------------------------------------------------------------
def _seed(spark: SparkSession, path: str, before: Row | None, schema) -> None:
    """The staging ledger: the batch before the range, as committed (its state versions)."""
    tables.create(spark, path, ledger.LEDGER_SCHEMA)
    if before is not None:
        writes.save(spark.createDataFrame([tuple(before)], schema), path, f"{writes.TAG}seed", mergeSchema="true")


def _emitted_since(spark: SparkSession, p: Pipeline, t: tables.Tables, first_batch_id: str, last_batch_id: str) -> int:
    """Rows of an append-only sink emitted by the batches ``first_batch_id`` .. ``last_batch_id``."""
    if p.suppression is None or not tables.exists(spark, t.output):
        return 0
    return tables.read(spark, t.output).filter(F.col("emitted_batch_id").between(first_batch_id, last_batch_id)).count()


def _commit(spark: SparkSession, where: str, t: tables.Tables, staged: _Staged, seen: tuple[str, int, int],
            first, last, attempt: str, tag: str) -> Row:
    """The commit point, one ledger commit: the range's rows become 'replaced' and the replayed
    batches 'committed' (under the replay's attempt, which names its staging folder). Fenced
    like a batch's commit; returns the new last committed row."""
    old = tables.read(spark, t.ledger, seen[1]).filter(F.col("seq") >= first.seq)
    status = F.when((F.col("status") == "committed") & (F.col("seq") <= last.seq), "replaced").otherwise(F.col("status"))
    new = (tables.read(spark, staged.ledger).filter((F.col("status") == "committed") & (F.col("seq") >= first.seq))
           .withColumn("attempt", F.lit(attempt))   # the staged sink's versions mean nothing here:
           .withColumn("output_base", F.when(F.col("seq") == first.seq, F.lit(first.asDict().get("output_base")))
                       .cast("long")))              # the range is published at once, from before its first
    rows = old.withColumn("status", status).unionByName(new, allowMissingColumns=True).localCheckpoint()
    made = ledger.commit_point(rows, t.ledger, seen[1], seen[2], tag, "overwrite",
                              replaceWhere=f"seq >= {int(first.seq)}", mergeSchema="true")
    if made is None:
        raise ConcurrentBatchError(f"{where}: fenced out at its commit point")
    return new.orderBy(F.desc("seq")).limit(1).collect()[0]


def _replace(spark: SparkSession, rows: DataFrame | None, target: str, where: str, tag: str, once: dict) -> None:
    """In one commit, replace the rows of ``target`` matching ``where`` by ``rows`` (None: by no rows)."""
    if rows is None:
        if not tables.exists(spark, target):
            return
        rows = spark.createDataFrame([], tables.read(spark, target).schema)
    tables.create(spark, target, rows.schema)
    writes.save(rows, target, tag, "overwrite", replaceWhere=where, **once)


def publish_range(rt: Runtime, p: Pipeline, t: tables.Tables, folder: str, spec: dict, tag: str) -> None:
    """Publish a committed replay's staged rows, one commit per table, each skipped if this
    replay's publication of it landed already (Delta transaction id ``REPLAYS``, version = the
    replay's ledger fence): publishing again, or late beside another publisher, changes nothing."""
    spark, staged = rt.spark, _staged_tables(t, p, folder)
    once = {"txnAppId": REPLAYS, "txnVersion": str(spec["fence"])}

    def rows(name: str, path: str) -> DataFrame | None:
        return tables.read(spark, path) if name in spec["staged"] else None
    first, last = _sql_string(spec["first_batch_id"]), _sql_string(spec["last_batch_id"])
    sink = rows("output", staged.output)
    if p.suppression is not None:
        _replace(spark, sink, t.output, f"emitted_batch_id BETWEEN {first} AND {last}", tag, once)
    elif sink is not None:
        sinks.replace_all(p, sink, t.output, spec["output_base"], tag, once)
    seqs = f"seq BETWEEN {int(spec['first_seq'])} AND {int(spec['last_seq'])}"
    _replace(spark, rows("late_records", staged.late), t.late, seqs, tag, once)
    _replace(spark, rows("metrics", staged.metrics), t.metrics, seqs, tag, once)


def _sql_string(text: str) -> str:
    """``text`` as a Spark SQL string literal."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"
