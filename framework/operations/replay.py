"""Replay a committed range of batches with (corrected) input (docs/design.md#replay).

What a replay of batches ``first .. last`` does:

- The range must end at the last committed batch. Every batch after a replayed one planned from
  the state the replay changes, so replaying only the middle of the history would leave later
  results computed from state that no longer exists; such a range is refused, naming the later
  batches to include.
- The range runs batch by batch through the ordinary batch protocol (``attempt.BatchAttempt``),
  starting from the state versions the ledger recorded for the batch before the range, under
  the same batch ids and sequence numbers, so every row, emission batch and stream time is what
  a first run over this input gives: replaying the same input again changes nothing. A version
  that VACUUM (or log cleanup) removed stops the replay before anything is written.
- The batches run against a ``_state`` table of their own in a staging folder, seeded with the
  window state the first batch of the range planned from (its ledger row's ``state_version``)
  and the ledger row of the batch before; their sink rows go to that folder too. A rate-limiting
  buffer is advanced as by any attempt (new versions of its own table): readers and later batches
  read it only at the versions the ledger names, so until the replay commits its writes are invisible.
- The commit point is one commit to ``_state``: the window state becomes the replay's, the
  range's ledger rows become ``replaced``, the replayed batches' rows and late records are added
  ``committed``. Like a batch's, it lands only if no other batch or replay committed since the
  replay read the ledger: of two replays at once, or a replay and the next batch, one wins and
  the other fails, having published nothing.
- Then the staged sink rows are published in one commit: an append-only sink's rows emitted in
  the range are replaced (``replaceWhere`` on ``emitted_batch_id``), a MERGEd sink goes back to
  its version before the range and takes the range's changes (``publication.publish_range``).
  Whoever finds the replay committed and unpublished publishes it again.
- The state between the batches of a replayed range is not kept in ``_state`` (only the state
  after it), so a later replay starts at the first batch of a replayed range or after it.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import uuid
from dataclasses import dataclass
from typing import Callable, Iterable

from pyspark.errors import PySparkException
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from ..definition.columns import BUCKET, LEDGER_BUCKET, SEQ
from ..definition.pipeline import Pipeline
from ..errors import CommitLockTimeout, ConcurrentBatchError, ReplayError, first_line
from ..storage import classic, files, ledger, state, tables, upgrade, writes
from ..storage.ledger import LedgerRow, Status
from .attempt import BatchAttempt, BatchResult
from .chunk import CHUNK_RECORDS, Progress, Range, run_chunks
from .publication import Manifest, ReplayedRange, Staged, finish, mark
from .settings import Settings
from .steps import Steps


@dataclass(frozen=True)
class ReplayBatch:
    """One batch of a replayed range: its id, its (corrected) input and the interval (a job's
    batches: recorded in the ledger as a first run records it)."""

    batch_id: str
    input_df: DataFrame
    batch_end: dt.datetime | None = None
    batch_start: dt.datetime | None = None


@dataclass(frozen=True)
class ReplayResult:
    """What ``replay`` did: the batches re-run, and the final rows of the range before and after."""

    pipeline: str
    first: str
    last: str
    batches: tuple[BatchResult, ...]
    removed: int  # rows the range had emitted before the replay
    emitted: int  # rows it emits now


def replay(
    s: Settings,
    ledgers: ledger.Ledgers,
    t: tables.Tables,
    pipeline: Pipeline,
    batches: Iterable[ReplayBatch | tuple[str, DataFrame]],
    progress: Callable[[int, int], None] | None = None,
) -> ReplayResult:
    """Re-run committed batches ``batches`` (in order, through the last committed one) of
    ``pipeline``, whose tables are ``t``, with their given input, replacing their results
    atomically (see the module docstring). The batches run under the caller's settings
    (quality gate included) against a staged layout, which no catalog ever names.
    ``progress(done, total)`` is called as each batch has run (before the range commits).

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
    return _replay(
        s, ledgers, t, p, [b.batch_id for b in todo], lambda staged: _run_all(s, ledgers, p, staged, todo, progress)
    )


def replay_range(
    s: Settings,
    ledgers: ledger.Ledgers,
    t: tables.Tables,
    pipeline: Pipeline,
    r: Range,
    chunk_records: int = CHUNK_RECORDS,
    progress: Progress | None = None,
) -> ReplayResult:
    """``replay`` of the committed intervals of ``r`` (through the last committed batch) with
    the corrected records ``r`` holds: run in chunks of at most ``chunk_records`` records against the staged layout
    (``chunk.run_chunks``), the range committed and published as ``replay`` does.
    ``progress(results, how)`` after each chunk."""
    p = pipeline.check_complete()
    if not r.intervals:
        raise ReplayError(f"pipeline {p.name!r}: a replay needs at least one interval")

    def run(staged: Staged) -> tuple[BatchResult, ...]:
        ran = run_chunks(s, ledgers, p, staged, r, bound=chunk_records, allow_gap=True, progress=progress)
        return tuple(ran)

    return _replay(s, ledgers, t, p, [iv.batch_id for iv in r.intervals], run)


def _replay(
    s: Settings,
    ledgers: ledger.Ledgers,
    t: tables.Tables,
    p: Pipeline,
    ids: list[str],
    run: Callable[[Staged], tuple[BatchResult, ...]],
) -> ReplayResult:
    """Replay the committed batches ``ids`` of ``p``: ``run`` them against the staged layout,
    then commit and publish the range (the module docstring)."""
    spark = s.spark
    steps = Steps(spark, f"pipeline {p.name!r}, replay of {ids[0]!r}..{ids[-1]!r}")
    where = steps.where
    upgrade.upgrade(spark, p.name, t)
    seen, rows = ledgers.read(t.state)
    committed = ledger.committed_rows(rows)
    finish(steps, p, t, committed[-1] if committed else None)
    before, range_rows = _range(where, committed, ids)
    first, last = range_rows[0], range_rows[-1]
    base = _check_restore_points(spark, where, p, t, before, first, [r.batch_id for r in range_rows])
    attempt = uuid.uuid4().hex
    staged = Staged.of(t, p, f"{t.staging}/{last.seq + 1}-{attempt}")
    committing = False
    try:
        _seed(spark, staged.state, t.state, first, before)
        results = run(staged)
        if [r.seq for r in results] != [r.seq for r in range_rows]:
            raise ReplayError(
                f"{where}: replayed sequence numbers {[r.seq for r in results]} differ from the "
                f"committed ones {[r.seq for r in range_rows]}"
            )
        removed = _emitted_since(spark, p, t, first.batch_id, last.batch_id)
        _mark(spark, staged, first, last, base, seen)
        committing = True
        new_last = _commit(
            spark, where, t, staged, seen, first, last, attempt, f"{writes.TAG}{p.name}.replay@{first.seq}:{attempt}"
        )
    except BaseException as e:
        if not committing:  # after the commit point was tried, ``finish`` decides: publish or remove
            files.remove(spark, staged.folder)
        failure = _failure(where, e)
        if failure is None:
            raise
        raise failure from e
    finish(steps, p, t, new_last)
    return ReplayResult(
        pipeline=p.name,
        first=first.batch_id,
        last=last.batch_id,
        batches=results,
        removed=removed,
        emitted=sum(r.emitted for r in results),
    )


def _run_all(
    s: Settings,
    ledgers: ledger.Ledgers,
    p: Pipeline,
    staged: Staged,
    todo: list[ReplayBatch],
    progress: Callable[[int, int], None] | None,
) -> tuple[BatchResult, ...]:
    """Run the replayed batches against the staged layout, in order, reporting ``progress``."""
    results = []
    for done, b in enumerate(todo, 1):
        results.append(
            BatchAttempt(s, p, b.batch_id, staged, ledgers).run(b.input_df, b.batch_end, b.batch_start, allow_gap=True)
        )
        if progress is not None:
            progress(done, len(todo))
    return tuple(results)


def restorable_start(rows: list[LedgerRow], batch_id: str) -> str:
    """The first batch a replay from committed batch ``batch_id`` can start at: ``batch_id``, or,
    when the state before it was never kept because it ran inside a chunk of a range (or was
    replayed inside a longer range), that chunk's (or range's) first batch: the rows of one
    commit point share its attempt. Anything else (a batch id not committed, a ledger row from
    before the ``_state`` table) is left for the replay to refuse."""
    committed = ledger.committed_rows(rows)
    at = next((i for i, r in enumerate(committed) if r.batch_id == batch_id), None)
    if at is None:
        return batch_id
    while at > 0 and committed[at].state_version is None and committed[at].attempt == committed[at - 1].attempt:
        at -= 1
    return committed[at].batch_id


def _failure(where: str, e: BaseException) -> Exception | None:
    """What a failed replay raises for ``e`` (None: ``e`` itself)."""
    waited = e if isinstance(e, CommitLockTimeout) else e.__cause__  # raised here, or by a replayed batch
    if isinstance(waited, CommitLockTimeout):
        return ConcurrentBatchError(
            f"{where}: waited for another writer: {waited}. This replay published nothing; run it again "
            "once that writer has ended."
        )
    if isinstance(e, ConcurrentBatchError):  # fenced out, in a replayed batch or at the end
        return ConcurrentBatchError(
            f"{where}: another batch or replay committed while this replay ran; this "
            "replay published nothing. Run it again over the range as it is now."
        )
    if isinstance(e, (classic.JavaError, PySparkException)):
        return ReplayError(
            f"{where}: failed: {first_line(e)}. Nothing was published; fix the cause (see the "
            "chained Spark error) and run it again."
        )
    return None


def _output_base(where: str, p: Pipeline, first: LedgerRow, before: LedgerRow | None) -> int | None:
    """The version of a MERGEd sink before the range: recorded by its first batch (or, in a
    ledger from before ``output_base``, by the batch before it as ``output_version``)."""
    if p.emission.appended or before is None:
        return None
    if first.output_base is not None:
        return first.output_base
    if before.output_version is not None:
        return before.output_version
    raise ReplayError(
        f"{where}: batch {first.batch_id!r} was itself replayed inside a longer range, so the "
        "results table never existed as it was before it; replay from the start of that range"
    )


# ---- checks before anything is written -------------------------------------------------------
def _check_restore_points(
    spark: SparkSession,
    where: str,
    p: Pipeline,
    t: tables.Tables,
    before: LedgerRow | None,
    first: LedgerRow,
    ids: list[str],
) -> int | None:
    """Refuse a replay whose state before the range is gone; the MERGEd sink's version to restore."""
    if before is not None:
        if first.state_version is None:
            raise ReplayError(
                f"{where}: the window state before batch {first.batch_id!r} is not kept: the batch ran inside a "
                "chunk of a backfill, was replayed inside a longer range, or committed before the pipeline's upgrade "
                "to the _state table. Replay from the first batch of that chunk or range, or from a later batch "
                f"(the range asked: {ids[0]!r}..{ids[-1]!r})"
            )
        _check_available(spark, where, "_state", t.state, first.state_version)
        buffer = state.buffer_path(t, p)
        if buffer is not None:
            _check_available(spark, where, "buffer", buffer, before.buffer_version)
    base = _output_base(where, p, first, before)
    if base is not None:
        _check_available(spark, where, "output", t.output, base)
    return base


def _range(where: str, committed: list[LedgerRow], ids: list[str]) -> tuple[LedgerRow | None, list[LedgerRow]]:
    """The committed ledger row before the range (or None) and the rows of ``ids``, which must
    be the committed tail, in order."""
    position = {r.batch_id: i for i, r in enumerate(committed)}
    if ids[0] not in position:
        raise ReplayError(
            f"{where}: batch {ids[0]!r} is not committed; a replay re-runs committed batches "
            "(run new ones with run_batch, run or backfill)"
        )
    tail = committed[position[ids[0]] :]
    expected = [r.batch_id for r in tail]
    if ids == expected:
        return (committed[position[ids[0]] - 1] if position[ids[0]] else None), tail
    if ids == expected[: len(ids)]:
        later = expected[len(ids) :]
        raise ReplayError(
            f"{where}: {len(later)} later committed batch(es) ({later[0]!r}..{later[-1]!r}) were computed from "
            "the state this replay changes; replay through the last committed batch "
            f"{expected[-1]!r} (the range must end there)"
        )
    raise ReplayError(
        f"{where}: the batches must be the committed ones from {ids[0]!r} on, in order: expected {expected}, got {ids}"
    )


def _check_available(spark: SparkSession, where: str, name: str, path: str, version: int | None) -> None:
    """Refuse a replay whose restore point is gone: the version's log entry or any of its files."""
    if version is None:
        return
    try:
        inputs = tables.read(spark, path, version).inputFiles()
    except (classic.JavaError, PySparkException) as e:
        raise ReplayError(
            f"{where}: table {name!r} version {version} ({path}), the state before the range, is no "
            f"longer available: {first_line(e)}. Nothing was written. Replay a later range, or "
            "keep delta.logRetentionDuration longer than the oldest range to replay."
        ) from None
    if (f := files.first_missing(spark, inputs)) is not None:
        raise ReplayError(
            f"{where}: table {name!r} version {version} ({path}), the state before the range, is no longer "
            f"available: its file {f} was removed (VACUUM). Nothing was written. Replay a later range, or "
            "keep delta.deletedFileRetentionDuration longer than the oldest range to replay."
        )


# ---- writing ---------------------------------------------------------------------------------
def _seed(spark: SparkSession, path: str, source: str, first: LedgerRow, before: LedgerRow | None) -> None:
    """The replay's own ``_state`` at ``path``: the window state the range's first batch
    planned from (in ``source``) and the ledger row of the batch before the range, in one commit."""
    if before is None:
        return
    rows = ledger.to_frame(spark, [before])
    windows = state.windows(spark, source, first.state_version) if first.state_version is not None else None
    if windows is not None:
        rows = windows.unionByName(rows, allowMissingColumns=True)
    tables.create(spark, path, rows.schema, partition_by=BUCKET)
    writes.save(rows, path, f"{writes.TAG}seed", mergeSchema="true")


def _emitted_since(spark: SparkSession, p: Pipeline, t: tables.Tables, first_batch_id: str, last_batch_id: str) -> int:
    """Rows of an append-only sink emitted by the batches ``first_batch_id`` .. ``last_batch_id``."""
    if not p.emission.appended or not tables.exists(spark, t.output):
        return 0
    return tables.read(spark, t.output).filter(F.col("emitted_batch_id").between(first_batch_id, last_batch_id)).count()


def _mark(
    spark: SparkSession, staged: Staged, first: LedgerRow, last: LedgerRow, base: int | None, seen: ledger.Head
) -> None:
    """What to publish once the replay committed (``publication.publish_range``)."""
    names = ("output",) if tables.exists(spark, staged.output) else ()
    mark(
        spark,
        staged.folder,
        Manifest(names, replay=ReplayedRange(first.batch_id, last.batch_id, base, seen.next_fence)),
    )


def _commit(
    spark: SparkSession,
    where: str,
    t: tables.Tables,
    staged: Staged,
    seen: ledger.Head,
    first: LedgerRow,
    last: LedgerRow,
    attempt: str,
    tag: str,
) -> LedgerRow:
    """The commit point, one commit to ``_state``: the replay's window state replaces the
    pipeline's, the range's ledger rows become 'replaced' and the replayed batches' rows
    (under the replay's attempt, which names its staging folder) and late records are added.
    Fenced like a batch's; returns the new last committed row."""
    old = [r for r in ledger.rows_at(spark, t.state, seen.version) if r.seq >= first.seq]
    replaced = [
        dataclasses.replace(r, status=Status.REPLACED.value)
        if r.status == Status.COMMITTED and r.seq <= last.seq
        else r
        for r in old
    ]
    result = tables.read(spark, staged.state)
    new = [  # the staged versions mean nothing here; the range is published at once, from before its first
        dataclasses.replace(
            r,
            attempt=attempt,
            output_base=first.output_base if r.seq == first.seq else None,
            state_version=first.state_version if r.seq == first.seq else None,
            fence=seen.next_fence,  # what ``ledger.commit_point`` commits with (the staged fences mean nothing here)
        )
        for r in ledger.committed_rows(ledger.rows_at(spark, staged.state, _version(spark, staged.state)))
        if r.seq >= first.seq
    ]
    rows = (
        ledger.to_frame(spark, [*replaced, *new])
        .unionByName(result.filter(_kept_since(first.seq)), allowMissingColumns=True)
        .localCheckpoint()
    )
    tables.create(spark, t.state, rows.schema, partition_by=BUCKET)  # a replay of every batch of a pipeline
    made = ledger.commit_point(
        spark,
        t.state,
        seen,
        tag,
        lambda txn_version: writes.rewrite(
            rows,
            t.state,
            f"{BUCKET} >= 0 OR {SEQ} >= {int(first.seq)}",
            tag,
            mergeSchema="true",
            **writes.once(txn_version),
        ),
    )
    if made is None:
        raise ConcurrentBatchError(f"{where}: fenced out at its commit point")
    return new[-1]


def _kept_since(seq: int) -> Column:
    """The window rows of a replay's ``_state`` and the late and rejected records of its batches
    from ``seq`` on (not its ledger rows: the commit writes those itself)."""
    return (F.col(BUCKET) >= 0) | ((F.col(BUCKET) != LEDGER_BUCKET) & (F.col(SEQ) >= seq))


def _version(spark: SparkSession, path: str) -> int:
    """The current version of the table at ``path``, which exists."""
    version = tables.latest_version(spark, path)
    assert version is not None
    return version
