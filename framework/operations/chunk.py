"""A chunk of a range: consecutive intervals run as one batch, recorded as the intervals it covers.

A backfill of N intervals used to cost N batches, each paying a batch's fixed cost (a dozen
Spark queries, two Delta commits, a publication). A ``ChunkAttempt`` runs the records of many
intervals in one plan and one commit point, and writes a ledger row per interval with what a
run of that interval alone would have recorded: its batch id and seq, its interval, the
fingerprint of its own records, stream time before and after it, its own metrics; its results
carry the ``emitted_batch_id`` and ``emitted_stream_time`` of the interval that closed them.
Why that is the per-interval run's outcome, exactly: docs/design.md#chunks.

``chunk_refusal`` says which pipelines run this way so far; ``Runtime.run_range`` splits a range
into chunks (``split``) and runs the others interval by interval.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import time
from dataclasses import dataclass
from typing import Callable

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from ..definition.columns import INTERVAL, LATE_BUCKET, REJECTED_BUCKET, STREAM_BEFORE, TS
from ..definition.pipeline import Pipeline
from ..definition.windows import SessionWindows, SlidingWindows, TimeWindows
from ..errors import ConcurrentBatchError, FrameworkError, InputError, QualityGateError
from ..execution import plans
from ..execution.batch import Batch, Effect, strict
from ..execution.sources import BatchInput, CheckedInput, check_input, fingerprint, record_checks, rejected_records
from ..execution.streamtime import (
    NO_TIME,
    arrival_order,
    first_reaching,
    pick,
    to_epoch_millis,
    with_stream_time,
    within_intervals,
)
from ..storage import entries, files, ledger, metrics, sinks, state, tables
from ..storage.ledger import LedgerRow, Status
from ..storage.sqltext import quoted
from .attempt import ATTEMPTED, BatchAttempt, BatchResult, other_input, result_of
from .planning import SCAN_RECORDS_PER_PARTITION, Counted, Kept, Plan, definition, tallied
from .planning import metrics as metrics_of
from .publication import Manifest, finish, mark
from .settings import Settings


@dataclass(frozen=True)
class Interval:
    """One interval of a range: its batch id and data interval ``[start, end)`` (naive UTC)."""

    batch_id: str
    start: dt.datetime
    end: dt.datetime


@dataclass(frozen=True)
class Range:
    """Consecutive ``intervals`` and their records: ``input_df`` holds the records of all of
    them, each in the interval its ``arrived`` column (a job's ``ingest_time``) falls in."""

    intervals: list[Interval]
    input_df: DataFrame
    arrived: str

    def __post_init__(self):
        """Refuse intervals that are not consecutive, non-empty and in the order of their ids:
        a chunk checks only its first interval against the ledger, as a batch would."""
        if not self.intervals:
            raise FrameworkError("a range needs at least one interval")
        if not self.intervals[0].start < self.intervals[0].end:
            raise FrameworkError(f"the interval {self.intervals[0]} is empty")
        for a, b in zip(self.intervals, self.intervals[1:]):
            if not (a.end == b.start < b.end and a.batch_id < b.batch_id):
                raise FrameworkError(
                    f"the intervals of a range must follow each other, each ending where the next starts, with "
                    f"batch ids in increasing order: {a} is followed by {b}"
                )


def chunk_refusal(p: Pipeline) -> str | None:
    """Why a range of ``p`` runs interval by interval; None when it runs in chunks.

    A chunk attributes each closed window to the interval whose stream time closed it and
    counts each interval's open windows: that is exact for time, sliding and session windows
    with final results (sliding windows from the record that created each, sessions from what
    each record opened and merged), and for a MERGEd sink of time windows (each
    window's last value, by the last interval that updated it). The MERGEd sinks of sliding and
    session windows (updates record by record, tombstones interval by interval), a rate-limited
    buffer (it emits at times its own order decides) and a strict bounded buffer (measured after
    every record) still run one batch per interval."""
    if not isinstance(p.windows, (TimeWindows, SessionWindows, SlidingWindows)):
        return "a chunk counts windows only; plain tables run per interval"
    if p.emission.buffered:
        return "a rate-limiting buffer emits at times its own order decides; it runs per interval"
    if not p.emission.final and not isinstance(p.windows, TimeWindows):
        return "a chunk updates a MERGEd sink of time windows only; other windows' updates run per interval"
    if strict(p):
        return "a buffer that shuts down when full is measured after every record; it runs per interval"
    return None


def gate_refusal(s: Settings, p: Pipeline) -> str | None:
    """Why a range of ``p`` runs interval by interval for its quality gate: a suite with
    table-wide expectations (row counts, means) judges a batch's rows together, so a chunk's rows
    could pass where one interval's would not. Row-by-row suites judge each row alone: the
    chunk's audit is each interval's."""
    if not (s.quality and p.emission.appended):
        return None
    from .suites import load_suite, row_by_row  # Great Expectations: only where a gate runs

    if row_by_row(p, load_suite(p, s.expectations)):
        return None
    return "the quality suite has table-wide expectations (row counts, means): each interval's rows are gated alone"


class SharedWarnings(FrameworkError):
    """A chunk's audit failed a warning: recorded, it would be every emitting interval's, though
    some of their rows pass. The chunk writes nothing and its intervals run one at a time, each
    audited alone, as a failed critical expectation's chunk does."""


class ChunkAttempt(BatchAttempt):
    """One attempt of the consecutive ``intervals`` of ``p`` as one batch; ``run`` it once."""

    def __init__(self, s: Settings, p: Pipeline, intervals: list[Interval], t: tables.Tables, ledgers: ledger.Ledgers):
        super().__init__(s, p, intervals[0].batch_id, t, ledgers)
        self.intervals = intervals
        if len(intervals) > 1:
            self.steps.where = f"pipeline {p.name!r}, batches {intervals[0].batch_id!r}..{intervals[-1].batch_id!r}"

    def _seqs(self) -> str:
        return f"seqs {self.seq}..{self.seq + len(self.intervals) - 1}" if len(self.intervals) > 1 else super()._seqs()

    def run_chunk(self, input_df: DataFrame, arrived: str, allow_gap: bool = False) -> list[BatchResult]:
        """Run the chunk: ``input_df`` holds the records of every interval, each placed in the
        interval its ``arrived`` column falls in. Results per interval, in order."""
        first = self.intervals[0]
        self.interval = (first.start, first.end)
        self.allow_gap = allow_gap
        return self._guarded(lambda: self._run_chunk(input_df, arrived))

    def _run_chunk(self, input_df: DataFrame, arrived: str) -> list[BatchResult]:
        started_at = time.monotonic()
        checked, summaries = self._read_chunk(input_df, arrived)
        pending = self._finish_previous()
        done = self._committed_of(summaries)
        if done:
            return done
        self._check(pending)
        each, whole = self._validate(checked, summaries)
        kept = Kept()
        try:
            files.put_text(self.s.spark, f"{self.staging}/{ATTEMPTED}", self.batch_id)
            self.steps.step = "reading state and planning"
            times = self._stream_times(each)
            planned, per_interval, rows_out = self._plan(whole, each, times, kept)
            emitting = tuple(iv.batch_id for iv, c in zip(self.intervals, per_interval) if c.emitted)
            audit = self._audit(planned, rows_out.drop(INTERVAL), emitting)
            if audit is not None and len(emitting) > 1 and audit.report.failed_warnings:
                raise SharedWarnings(f"{self.steps.where}: {len(audit.report.failed_warnings)} warning(s) failed")
            written = self._write(planned, rows_out.drop(INTERVAL))
            duration = int((time.monotonic() - started_at) * 1000) // len(self.intervals)
            values = [metrics_of(self.p, c, duration) for c in per_interval]
            commits = self._commit_chunk(planned, each, times, written, values)
        finally:
            kept.release()
        for row, v in zip(commits, values):
            metrics.report(self.p.name, row.batch_id, row.seq, v)
        self._write_point("publish", lambda: finish(self.steps, self.p, self.t, commits[-1]))
        results = [result_of(self.p, row, Status.COMMITTED.value) for row in commits]
        results[-1] = dataclasses.replace(results[-1], audit=audit)
        return results

    # ---- 1. the ledger and each interval's input ------------------------------------------------
    def _read_chunk(self, input_df: DataFrame, arrived: str) -> tuple[CheckedInput, dict[int, dict]]:
        """Read the ledger and, at the same time, summarize each interval's records (one query:
        ``CheckedInput.summary`` per ``INTERVAL``)."""
        index = placed(arrived, self.intervals)
        checked = check_input(self.p, self.batch_id, input_df, self._latest(index))
        frame = checked.frame.filter(in_range(arrived, self.intervals)).withColumn(INTERVAL, index)
        checked = dataclasses.replace(checked, frame=frame)

        def summarize() -> dict[int, dict]:
            rows = frame.groupBy(INTERVAL).agg(*checked.summary()).collect()
            return {r[INTERVAL]: r.asDict() for r in rows}

        (summaries,) = self._read_ledger(input_df, {"validating the input": summarize})
        return checked, summaries

    def _latest(self, index: Column) -> Column | None:
        """Each record's latest plausible event time: its own interval's end plus the clock skew,
        as its batch would check it (None: no limit)."""
        limits = [self.s.latest_ms(iv.end) for iv in self.intervals]
        return None if limits[0] is None else pick(index, limits)

    def _committed_of(self, summaries: dict[int, dict]) -> list[BatchResult]:
        """The chunk's results when every interval is committed already with the same input (a
        retry beside a first attempt that committed); a ``FingerprintMismatchError`` naming an
        interval committed with other input. Empty when none is committed; a ``ConcurrentBatchError``
        when some are (another runner committed them since the range was split)."""
        by_id = {r.batch_id: r for r in ledger.committed_rows(self.rows)}
        committed = [iv.batch_id for iv in self.intervals if iv.batch_id in by_id]
        if committed and len(committed) < len(self.intervals):
            raise ConcurrentBatchError(
                f"{self.steps.where}: intervals {committed[0]!r}..{committed[-1]!r} of this chunk were committed by "
                "another runner since the range was split; nothing of this chunk was written. Run the range again: "
                "it resumes after the last committed interval."
            )
        done = []
        for k, iv in enumerate(self.intervals):
            row = by_id.get(iv.batch_id)
            if row is None:
                return []
            given = fingerprint(summaries.get(k) or {"n": 0, "h": None})
            if row.fingerprint != given:
                raise other_input(f"pipeline {self.p.name!r}, batch {iv.batch_id!r}", row, given)
            done.append(result_of(self.p, row, "already committed"))
        return done

    def _validate(self, checked: CheckedInput, summaries: dict[int, dict]) -> tuple[list[BatchInput], BatchInput]:
        """Each interval's input validated as a batch of its own would be (an ``InputError``
        names the first interval that fails), and the chunk's as a whole."""
        self.steps.step = "validating the input"
        each = []
        for k, iv in enumerate(self.intervals):
            summary = summaries.get(k) or _empty(checked)
            failing = any(summary[f"failed_{i}"] for i in range(len(checked.checks)))
            one = dataclasses.replace(  # the interval's records, with its batch's own checks where one fails
                checked,
                batch_id=iv.batch_id,
                frame=checked.frame.filter(F.col(INTERVAL) == k),
                checks=record_checks(self.p, self.s.latest_ms(iv.end)) if failing else checked.checks,
            )
            each.append(one.validated(summary))
        total = _empty(checked)
        for row in summaries.values():
            for name, value in row.items():
                if name == INTERVAL or value is None:
                    continue
                previous = total[name]
                total[name] = value if previous is None else _combine(name, previous, value)
        return each, checked.validated(total)

    def _stream_times(self, each: list[BatchInput]) -> list[tuple[int | None, int | None]]:
        """Stream time before and after each interval, as its batch would have: the largest
        event time so far, with the pipeline's idle advance at each interval's end."""
        times, before = [], self.last.stream_time if self.last else None
        for iv, inp in zip(self.intervals, each):
            candidates = [before, inp.max_ts]
            if self.p.idle_advance_ms is not None:
                candidates.append(to_epoch_millis(iv.end) - self.p.idle_advance_ms)
            after = max((t for t in candidates if t is not None), default=None)
            times.append((before, after))
            before = after
        return times

    # ---- 2. the plan, counted per interval ------------------------------------------------------
    def _plan(
        self, inp: BatchInput, each: list[BatchInput], times: list[tuple[int | None, int | None]], kept: Kept
    ) -> tuple[Plan, list[Counted], DataFrame]:
        """Plan the chunk as one batch whose records are judged against the stream time before
        each (``lateness="record"``, arrival order: interval first) or before their interval
        (``"batch"``); each closed window goes to the interval whose stream time after it first
        reached the window's close time. Counted per interval in one query."""
        s, p, w = self.s, self.p, self.p.windows
        assert isinstance(w, (TimeWindows, SessionWindows, SlidingWindows)) and self.seen is not None  # step 1
        stb = self.last.stream_time if self.last else None
        befores = [NO_TIME if b is None else b for b, _ in times]
        afters = [NO_TIME if a is None else a for _, a in times]
        records = self._with_stream_time(inp, stb, befores)
        batch = Batch(
            pipeline=p,
            seq=self.seq,
            records=records,
            stream_time_before=stb,
            stream_time=times[-1][1],
            state=state.windows(s.spark, self.t.state, self.seen.version),
            bucket_ms=s.bucket_ms,
            keep=kept,
            event_times=(inp.min_ts, inp.max_ts) if inp.min_ts is not None and inp.max_ts is not None else None,
            input_columns=inp.columns,
        )
        effect = plans.effect_of(batch)
        grace = w.close_after_end_ms()  # a window closes when end + grace <= stream time: end <= time - grace
        closing = first_reaching("window_end", [a if a == NO_TIME else a - grace for a in afters])
        if p.emission.final:  # each closed window, by the interval that closed it
            results = kept(effect.results.withColumn(INTERVAL, closing))
            effect = dataclasses.replace(effect, results=results, closed=results)
        else:  # each updated window's value after the chunk, by the last interval that updated it
            results = kept(effect.results)
            effect = dataclasses.replace(effect, results=results, closed=effect.closed.withColumn(INTERVAL, closing))
        ids = [iv.batch_id for iv in self.intervals]
        rows_out = sinks.shape(p, results, pick(F.col(INTERVAL), ids), pick(F.col(INTERVAL), afters))
        per_interval = self._counted(effect, rows_out, each, times)
        planned = Plan(
            effect=effect,
            input=inp,
            stream_time=times[-1][1],
            counts={},
            closed=sum(c.closed for c in per_interval),
            emitted=sum(c.emitted for c in per_interval),
            windows_open=per_interval[-1].windows_open,
            buffered=None,
            changed_buckets=None,
        )
        return planned, per_interval, rows_out

    def _counted(
        self,
        effect: Effect,
        rows_out: DataFrame,
        each: list[BatchInput],
        times: list[tuple[int | None, int | None]],
    ) -> list[Counted]:
        """What each interval did, by number, from the chunk's effect (its results attributed to
        the intervals that closed them) and sink rows: in one query. The windows open after each
        interval: those open before the chunk, plus those each interval opened, less those it
        closed. Sessions merge: a record opens one less than the open sessions it joins (the
        fold's ``_opens``), and the fold joins a record to open sessions only, so no session is
        counted closed and then merged away."""
        n = len(self.intervals)
        if effect.opens is not None:  # sessions merge: each record's sessions opened, merging ones negative
            opened = _per_interval(effect.opens, {"n": F.sum("_opens")})
        else:
            assert effect.opened is not None  # time windows count the windows they open
            opened = _per_interval(effect.opened, {"n": F.count(F.lit(1))})
        # a MERGEd sink's batch publishes every window it updated; final results each once, when closed
        published = effect.touched if effect.touched is not None else rows_out
        tally = tallied(
            {
                "closed": _per_interval(effect.closed, {"n": F.count(F.lit(1))}),
                "emitted": _per_interval(published, {"n": F.count(F.lit(1))}),
                "counters": _per_interval(effect.counted, effect.counters),
                "open": effect.open_windows.agg(F.count(F.lit(1)).alias("n")),
                "opened": opened,
            }
        )
        closed, emitted = (_by_interval(tally[name], n, "n", 0) for name in ("closed", "emitted"))
        by_name = {name: _by_interval(tally["counters"], n, name, None) for name in effect.counters}
        counters = [{name: values[k] for name, values in by_name.items()} for k in range(n)]
        change = [o - c for o, c in zip(_by_interval(tally["opened"], n, "n", 0), closed)]
        open_before = self.last.windows_open if self.last and self.last.windows_open is not None else None
        if open_before is None:  # no count recorded (no batch yet, or an old ledger): from the count after
            open_before = tally["open"]["n"] - sum(change)
        per_interval, open_now = [], open_before
        for k, (one, (_, after)) in enumerate(zip(each, times)):
            open_now += change[k]
            per_interval.append(
                Counted(
                    counts=counters[k],
                    records_in=one.count,
                    rejected=one.rejected,
                    emitted=emitted[k],
                    closed=closed[k],
                    windows_open=open_now,
                    stream_time=after,
                )
            )
        return per_interval

    def _with_stream_time(self, inp: BatchInput, stb: int | None, befores: list[int]) -> DataFrame:
        """The chunk's records with ``STREAM_BEFORE`` (and ``ARRIVAL``, interval first, where
        the plan needs arrival order): never below the stream time before the record's interval,
        which holds the idle advance of the intervals before it. As many intervals as the scan
        has partitions or more: each interval on its own, a partition's part. Fewer (one, or a few
        large ones, which would leave most of the cluster idle as partitions): the chunk is
        scanned as one batch would be, in parallel over its records, interval first."""
        p, frame, before = self.p, inp.frame, pick(F.col(INTERVAL), befores)
        if not plans.needs_order(p):
            return frame.withColumn(STREAM_BEFORE, before.cast("long"))
        order = arrival_order(frame, TS, p.arrival, p.keys)
        seq = F.lit(self.seq) + F.col(INTERVAL)
        per_record = p.lateness == "record"
        if len(self.intervals) >= self.s.partitions:
            return within_intervals(frame, order, TS, INTERVAL, seq, before, per_record)
        parallelism = max(1, min(self.s.partitions, inp.count // SCAN_RECORDS_PER_PARTITION))
        interval_first = [INTERVAL, *(c for c in order if c != INTERVAL)]
        # the largest event time of earlier intervals is at most the stream time before this one
        records, _ = with_stream_time(frame, interval_first, TS, seq, stb, per_record, parallelism, inp.max_ts)
        judged = F.greatest(STREAM_BEFORE, before) if per_record else before
        return records.withColumn(STREAM_BEFORE, judged.cast("long"))

    # ---- 5. the commit point: a ledger row per interval -----------------------------------------
    def _commit_chunk(
        self,
        planned: Plan,
        each: list[BatchInput],
        times: list[tuple[int | None, int | None]],
        written: dict[str, int | None],
        values: list[dict],
    ) -> list[LedgerRow]:
        """Mark what to publish, then commit the state change, a ledger row per interval and the
        late and rejected records, each under its interval's batch, in one commit."""
        mark(self.s.spark, self.staging, Manifest(tuple(n for n in ("output",) if n in written), self.schemas))
        assert self.seen is not None  # read in step 1
        at = dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)
        ids, base = [iv.batch_id for iv in self.intervals], self._output_base()  # base: before the chunk
        batch_id, seq = pick(F.col(INTERVAL), ids), F.lit(self.seq) + F.col(INTERVAL)
        late = None
        if any(v.get("late_records") for v in values):
            late = self._late_records(planned.effect.late, batch_id, seq)
        rows = []
        for k, (iv, inp, (before, after), v) in enumerate(zip(self.intervals, each, times, values)):
            rows.append(
                LedgerRow(
                    seq=self.seq + k,
                    batch_id=iv.batch_id,
                    status=Status.COMMITTED.value,
                    attempt=self.attempt,
                    fingerprint=inp.fingerprint,
                    records_in=inp.count,
                    stream_time_before=before,
                    stream_time=after,
                    # the state before an interval inside the chunk was never a version: a replay
                    # starts at the chunk's first interval (``replay``'s restore points)
                    state_version=self.seen.version if self.seen.exists and k == 0 else None,
                    input_schema=inp.schema_json,
                    definition=definition(self.p),
                    at=at,
                    buffer_version=self._base("buffer"),
                    windows_open=v.get("windows_open"),
                    output_base=base,  # where a replay of the chunk starts
                    metrics=json.dumps({name: x for name, x in v.items() if name != "stream_time"}),
                    late_schema=late.schema.simpleString() if late is not None and v.get("late_records") else None,
                    interval_start=to_epoch_millis(iv.start),
                    interval_end=to_epoch_millis(iv.end),
                    fence=self.seen.next_fence,
                    bucket_ms=self.s.bucket_ms,
                )
            )
        bookkeeping = ledger.to_frame(self.s.spark, rows)
        if late is not None:
            bookkeeping = bookkeeping.unionByName(entries.to_rows(late, F.col("seq"), LATE_BUCKET))
        rejected = rejected_records(planned.input, batch_id, seq)
        if rejected is not None:
            bookkeeping = bookkeeping.unionByName(entries.to_rows(rejected, F.col("seq"), REJECTED_BUCKET))
        self._write_point("commit_point", lambda: self._commit_point(rows, planned, bookkeeping))
        return rows


def _micros(t: dt.datetime) -> int:
    return to_epoch_millis(t) * 1000


def _empty(checked: CheckedInput) -> dict:
    """``CheckedInput.summary``'s row of an interval without records."""
    return {"n": 0, "rejected": 0, "max_ts": None, "min_ts": None, "h": None} | {
        f"failed_{i}": 0 for i in range(len(checked.checks))
    }


def _combine(name: str, a, b):
    """Two intervals' summary values as one summary of both."""
    return max(a, b) if name == "max_ts" else min(a, b) if name == "min_ts" else a + b


def _per_interval(df: DataFrame, exprs: dict[str, Column]) -> DataFrame:
    """``exprs`` aggregated per ``INTERVAL`` of ``df``, as one row (for ``tallied``)."""
    grouped = df.groupBy(INTERVAL).agg(*[v.alias(k) for k, v in exprs.items()])
    return grouped.agg(F.collect_list(F.struct(INTERVAL, *exprs)).alias("rows"))


def _by_interval(row: dict, n: int, name: str, missing):
    """``_per_interval``'s value ``name`` for each of the ``n`` intervals (``missing`` where an
    interval has no rows)."""
    values = [missing] * n
    for r in row["rows"] or ():
        if r.get(INTERVAL) is not None and 0 <= r[INTERVAL] < n:
            values[r[INTERVAL]] = r.get(name, missing)
    return values


# Records a chunk holds at most by default (an interval holding more is a chunk): a month of hours at
# 10,000 records an hour ran as one chunk in 53 s, as four of 2,000,000 in 74 s (bench/README.md).
CHUNK_RECORDS = 10_000_000
Progress = Callable[[list[BatchResult], str], None]  # a chunk's (or an interval's) results, and how it ran


def run_chunks(
    s: Settings,
    ledgers: ledger.Ledgers,
    p: Pipeline,
    t: tables.Tables,
    r: Range,
    bound: int,
    allow_gap: bool,
    progress: Progress | None = None,
    after: Callable[[list[BatchResult]], None] | None = None,
) -> list[BatchResult]:
    """Run the range ``r`` of ``p`` against the tables ``t`` (a pipeline's, or a replay's staged
    ones) in chunks of at most ``bound`` records (``split``), or interval by interval where a
    chunk cannot count ``p`` exactly (``chunk_refusal``); ``after(results)`` and
    ``progress(results, how)`` after each. ``allow_gap``: the first interval may start anywhere,
    not only where the last committed one ended."""
    intervals, input_df, arrived = r.intervals, r.input_df, r.arrived
    why = chunk_refusal(p) or gate_refusal(s, p)
    index = placed(arrived, intervals)
    results: list[BatchResult] = []

    def gap() -> bool:  # the intervals of a range follow each other: only the first may not
        return allow_gap and not results

    def ran(done: list[BatchResult], how: str) -> None:
        results.extend(done)
        if after is not None:
            after(done)
        if progress is not None:
            progress(done, how)

    if why is not None:
        for k, iv in enumerate(intervals):
            mine = input_df.filter(in_range(arrived, intervals) & (index == k))
            one = BatchAttempt(s, p, iv.batch_id, t, ledgers).run(mine, iv.end, iv.start, gap())
            ran([one], f"one batch per interval: {why}")
        return results
    counts = {r[0]: r[1] for r in input_df.filter(in_range(arrived, intervals)).groupBy(index).count().collect()}
    _, rows = ledgers.read(t.state)
    committed = {r.batch_id for r in ledger.committed_rows(rows)}
    todo = split(intervals, [counts.get(k, 0) for k in range(len(intervals))], committed, bound)
    while todo:
        chunk = todo.pop(0)
        try:
            ran(ChunkAttempt(s, p, chunk, t, ledgers).run_chunk(input_df, arrived, gap()), "one chunk")
        except (InputError, QualityGateError, SharedWarnings) as e:
            if len(chunk) == 1:
                raise
            # as one by one: the intervals before the one whose records or rows fail commit, and
            # its own error names it (a refused chunk wrote nothing: its intervals run again);
            # after the interval whose rows fail a warning, the rest is a chunk again
            how = f"one interval at a time: the chunk was refused ({type(e).__name__})"
            for k, iv in enumerate(chunk):
                (one,) = ChunkAttempt(s, p, [iv], t, ledgers).run_chunk(input_df, arrived, gap())
                ran([one], how)
                if one.audit is not None and one.audit.report.failed_warnings and chunk[k + 1 :]:
                    todo.insert(0, chunk[k + 1 :])
                    break
    return results


def in_range(arrived: str, intervals: list[Interval]) -> Column:
    """Whether a record's ``arrived`` time is in the consecutive ``intervals``."""
    arrival, utc = F.expr(f"CAST({quoted(arrived)} AS TIMESTAMP)"), dt.timezone.utc  # as ``placed`` names it
    first, last = F.lit(intervals[0].start.replace(tzinfo=utc)), F.lit(intervals[-1].end.replace(tzinfo=utc))
    return (arrival >= first) & (arrival < last)


def placed(arrived: str, intervals: list[Interval]) -> Column:
    """The index of the interval of ``intervals`` (consecutive) a record's ``arrived`` time
    falls in; ``len(intervals)`` after the last (records before the first are not asked).
    Intervals of one length (a schedule's ``every``: backfills, replays, builds) are a division,
    a tenth of the cost of a search over a week's bounds; others, ``first_reaching``."""
    micros = f"unix_micros(CAST({quoted(arrived)} AS TIMESTAMP))"
    first, length = _micros(intervals[0].start), _micros(intervals[0].end) - _micros(intervals[0].start)
    if all(_micros(iv.end) - _micros(iv.start) == length for iv in intervals):
        index = f"greatest(-1L, least({len(intervals)}L, ({micros} - {first}L) DIV {length}L))"  # -1: before
        return F.expr(f"CAST({index} AS INT)")
    return first_reaching(micros, [_micros(iv.end) - 1 for iv in intervals])  # before the end: at most end - 1


def split(intervals: list[Interval], records: list[int], committed: set[str], bound: int) -> list[list[Interval]]:
    """Consecutive ``intervals`` (holding ``records`` each) in chunks of at most ``bound``
    records (an interval holding more is a chunk of its own),
    committed intervals apart from the others: a chunk is all committed (each reports 'already
    committed') or none is."""
    out: list[list[Interval]] = []
    size = 0
    for iv, n in zip(intervals, records):
        fits = out and size + n <= bound and (iv.batch_id in committed) == (out[-1][0].batch_id in committed)
        if fits:
            out[-1].append(iv)
            size += n
        else:
            out.append([iv])
            size = n
    return out
