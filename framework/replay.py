"""Replay a committed range of batches with (corrected) input: SPEC 6(b).

What a replay of batches ``first .. last`` does:

- The range must end at the last committed batch. Every batch after a replayed one planned from
  the state the replay changes, so replaying only the middle of the history would leave later
  results computed from state that no longer exists; such a range is refused, naming the later
  batches to include.
- State goes back to the versions the ledger recorded for the batch before the range, by Delta
  ``RESTORE``, table by table over the ledger's ``*_version`` columns (window state, sliding
  records, suppression buffers, an updated sink: whatever the ledger versions). A version that
  VACUUM (or log cleanup) removed stops the replay before anything is written.
- The range then runs batch by batch through the ordinary batch protocol, under the same batch
  ids and sequence numbers, so every row, emission batch and stream time is what a first run
  over this input gives: replaying the same input again changes nothing.
- What readers see changes in one Delta commit per table: the final rows of an append-only sink
  are staged and replace the rows emitted in the range (``replaceWhere`` on
  ``emitted_batch_id``); metrics and late records likewise (on ``seq``); the ledger, the commit
  point, marks the range's old rows ``replaced`` and adds the new ``committed`` ones.
- While it runs, the replay holds a *started* ledger row at the next sequence number, so the
  ordinary next batch refuses to start. A replay that fails undoes its writes and removes that
  row; one that was killed leaves it, and running the replay again completes it.
"""
from __future__ import annotations

import datetime as dt
import os
import uuid
from dataclasses import dataclass
from typing import Iterable

from delta.tables import DeltaTable
from py4j.protocol import Py4JJavaError
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from . import state
from .errors import ConcurrentBatchError, ReplayError
from .runtime import BatchResult, Runtime
from .topology import Pipeline

CLAIM = "replay@"  # fingerprint of a replay's started row: "replay@<first seq of its range>"
VERSION = "_version"


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
class _Staged(state.Tables):
    """A replay's tables: state in place (restored first), the per-batch logs (ledger, metrics,
    late records, and an append-only sink) in a staging folder, published in one commit each."""

    staging: str = ""
    stage_output: bool = True

    @property
    def ledger(self) -> str:
        return os.path.join(self.staging, "_ledger")

    @property
    def late(self) -> str:
        return os.path.join(self.staging, "late_records")

    @property
    def metrics(self) -> str:
        return os.path.join(self.staging, "metrics")

    @property
    def output(self) -> str:
        return os.path.join(self.staging, self.sink) if self.stage_output else super().output


class _StagedRuntime(Runtime):
    """The caller's runtime (same settings and quality gate) writing to ``_Staged`` tables."""

    def __init__(self, rt: Runtime, tables: _Staged):
        self.__dict__.update(rt.__dict__)
        self._staged = tables

    def tables(self, p: Pipeline) -> state.Tables:
        return self._staged


def replay(rt: Runtime, pipeline: Pipeline,
           batches: Iterable[ReplayBatch | tuple[str, DataFrame]]) -> ReplayResult:
    """Re-run committed batches ``batches`` (in order, through the last committed one) with
    their given input, replacing their results atomically (see the module docstring).

    Raises ``ReplayError`` for a range that is not the committed tail, an unfinished batch, or
    state that VACUUM removed; any failure of a batch (bad input, quality gate) undoes the replay
    and leaves the pipeline as it was.

    Example::

        rt.replay(alerts, [ReplayBatch("2026-01-01T01", fixed_df), ReplayBatch("2026-01-01T02", df2)])
    """
    p = pipeline.check_complete()
    todo = [b if isinstance(b, ReplayBatch) else ReplayBatch(*b) for b in batches]
    if not todo:
        raise ReplayError(f"pipeline {p.name!r}: a replay needs at least one batch")
    spark, t = rt.spark, rt.tables(p)
    where = f"pipeline {p.name!r}, replay of {todo[0].batch_id!r}..{todo[-1].batch_id!r}"
    rows = state.read(spark, t.ledger).collect() if state.exists(spark, t.ledger) else []
    committed = sorted((r for r in rows if r.status == "committed"), key=lambda r: r.seq)
    before, range_rows = _range(where, committed, [b.batch_id for b in todo])
    first, last = range_rows[0], range_rows[-1]
    _check_pending(where, rows, last.seq + 1, first.seq)
    restore_to = _restorable(rt, p, t, before, rows)
    for name, (path, version) in restore_to.items():
        _check_available(spark, where, name, path, version)

    touched = {path: state.latest_version(spark, path)   # what a failed replay restores
               for path in [*(path for path, _ in restore_to.values()), t.output, t.late, t.metrics]}
    attempt = uuid.uuid4().hex
    known = {r.attempt for r in rows} | {attempt}
    _claim(spark, where, t.ledger, known, last.seq + 1, first, last, attempt)
    staged = _Staged(t.root, t.sink, os.path.join(t.root, "_replay", attempt), _appended(p))
    tag = f"{p.name}.replay@{attempt}"
    try:
        restored = {name: _restore(spark, path, version, tag) for name, (path, version) in restore_to.items()}
        _seed(spark, staged.ledger, before, restored)
        staged_rt = _StagedRuntime(rt, staged)
        results = tuple(staged_rt.run_batch(p, b.batch_id, b.input_df, b.batch_end) for b in todo)
        if [r.seq for r in results] != [r.seq for r in range_rows]:
            raise ReplayError(f"{where}: replayed sequence numbers {[r.seq for r in results]} differ from the "
                              f"committed ones {[r.seq for r in range_rows]}")
        if _newcomers(spark, t.ledger, known):
            raise ConcurrentBatchError(f"{where}: a batch started while the replay ran; the replay was undone. "
                                       "Let that batch finish, then replay through it.")
        removed = _publish(spark, p, t, staged, first, tag)
        _commit(spark, t, staged, first, last, attempt, p)
    except BaseException as e:
        _undo(spark, touched, t.ledger, attempt, tag)
        if isinstance(e, (Py4JJavaError, PySparkException)):
            raise ReplayError(f"{where}: failed: {_first_line(e)}. The replay was undone; fix the cause (see the "
                              "chained Spark error) and run it again.") from e
        raise
    finally:
        _remove(spark, staged.staging)
    return ReplayResult(p.name, first.batch_id, last.batch_id, results, removed, sum(r.emitted for r in results))


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


def _check_pending(where: str, rows: list, next_seq: int, first_seq: int) -> None:
    """Refuse an unfinished ordinary batch, and an unfinished replay of a range that starts
    earlier than this one (its partial writes may lie before this range); later ones are
    superseded."""
    for r in rows:
        if r.status != "started" or r.seq != next_seq:
            continue
        if not (r.fingerprint or "").startswith(CLAIM):
            raise ReplayError(f"{where}: batch {r.batch_id!r} (seq {r.seq}) was started and not committed; "
                              "re-run it first, then replay through it")
        if int(r.fingerprint[len(CLAIM):]) < first_seq:
            raise ReplayError(f"{where}: an unfinished {r.batch_id} must be completed first: "
                              "re-run it, or replay a range that starts where it starts or earlier")


def _appended(p: Pipeline) -> bool:
    """Whether the sink is append-only, its rows stamped with the batch that emitted them (as
    ``sinks.publish`` writes it: final results, or a log of rate-limited updates)."""
    return p.suppression is not None


def _restorable(rt: Runtime, p: Pipeline, t: state.Tables, before, rows) -> dict[str, tuple[str, int | None]]:
    """Per table the ledger versions (its ``*_version`` columns), updated in place by batches:
    its path and its version as of the batch before the range (None: it did not exist then).
    Column ``<name>_version`` names the table ``Tables.<name>``, or for a table whose path
    depends on the pipeline (a named suppression buffer) ``Runtime._<name>_path(p)``."""
    columns = [c for c in (rows[0].asDict() if rows else {}) if c.endswith(VERSION)]
    out = {}
    for column in columns:
        name = column[:-len(VERSION)]
        if name == "output" and _appended(p):
            continue  # append-only: its range rows are replaced, not restored
        path = getattr(t, name, None)
        if not isinstance(path, str) and hasattr(rt, f"_{name}_path"):
            path = getattr(rt, f"_{name}_path")(p)
            if path is None:
                continue  # the pipeline has no such table
        if not isinstance(path, str):
            raise ReplayError(f"pipeline {p.name!r}: ledger column {column!r} names no table of the pipeline")
        out[name] = (path, before[column] if before is not None else None)
    return out


def _first_line(e: Exception) -> str:
    return (str(e).strip().splitlines() or [type(e).__name__])[0][:300]


def _check_available(spark: SparkSession, where: str, name: str, path: str, version: int | None) -> None:
    """Refuse a replay whose restore point is gone: the version's log entry or any of its files."""
    if version is None:
        return
    try:
        files = state.read(spark, path, version).inputFiles()
    except (Py4JJavaError, PySparkException) as e:
        raise ReplayError(f"{where}: table {name!r} version {version} ({path}), the state before the range, is no "
                          f"longer available: {_first_line(e)}. Nothing was written. Replay a later range, or "
                          "keep delta.logRetentionDuration longer than the oldest range to replay.") from None
    jvm = spark._jvm
    conf = spark._jsc.hadoopConfiguration()
    for f in files:
        hadoop_path = jvm.org.apache.hadoop.fs.Path(f)
        if not hadoop_path.getFileSystem(conf).exists(hadoop_path):
            raise ReplayError(
                f"{where}: table {name!r} version {version} ({path}), the state before the range, is no longer "
                f"available: its file {f} was removed (VACUUM). Nothing was written. Replay a later range, or "
                "keep delta.deletedFileRetentionDuration longer than the oldest range to replay.")


# ---- writing ---------------------------------------------------------------------------------
def _claim(spark: SparkSession, where: str, ledger: str, known: set[str], seq: int, first, last,
           attempt: str) -> None:
    """Append the replay's *started* row at ``seq``; ordinary batches refuse to start while it
    is pending. Written, then checked: of two runners that claim at once, neither or one goes on."""
    row = {**last.asDict(), "seq": seq, "batch_id": f"replay {first.batch_id}..{last.batch_id}",
           "status": "started", "attempt": attempt, "fingerprint": f"{CLAIM}{first.seq}", "records_in": None,
           "stream_time": None, "at": dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)}
    row.update({c: None for c in row if c.endswith(VERSION)})
    schema = state.read(spark, ledger).schema
    frame = spark.createDataFrame([tuple(row[f] for f in schema.fieldNames())], schema)
    state.tagged(spark, ledger, attempt, lambda: frame.write.format("delta").mode("append").save(ledger))
    if _newcomers(spark, ledger, known):
        state.tagged(spark, ledger, attempt,
                     lambda: DeltaTable.forPath(spark, ledger).delete(F.col("attempt") == attempt))
        raise ConcurrentBatchError(f"{where}: another batch or replay started at the same time; this replay "
                                   "stopped before writing. Run it again once that one has finished.")


def _newcomers(spark: SparkSession, ledger: str, known: set[str]) -> bool:
    """Whether a ledger row was written by another runner since the replay read the ledger."""
    return bool(state.read(spark, ledger).filter(~F.col("attempt").isin(*known)).limit(1).collect())


def _restore(spark: SparkSession, path: str, version: int | None, tag: str) -> int | None:
    """Bring ``path`` back to ``version`` (None: empty); the version that now holds that content."""
    if not state.exists(spark, path):
        return None
    table = DeltaTable.forPath(spark, path)
    if version is None:
        state.tagged(spark, path, tag, lambda: table.delete())
        return None
    state.tagged(spark, path, tag, lambda: table.restoreToVersion(version))
    return state.latest_version(spark, path)


def _seed(spark: SparkSession, ledger: str, before, restored: dict[str, int | None]) -> None:
    """The staging ledger: the batch before the range, pointing at the restored versions."""
    state.create(spark, ledger, state.LEDGER_SCHEMA)
    if before is None:
        return
    row = before.asDict()
    row.update({c: None for c in row if c.endswith(VERSION)})
    row.update({f"{name}{VERSION}": version for name, version in restored.items()})
    schema = state.read(spark, ledger).schema
    spark.createDataFrame([tuple(row.get(f) for f in schema.fieldNames())], schema) \
        .write.format("delta").mode("append").save(ledger)


def _sql_string(text: str) -> str:
    """``text`` as a Spark SQL string literal."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _replace(spark: SparkSession, source: str, target: str, where: str, tag: str) -> None:
    """In one commit, replace the rows of ``target`` matching ``where`` by the rows of ``source``."""
    if not state.exists(spark, source) and not state.exists(spark, target):
        return
    rows = state.read(spark, source) if state.exists(spark, source) else None
    if rows is None:
        rows = spark.createDataFrame([], state.read(spark, target).schema)
    state.create(spark, target, rows.schema)
    writer = rows.write.format("delta").mode("overwrite").option("replaceWhere", where)
    state.tagged(spark, target, tag, lambda: writer.save(target))


def _publish(spark: SparkSession, p: Pipeline, t: state.Tables, staged: _Staged, first, tag: str) -> int:
    """Replace the range's final rows, metrics and late records; the number of final rows replaced."""
    removed = 0
    if staged.stage_output:
        emitted_in_range = f"emitted_batch_id >= {_sql_string(first.batch_id)}"
        if state.exists(spark, t.output):
            removed = state.read(spark, t.output).filter(emitted_in_range).count()
        _replace(spark, staged.output, t.output, emitted_in_range, tag)
    for source, target in ((staged.late, t.late), (staged.metrics, t.metrics)):
        _replace(spark, source, target, f"seq >= {int(first.seq)}", tag)
    return removed


def _commit(spark: SparkSession, t: state.Tables, staged: _Staged, first, last, attempt: str, p: Pipeline) -> None:
    """The commit point, one ledger commit: the range's rows become 'replaced', the replay's
    claim 'replayed' (superseded claims 'abandoned'), and the replayed batches 'committed'."""
    old = state.read(spark, t.ledger).filter(F.col("seq") >= first.seq)
    status = (F.when((F.col("status") == "committed") & (F.col("seq") <= last.seq), "replaced")
              .when(F.col("attempt") == attempt, "replayed")
              .when((F.col("status") == "started") & F.col("fingerprint").startswith(CLAIM), "abandoned")
              .otherwise(F.col("status")))
    new = state.read(spark, staged.ledger).filter((F.col("status") == "committed") & (F.col("seq") >= first.seq))
    if staged.stage_output:
        new = new.withColumn(f"output{VERSION}", F.lit(state.latest_version(spark, t.output)).cast("long"))
    rows = old.withColumn("status", status).unionByName(new, allowMissingColumns=True).localCheckpoint()
    state.tagged(spark, t.ledger, f"{p.name}.replay@{attempt}", lambda: rows.write.format("delta")
                 .mode("overwrite").option("replaceWhere", f"seq >= {int(first.seq)}").option("mergeSchema", "true")
                 .save(t.ledger))


def _undo(spark: SparkSession, touched: dict[str, int | None], ledger: str, attempt: str, tag: str) -> None:
    """After a failure: every table back to its version before the replay, the claim removed."""
    for path, version in touched.items():
        if state.exists(spark, path) and state.latest_version(spark, path) != version:
            _restore(spark, path, version, tag)
    state.tagged(spark, ledger, tag, lambda: DeltaTable.forPath(spark, ledger).delete(
        (F.col("attempt") == attempt) & (F.col("status") == "started")))


def _remove(spark: SparkSession, path: str) -> None:
    """Delete a folder on whatever file system holds it (local, HDFS, object stores)."""
    jvm = spark._jvm
    hadoop_path = jvm.org.apache.hadoop.fs.Path(path)
    hadoop_path.getFileSystem(spark._jsc.hadoopConfiguration()).delete(hadoop_path, True)
