"""The batch protocol: run one batch of a pipeline exactly once, whatever else runs.

The protocol, its six steps and why each is safe are told once, in docs/design.md#batch-protocol.
Here each step is a method of ``BatchAttempt`` (``run`` calls them in order): 1. ``_read``
(the ledger, and the input as the ``planning.Reading`` chosen for it reads it: in a query of its
own beside the ledger, or in the plan's one pass over the records, docs/design.md#one-pass),
``_finish_previous``, ``_already_committed``, ``_check``; 2. ``planning.plan``; 3. ``_audit``;
4. ``_write`` (buffer and staged rows, by write point); 5. ``_commit`` and ``_commit_point``;
6. ``publication.finish``. Each step runs in a ``steps.Phase``, which decides what an error
there is (``_guarded``).

A ``BatchAttempt`` is one run of these steps against one table layout (a pipeline's tables, or
a replay's staged ones): everything it knows lives on it and ends with it. A ``ChunkAttempt``
(``chunk``) runs the same steps once for the consecutive intervals of a range.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, TypeVar

from pyspark.errors import PySparkException
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from ..definition.columns import GONE, LATE_BUCKET, RECORD, REJECTED_BUCKET, STREAM_BEFORE, TS
from ..definition.pipeline import Pipeline
from ..errors import (
    BatchFailedError,
    BatchOrderError,
    CommitLockTimeout,
    ConcurrentBatchError,
    DefinitionError,
    FingerprintMismatchError,
    FrameworkError,
    PublicationError,
    SkippedIntervalError,
    VersionSwitchedError,
    first_line,
)
from ..execution.sources import check_drift, check_input, rejected_records
from ..execution.streamtime import to_datetime, to_epoch_millis
from ..storage import classic, entries, files, ledger, metrics, sinks, state, tables, upgrade, writes
from ..storage.ledger import LedgerRow, Status
from .planning import Kept, Plan, Planning, Reading, batch_metrics, definition, plan, reading_for
from .publication import Manifest, finish, mark
from .settings import Settings
from .steps import Phase, Steps

if TYPE_CHECKING:
    from .quality import Report

log = logging.getLogger("framework.runtime")

T = TypeVar("T")
WRITE_POINTS = ("buffer", "output", "commit_point", "publish")
ATTEMPTED = "batch_id"  # in a staging folder: the batch its attempt runs
ATTEMPTED_BEFORE = "_batch_id"  # its name in folders that earlier versions staged (see ``PUBLICATION_BEFORE``)


@dataclass(frozen=True)
class Audit:
    """A batch's audit before it published (``quality.gate``): the report, and the results
    table's version whose rows it checked the batch's rows with (None: no table yet)."""

    report: Report
    table_version: int | None


@dataclass(frozen=True)
class BatchResult:
    """What ``run_batch`` did."""

    pipeline: str
    batch_id: str
    seq: int
    status: str  # "committed" | "already committed"
    emitted: int
    dropped_late: int
    stream_time: dt.datetime | None
    metrics: dict = field(default_factory=dict)
    committed_at: dt.datetime | None = None  # when its commit point landed (UTC), as its ledger row records it
    audit: Audit | None = None  # this run's audit of the rows it published (None: none ran, or another run committed)


def result_of(p: Pipeline, row: LedgerRow, status: str) -> BatchResult:
    """What committed batch ``row`` did, as its ledger row records it."""
    values = row.recorded_metrics() or {}
    published = values.get("rows_published", values.get("suppression_emit_total"))  # older rows: no count
    return BatchResult(
        pipeline=p.name,
        batch_id=row.batch_id,
        seq=row.seq,
        status=status,
        emitted=int(published or 0),
        dropped_late=int(values.get("late_records") or 0),
        stream_time=to_datetime(row.stream_time),
        metrics=values,
        committed_at=row.at,
    )


def other_input(where: str, done: LedgerRow, fingerprint: str) -> FingerprintMismatchError:
    """The error of committed batch ``done`` run again with input of another ``fingerprint``."""
    return FingerprintMismatchError(
        f"{where}: already committed (seq {done.seq}) with different input "
        f"(fingerprint {done.fingerprint} != {fingerprint}). Committed batches are immutable; "
        "use replay to re-run a historical range."
    )


class BatchAttempt:
    """One attempt of batch ``batch_id`` of ``p`` against the tables ``t``; ``run`` it once."""

    def __init__(self, s: Settings, p: Pipeline, batch_id: str, t: tables.Tables, ledgers: ledger.Ledgers):
        if not isinstance(batch_id, str) or not batch_id.strip() or len(batch_id) > 256:
            raise FrameworkError(f"pipeline {p.name!r}: batch_id must be a non-empty string (<= 256 chars)")
        self.s, self.p, self.batch_id, self.t, self.ledgers = s, p, batch_id, t, ledgers
        self.steps = Steps(s.spark, f"pipeline {p.name!r}, batch {batch_id!r}")
        self.attempt = uuid.uuid4().hex
        self.seen: ledger.Head | None = None  # the ledger as read
        self.rows: list[LedgerRow] = []  # its rows then
        self.last: LedgerRow | None = None  # the last committed batch
        self.seq = 0  # this batch's, once the ledger is read
        self.interval: tuple[dt.datetime, dt.datetime | None] | None = None  # a job's data interval
        self.allow_gap = False
        self.schemas: dict[str, str] = {}  # of the rows it staged, by name

    @property
    def staging(self) -> str:
        return f"{self.t.staging}/{self.seq}-{self.attempt}"

    def run(
        self,
        input_df: DataFrame,
        batch_end: dt.datetime | None = None,
        batch_start: dt.datetime | None = None,
        allow_gap: bool = False,
    ) -> BatchResult:
        """Run the protocol; a Spark error becomes a ``BatchFailedError`` naming its step, a wait
        for a table's commit lock that timed out a ``ConcurrentBatchError`` (or, once committed, a
        ``PublicationError``). ``batch_start`` (with ``batch_end``: a job's data interval) is
        recorded, and refused unless it is where the last committed batch's interval ended, or
        ``allow_gap``."""
        self.interval = (batch_start, batch_end) if batch_start is not None else None
        self.allow_gap = allow_gap
        return self._guarded(lambda: self._run(input_df, batch_end))

    def _guarded(self, work: Callable[[], T]) -> T:
        """``work``, its Spark errors and lock timeouts reported by the ``Phase`` they came in."""
        try:
            return work()
        except CommitLockTimeout as e:  # another writer is inside its commit, or frozen there
            raise self._failed(f"waited while {self.steps.step}: {e}", waited=True) from e
        except (classic.JavaError, PySparkException) as e:
            raise self._failed(f"failed while {self.steps.step}: {first_line(e)}", waited=False) from e

    def _failed(self, what: str, waited: bool) -> FrameworkError:
        """The error of a failure ``what`` in the current phase: a lock wait that timed out is
        a ``ConcurrentBatchError`` (re-run once that writer ended), a Spark error a
        ``BatchFailedError`` (fix the cause), either a ``PublicationError`` once committed."""
        where, phase = self.steps.where, self.steps.phase
        if phase is Phase.COMMITTED:
            return self._unpublished(what)
        error = ConcurrentBatchError if waited else BatchFailedError
        after = "once that writer has ended" if waited else "once the cause is fixed (see the chained error)"
        if phase is Phase.RERUN:
            return error(
                f"{where}: {what}. This batch id is committed already; nothing was written. Re-run it {after}: it "
                "reports 'already committed' with the same input, or a FingerprintMismatchError with other input."
            )
        staged = ""
        if phase is Phase.PREVIOUS:  # the last committed batch, before this one ran
            staged = "The last committed batch's rows stay staged; the next run of any batch of the pipeline " + (
                "publishes them. "
            )
        if waited:
            return error(
                f"{where}: {what}. {staged}This batch is not committed; re-run it once that writer has ended: it "
                "runs again or reports 'already committed'."
            )
        return error(
            f"{where}: {what}. {staged}This batch is not committed; fix the cause (see the chained Spark error) "
            "and re-run it."
        )

    def _run(self, input_df: DataFrame, batch_end: dt.datetime | None) -> BatchResult:
        """The protocol's steps (see the module docstring), in order."""
        started_at = time.monotonic()
        reading = self._read(input_df, batch_end)
        pending = self._finish_previous()
        done = self._already_committed(reading)
        if done is not None:
            return done
        self._check(pending)
        kept = Kept()
        try:
            inp, passed = reading.for_plan(self.steps, self.p, self.last, kept)  # before anything is written
            files.put_text(self.s.spark, f"{self.staging}/{ATTEMPTED}", self.batch_id)
            self.steps.step = "reading state and planning"
            assert self.seen is not None  # read in step 1
            planned = plan(
                Planning(
                    s=self.s,
                    steps=self.steps,
                    p=self.p,
                    t=self.t,
                    seq=self.seq,
                    inp=inp,
                    last=self.last,
                    read_version=self.seen.version,
                    batch_end=batch_end,
                    kept=kept,
                    passed=passed,
                )
            )
            rows_out = sinks.shape(self.p, planned.effect.results, self.batch_id, planned.stream_time)
            audit = self._audit(planned, rows_out)
            written = self._write(planned, rows_out)
            values = batch_metrics(self.p, planned, started_at)
            commit = self._commit(planned, input_df, written, values)
        finally:
            kept.release()
        metrics.report(self.p.name, self.batch_id, self.seq, values)
        self._write_point("publish", lambda: finish(self.steps, self.p, self.t, commit))
        log.info(
            "%s: committed seq=%d emitted=%d stream_time=%s in %.1f s",
            self.steps.where,
            self.seq,
            planned.emitted,
            to_datetime(planned.stream_time),
            time.monotonic() - started_at,
        )
        return BatchResult(
            pipeline=self.p.name,
            batch_id=self.batch_id,
            seq=self.seq,
            status=Status.COMMITTED.value,
            emitted=planned.emitted,
            dropped_late=int(planned.counts.get("late_records") or 0),
            stream_time=to_datetime(planned.stream_time),
            metrics=values,
            committed_at=commit.at,
            audit=audit,
        )

    # ---- 1. the ledger, the input, the previous publication and the checks ----------------------
    def _read(self, input_df: DataFrame, batch_end: dt.datetime | None) -> Reading:
        """Read the ledger and check the input's columns, choose how the input is read
        (``planning.reading_for``) and start that beside the ledger's read; check the input's
        schema drift."""
        checked = check_input(self.p, self.batch_id, input_df, self.s.latest_ms(batch_end))
        reading = reading_for(self.s, self.p, checked)
        beside = reading.beside_ledger()
        self._read_ledger(input_df, {"validating the input": beside} if beside is not None else {})
        return reading

    def _read_ledger(self, input_df: DataFrame, beside: dict[str, Callable[[], object]]) -> list:
        """Read the ledger (upgrading an earlier layout first) while ``beside`` (work by step)
        runs; learn the last committed batch and this batch's seq; check the input's schema
        drift. What ``beside`` returned, in order."""
        (self.seen, self.rows), *done = self.steps.concurrently(
            {"reading the ledger": lambda: self.ledgers.read(self.t.state), **beside}
        )
        if self.seen == ledger.NO_LEDGER and upgrade.upgrade(self.s.spark, self.p.name, self.t):
            self.seen, self.rows = self.ledgers.read(self.t.state)
        committed = ledger.committed_rows(self.rows)
        self.last = committed[-1] if committed else None
        self.seq = self.last.seq + 1 if self.last else 1
        check_drift(self.p, self.batch_id, input_df, self.last.input_schema if self.last else None)
        return done

    def _finish_previous(self) -> list[str]:
        """Publish the last committed batch if still staged; the staging folders of later attempts."""
        self.steps.enter(Phase.PREVIOUS, "publishing the last committed batch")
        left = finish(self.steps, self.p, self.t, self.last)
        self.steps.enter(Phase.BATCH, "checking the batch")
        return left

    def _already_committed(self, reading: Reading) -> BatchResult | None:
        """A committed batch id: what it did (same input), or a loud error (other input)."""
        done = next((r for r in reversed(ledger.committed_rows(self.rows)) if r.batch_id == self.batch_id), None)
        if done is None:
            return None
        self.steps.enter(Phase.RERUN, f"checking the input against committed batch {done.batch_id!r} (seq {done.seq})")
        inp = reading.for_rerun()
        if done.fingerprint != inp.fingerprint:
            raise other_input(self.steps.where, done, inp.fingerprint)
        return result_of(self.p, done, "already committed")

    def _check(self, pending: list[str]) -> None:
        """Refuse a batch out of order, over an unfinished attempt, or of a changed definition."""
        where, last = self.steps.where, self.last
        switched = ledger.switched_away(self.rows, self.p.version)
        if switched is not None and not self.s.following:
            raise VersionSwitchedError(
                f"{where}: the pipeline was switched from version {self.p.version} to version "
                f"{switched.switched_to}, whose batches it runs from the interval after batch {switched.batch_id!r}: "
                "nothing was written. Run the batch again: a job runs the version the pipeline is at "
                "(if the switch did not finish, run `finalresults versions switch` again first)."
            )
        if last is not None and self.batch_id < last.batch_id:
            raise BatchOrderError(
                f"{where}: out of order: batch {last.batch_id!r} (seq {last.seq}) is already "
                "committed and batch ids must increase."
            )
        if last is not None and last.definition != definition(self.p):
            raise DefinitionError(
                f"{where}: the pipeline definition changed incompatibly since batch "
                f"{last.batch_id!r}: was [{last.definition}], now [{definition(self.p)}]. "
                f"State cannot be reinterpreted: make the new definition the pipeline's version {self.p.version + 1} "
                "(Pipeline(..., version=...)) and build it beside this one (docs/operations.md#changing-a-pipeline)."
            )
        self._check_bucket()
        self._check_unfinished(pending)
        self._check_interval()

    def _check_bucket(self) -> None:
        """Refuse a runtime whose close-time bucket (``Runtime(bucket=...)``) is not the one window
        state was written in: it would take stored partitions for due or not by the wrong numbers,
        and leave a window's earlier partials out of its final row."""
        last, width = self.last, self.s.bucket_ms
        if last is None or last.bucket_ms is None or last.bucket_ms == width:
            return
        written, asked = (dt.timedelta(milliseconds=ms) for ms in (last.bucket_ms, width))
        raise DefinitionError(
            f"{self.steps.where}: window state is partitioned in close-time buckets of {written} (up to batch "
            f"{last.batch_id!r}), and this runtime's bucket is {asked}. Nothing was written; run the pipeline with "
            f"Runtime(bucket=timedelta(milliseconds={last.bucket_ms})), or create a pipeline with a new name."
        )

    def _check_interval(self) -> None:
        """Refuse a job's batch whose interval does not start where the last committed batch's
        ended: the records of the interval between would never be read."""
        last, interval = self.last, self.interval
        if last is None or last.interval_end is None or interval is None or self.allow_gap:
            return
        start = to_epoch_millis(interval[0])
        if start == last.interval_end:
            return
        ended = to_datetime(last.interval_end)
        assert ended is not None  # interval_end is set
        where, previous = self.steps.where, f"the last committed batch {last.batch_id!r} (seq {last.seq})"
        if start < last.interval_end:
            raise BatchOrderError(
                f"{where}: this batch starts at {interval[0]}, before {previous} ended ({ended}): the records "
                f"of [{interval[0]}, {ended}) were read by that batch and would be counted twice. Nothing was "
                "written. Run the interval that starts at the last one's end; or, if the overlap is intended, "
                "run this batch with --allow-gap."
            )
        missing = (ended, interval[0])
        raise SkippedIntervalError(
            f"{where}: the interval [{missing[0]}, {missing[1]}) was never run: {previous} ended at {missing[0]} "
            f"and this batch starts at {missing[1]}, so the records that arrived in between would be skipped. "
            f"Nothing was written. Run that interval first (finalresults backfill {SkippedIntervalError.JOB} "
            f"--from {missing[0].isoformat()} --to {missing[1].isoformat()}, with this run's --warehouse, "
            "--landing and --catalog), then this batch; or, if the gap is intended, run this batch with --allow-gap.",
            missing,
        )

    def _check_unfinished(self, pending: list[str]) -> None:
        """Refuse to run a batch while an attempt of another batch id at the same sequence
        number did not commit (it failed, or still runs): its records would be skipped. That
        batch may be re-run with corrected input; nothing else needs it."""
        for name in pending:
            if name.startswith(f"{self.seq}-"):
                folder = f"{self.t.staging}/{name}"
                other = files.get_text(self.s.spark, f"{folder}/{ATTEMPTED}", f"{folder}/{ATTEMPTED_BEFORE}")
                if other is not None and other != self.batch_id:
                    raise BatchOrderError(
                        f"{self.steps.where}: batch {other!r} (seq {self.seq}) was attempted and has not committed "
                        "(it failed, or still runs); run it to completion first, with its input corrected if "
                        "need be, so that its records are not skipped."
                    )

    # ---- 3. audit -------------------------------------------------------------------------------
    def _audit(self, planned: Plan, rows_out: DataFrame, batches: tuple[str, ...] = ()) -> Audit | None:
        """The quality gate over final or rate-limited rows, before anything is written (a
        chunk's: kept as the audit of each of ``batches``, its intervals that emitted rows)."""
        self.steps.step = "auditing the results"
        if not (planned.emitted and self.s.quality and self.p.emission.appended):
            return None
        from . import quality  # GX loads only in processes that have final or rate-limited rows to audit

        spark, output = self.s.spark, self.t.output
        version = tables.latest_version(spark, output)
        published = tables.read(spark, output, version) if version is not None else None
        report = quality.gate(
            spark,
            self.p,
            rows_out.drop(GONE),
            published,
            batches[0] if batches else self.batch_id,  # a chunk's Data Docs page: its first interval with rows
            self.s.warehouse,
            expectations_dir=self.s.expectations,
            batches=batches,
        )
        return Audit(report, version)

    # ---- 4. write -------------------------------------------------------------------------------
    def _write(self, planned: Plan, rows_out: DataFrame) -> dict[str, int | None]:
        """The buffer advanced and the sink rows staged, at the same time, beside reading the
        snapshots the commit point and publication write to; the version the buffer is at, by
        write point."""
        spark, p, t, effect = self.s.spark, self.p, self.t, planned.effect
        writing: dict[str, Callable[[], object]] = {
            "buffer": lambda: state.write_buffer(
                spark, state.buffer_path(t, p), effect, self._base("buffer"), self._tag("buffer")
            ),
        }
        if planned.emitted:
            staged = sinks.staged(p, rows_out)
            self.schemas["output"] = staged.schema.json()
            writing["output"] = lambda: files.stage(staged, f"{self.staging}/output")
        tasks: dict[str, Callable[[], object]] = {
            f"writing {point!r}": functools.partial(self._write_point, point, action)
            for point, action in writing.items()
        }
        tasks[f"reading {t.state}"] = functools.partial(tables.prepare, spark, t.state)  # what the commit point writes
        if planned.emitted:  # what publication writes
            tasks[f"reading {t.output}"] = functools.partial(tables.prepare, spark, t.output)
        return dict(zip(writing, self.steps.concurrently(tasks)))

    def _late_records(self, late: DataFrame, batch_id: str | Column, seq: int | Column) -> DataFrame:
        """Late records as kept: keys, event time, the stream time that made them late, the
        batch (columns, in a chunk: each record's interval's), the record."""
        return late.select(
            *self.p.keys,
            F.timestamp_millis(TS).alias("event_time"),
            F.timestamp_millis(STREAM_BEFORE).alias("stream_time_before"),
            F.lit(batch_id).alias("batch_id"),
            F.lit(seq).cast("long").alias("seq"),
            F.col(RECORD).alias("record"),
        )

    def _write_point(self, point: str, action: Callable[[], object]) -> object:
        """Write at ``point`` (``WRITE_POINTS``); losing a race to another writer stops the attempt."""
        self.steps.step = f"writing {point!r}"
        self.s.before_write(point)
        try:
            return action()
        except Exception as e:
            if not writes.lost_race(e):
                raise
            if point == "commit_point":
                raise self._fenced_out() from e
            if self.steps.phase is Phase.COMMITTED:
                raise self._unpublished(
                    f"another writer changed {point!r} at the same time, {writes.RETRIES} times"
                ) from e
            raise ConcurrentBatchError(
                f"{self.steps.where}: another attempt or writer changed {point!r} at the same time; this attempt "
                "stopped before its commit point. Re-run the batch: it runs again or reports 'already "
                "committed'."
            ) from e

    def _base(self, table: str) -> int | None:
        """The version of state table ``table`` the last committed batch left."""
        return self.last.version(table) if self.last is not None else None

    def _output_base(self) -> int | None:
        """A MERGEd sink's version before this attempt publishes (where a replay restores it);
        None for an appended one, which a replay trims by batch id instead."""
        return None if self.p.emission.appended else tables.latest_version(self.s.spark, self.t.output)

    def _tag(self, table: str) -> str:
        return f"{writes.TAG}{self.p.name}.{table}@{self.seq}:{self.attempt}"

    # ---- 5. the commit point --------------------------------------------------------------------
    def _commit(
        self,
        planned: Plan,
        input_df: DataFrame,
        written: dict[str, int | None],
        values: dict,
    ) -> LedgerRow:
        """Mark what to publish, then commit the state change, the ledger row and the late
        records in one commit: the commit point."""
        staged = tuple(name for name in ("output",) if name in written)
        inp = planned.input
        mark(self.s.spark, self.staging, Manifest(staged, self.schemas))
        assert self.seen is not None  # read in step 1
        late = None
        if planned.counts.get("late_records"):
            late = self._late_records(planned.effect.late, self.batch_id, self.seq)
        last, sta = self.last, planned.stream_time
        commit = LedgerRow(
            seq=self.seq,
            batch_id=self.batch_id,
            status=Status.COMMITTED.value,
            attempt=self.attempt,
            fingerprint=inp.fingerprint,
            records_in=inp.count,
            stream_time_before=last.stream_time if last else None,
            stream_time=sta,
            state_version=self.seen.version if self.seen.exists else None,
            input_schema=inp.schema_json,
            definition=definition(self.p),
            at=dt.datetime.now(dt.timezone.utc).replace(tzinfo=None),
            buffer_version=written.get("buffer", self._base("buffer")),
            windows_open=values.get("windows_open"),
            output_base=self._output_base(),
            metrics=json.dumps({k: v for k, v in values.items() if k != "stream_time"}),
            late_schema=late.schema.simpleString() if late is not None else None,
            interval_start=to_epoch_millis(self.interval[0]) if self.interval and self.interval[0] else None,
            interval_end=to_epoch_millis(self.interval[1]) if self.interval and self.interval[1] else None,
            fence=self.seen.next_fence,  # what ``ledger.commit_point`` commits with
            bucket_ms=self.s.bucket_ms,
        )
        bookkeeping = ledger.to_frame(self.s.spark, [commit])
        if late is not None:
            bookkeeping = bookkeeping.unionByName(entries.to_rows(late, self.seq, LATE_BUCKET))
        rejected = rejected_records(inp, self.batch_id, self.seq)
        if rejected is not None:
            bookkeeping = bookkeeping.unionByName(entries.to_rows(rejected, self.seq, REJECTED_BUCKET))
        self._write_point("commit_point", lambda: self._commit_point(commit, planned, bookkeeping))
        return commit

    def _commit_point(self, commit: LedgerRow | list[LedgerRow], planned: Plan, bookkeeping: DataFrame) -> None:
        """Pass the commit point, or stop: another batch or replay committed since the ledger
        was read. A commit that lost to maintenance (the fence unchanged) is made again."""
        spark, path, seen = self.s.spark, self.t.state, self.seen
        assert seen is not None  # read in step 1
        tag = self._tag("commit")

        change = state.Change(
            path=path,
            p=self.p,
            effect=planned.effect,
            bookkeeping=bookkeeping,
            stream_time=planned.stream_time,
            tag=tag,
            buckets=planned.changed_buckets,
        )
        made = ledger.commit_point(spark, path, seen, tag, lambda txn_version: state.commit(spark, change, txn_version))
        if made is None:
            raise self._fenced_out()
        self.ledgers.appended(path, seen, self.rows, commit if isinstance(commit, list) else [commit], made)
        self.steps.enter(Phase.COMMITTED, "publishing the batch")

    def _seqs(self) -> str:
        """This attempt's sequence number(s), as messages name them."""
        return f"seq {self.seq}"

    def _unpublished(self, what: str) -> PublicationError:
        """The error of a publication cut short after this attempt's commit point."""
        return PublicationError(
            f"{self.steps.where}: publishing the batch stopped: {what}. The batch IS committed ({self._seqs()}); "
            "its rows stay staged and the next run of any batch of the pipeline publishes them, once (a re-run "
            "of this batch publishes them and reports 'already committed')."
        )

    def _fenced_out(self) -> ConcurrentBatchError:
        return ConcurrentBatchError(
            f"{self.steps.where}: another attempt of this batch (or a replay) committed first; this attempt "
            "published nothing. Re-run the batch: it reports 'already committed' or runs on the new state."
        )
