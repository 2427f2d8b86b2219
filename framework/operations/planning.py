"""Planning a batch: from ``_state`` as of the version the attempt read its ledger at, the
buffer as of the version the last committed batch recorded (Delta time travel), and the
batch's input, so a plan is deterministic and any attempt of the batch
plans the same. Nothing is written here: a bound that a strict buffer would exceed stops the
batch before its writes (``check_buffer``).
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, replace
from typing import Callable

from pyspark import StorageLevel
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from ..definition.columns import BUCKET, RECORDS, TS
from ..definition.pipeline import Pipeline
from ..errors import BufferFullError
from ..execution import plans, ratelimit
from ..execution.batch import Batch, Effect, collected_stats, holds_until_close, strict
from ..execution.sources import BatchInput, CheckedInput
from ..execution.streamtime import arrival_order, at_batch_start, to_datetime, to_epoch_millis, with_stream_time
from ..storage import classic, sinks, state, tables, writes
from ..storage.ledger import LedgerRow
from .settings import Settings
from .steps import Steps

SCAN_RECORDS_PER_PARTITION = 200_000  # below this a batch's stream-time scan runs as one task


@dataclass(frozen=True, kw_only=True)
class Plan:
    """A planned batch and its counts."""

    effect: Effect
    input: BatchInput  # as validated (``OnePass`` may have validated it again)
    stream_time: int | None
    counts: dict  # the effect's counters
    closed: int  # windows closed
    emitted: int  # rows for the sink
    windows_open: int  # windows open after the batch
    buffered: dict | None  # rate-limiting buffer statistics
    changed_buckets: tuple[int, ...] | None  # the window-state partitions MERGEd state changes touch


class Kept:
    """Frames a batch reads more than once (by its counts and its writes), checkpointed for the
    duration of the batch, then released.

    A local checkpoint, not ``persist``: the frame is still computed once, by the first job that
    reads it, but the frame returned is a leaf, so each later read plans only what it adds. A
    cached frame keeps its whole plan, and Spark analyzes and optimizes that plan again for every
    query over it (bench/README.md#figures-behind-the-codes-choices). Callers use the frame returned.
    On local disk, not in memory: the blocks of the frames a month's chunk keeps, held in memory,
    left the jobs that read them none for their aggregations, which failed ("Unable to acquire
    memory") in a 1 GB driver; read back from disk (the OS's cache) they cost no more time.

    The frames kept from are held too, until the batch ends. Spark registers a plan's metrics
    weakly; a kept frame's lineage is what holds them, and the first job that reads the frame
    drops it as it checkpoints the frame. A job of the same query already running (a scalar
    subquery beside a broadcast) still reports to them: after a garbage collection the driver
    logged an ERROR per metric and task ("Failed to update accumulator ... (Unknown class)")."""

    def __init__(self):
        self.frames: list[DataFrame] = []
        self.sources: list[DataFrame] = []  # what each frame was kept from

    def __call__(self, df: DataFrame, now: bool = False) -> DataFrame:
        """``df`` kept; computed ``now``, or by the first job that reads it."""
        if any(df is k for k in self.frames):  # kept already (a plan's frame its commit reads too)
            return df
        kept = df.localCheckpoint(eager=now, storageLevel=StorageLevel.DISK_ONLY)
        self.frames.append(kept)
        self.sources.append(df)
        return kept

    def release(self) -> None:
        """Drops the checkpoints' blocks now, not when the JVM's garbage collector finds them."""
        classic.release(self.frames)


@dataclass(frozen=True)
class Pass:
    """What the batch's one pass over its records kept (``Batch.reduced``) and counted.

    Spark runs a stage again when the output of a task that ran is lost, and what that task
    observed on its way (``DataFrame.observe``) then counts twice. ``plan`` compares the
    records counted with those the kept rows hold (``RECORDS``) and, should they differ,
    validates the input and counts again, each in a query of its own."""

    checked: CheckedInput
    reduced: DataFrame
    counts: dict  # the plan's counters (``Effect.counters``), as observed
    records: int  # the records that passed the checks, as observed


class Reading(ABC):
    """How a batch reads its input, chosen once when its attempt starts (``reading_for``): what
    runs beside the ledger's read, what a committed batch id's re-run is checked with, and the
    input (and the one pass's reduction, if any) the plan takes."""

    def __init__(self, checked: CheckedInput):
        self.checked = checked

    def beside_ledger(self) -> Callable[[], None] | None:
        """Work to run while the ledger is read (None: nothing)."""
        return None

    def for_rerun(self) -> BatchInput:
        """The input, validated, for a re-run's fingerprint check."""
        return self.checked.read()

    @abstractmethod
    def for_plan(self, steps: Steps, p: Pipeline, last: LedgerRow | None, kept: Kept) -> tuple[BatchInput, Pass | None]:
        """The validated input the plan takes, and what a one pass kept of it (None: no pass)."""


class SeparateReads(Reading):
    """The input validated in a query of its own, beside the ledger's read; the plan reads the
    records again (every plan that needs arrival order, and every read over Spark Connect)."""

    validated: BatchInput | None = None

    def beside_ledger(self) -> Callable[[], None]:
        def validate() -> None:
            self.validated = self.checked.read()

        return validate

    def for_rerun(self) -> BatchInput:
        assert self.validated is not None  # beside the ledger's read
        return self.validated

    def for_plan(self, steps: Steps, p: Pipeline, last: LedgerRow | None, kept: Kept) -> tuple[BatchInput, Pass | None]:
        return self.for_rerun(), None


class OnePass(Reading):
    """The input validated in the plan's one pass over its records (docs/design.md#one-pass):
    the plan's reduction (``plans.reduce``) kept at once, the input's summary and the plan's
    counters observed on its way; before the attempt is marked, so a refused batch leaves nothing.
    For a plan that ``reduces`` its records, in a session whose checkpoint queries return observed
    metrics (a classic one: over Connect, pyspark 4.2 returns none to the client)."""

    def for_plan(self, steps: Steps, p: Pipeline, last: LedgerRow | None, kept: Kept) -> tuple[BatchInput, Pass | None]:
        """InputError as ``CheckedInput.read`` raises it, after the read. Should a summary not come
        back (a plan Spark optimized away), the input is validated in a query of its own, and the
        plan reduces it again."""
        checked = self.checked
        steps.step = "reading and validating the input"
        validation, counting = classic.observation(), classic.observation()
        records = checked.frame.observe(validation, *checked.summary()).filter(~checked.bad)
        records, _ = at_batch_start(records, last.stream_time if last else None, None)
        observe = lambda df, exprs: df.observe(counting, *[v.alias(k) for k, v in exprs.items()])  # noqa: E731
        reduced = kept(plans.reduce(p, records, checked.columns, observe), now=True)
        summary, counts = classic.observed(validation), classic.observed(counting)
        if summary is None or counts is None:
            return checked.read(), None
        inp = checked.validated(summary)
        if inp.rejected:  # ``plan`` checks the records kept, not those rejected: these are counted again
            inp = checked.read()
        return inp, Pass(checked, reduced, counts, summary["n"] - summary["rejected"])


def reading_for(s: Settings, p: Pipeline, checked: CheckedInput) -> Reading:
    """How a batch of ``p`` reads ``checked``: ``OnePass`` where its plan ``reduces`` the records
    and the session returns a checkpoint's observed metrics, else ``SeparateReads``."""
    one_pass = plans.reduces(p) and s.backend.observes_checkpoints
    return OnePass(checked) if one_pass else SeparateReads(checked)


def definition(p: Pipeline) -> str:
    """The parts of a pipeline that state depends on; changing them needs a new pipeline."""
    w = p.windows.spec() if p.windows is not None else "none"
    return f"keys={list(p.keys)}; windows={w}; aggregates={[a.describe() for a in p.aggregates]}"


@dataclass(frozen=True, kw_only=True)
class Planning:
    """What a batch is planned from (``plan``)."""

    s: Settings
    steps: Steps
    p: Pipeline
    t: tables.Tables
    seq: int
    inp: BatchInput
    last: LedgerRow | None  # the last committed batch
    read_version: int  # of ``_state``, where the attempt read the ledger (-1: no table yet)
    batch_end: dt.datetime | None
    kept: Kept
    passed: Pass | None = None  # what the batch's one pass kept and counted (``OnePass``)


@dataclass(frozen=True)
class Tally:
    """A planned batch's counts, from one query (``_tally``); None where not counted."""

    closed: int  # windows closed
    emitted: int | None  # sink rows (None: every closed window is one)
    opened: int | None  # windows the batch added to state (None: ``open`` counted instead)
    replaced: int  # stored windows a merge or an extension took out of state
    open: int | None  # windows open after the batch, counted
    changed: tuple[int, ...] | None  # the window-state partitions the state changes touch
    buffered: dict | None  # buffer statistics
    counters: dict | None  # the plan's counters (None: counted in the one pass)
    read: int | None  # the records the one pass's kept rows hold


def plan(x: Planning) -> Plan:
    """Plan the batch from ``_state`` as of ``x.read_version`` and the buffer as of the last
    committed batch (``_effect``), count what it does (every count in one query, ``_tally``;
    results stay checkpointed for the writes) and reconcile the counts (``_reconciled``)."""
    batch, effect = _effect(x)
    return _reconciled(x, batch, effect, _tally(x, batch, effect))


def _effect(x: Planning) -> tuple[Batch, Effect]:
    """The batch's effect, its results (and state changes) kept for the counts and the writes."""
    s, p, inp, last, kept = x.s, x.p, x.inp, x.last, x.kept
    stb = last.stream_time if last else None
    records, sta = _with_stream_time(s, p, x.seq, inp, stb, x.batch_end)
    batch = Batch(
        pipeline=p,
        seq=x.seq,
        records=records,
        stream_time_before=stb,
        stream_time=sta,
        state=state.windows(s.spark, x.t.state, x.read_version),
        bucket_ms=s.bucket_ms,
        buffer=_buffer(s, p, x.t, last),
        keep=kept,
        event_times=(inp.min_ts, inp.max_ts) if inp.min_ts is not None and inp.max_ts is not None else None,
        input_columns=inp.columns,
        reduced=x.passed.reduced if x.passed is not None else None,
    )
    effect = plans.effect_of(batch)
    if p.emission.buffered:
        effect = ratelimit.limit(batch, effect, locally=_small(s, inp, last))
    results = kept(effect.results)  # for the counts, the audit and the staging write
    effect = replace(effect, results=results, closed=results if effect.results_are_closed else effect.closed)
    if effect.state_changes is not None:  # read by the counts and the commit point's MERGE
        effect = replace(effect, state_changes=kept(effect.state_changes))
    return batch, effect


def _tally(x: Planning, batch: Batch, effect: Effect) -> Tally:
    """Every count of the planned batch in one Spark job (``tallied``)."""
    p, passed = x.p, x.passed
    frames = {"closed": _count(effect.closed)}
    if passed is None:
        frames["counters"] = _counting(effect)
    else:  # counted in the pass: what its kept rows hold, to check the count by
        frames["read"] = passed.reduced.agg(F.sum(RECORDS).alias("n"))
    if not (effect.results_are_closed and not p.steps):  # else every closed window is a sink row
        frames["emitted"] = _count(sinks.shape(p, effect.results, "", batch.stream_time))
    if effect.opened is not None and _open_before(x) is not None:
        frames["opened"] = _count(effect.opened)
        if effect.replaced is not None:
            frames["replaced"] = _count(effect.replaced)
    else:
        frames["open"] = _count(effect.open_windows)
    if effect.state_changes is not None:
        frames["changed"] = effect.state_changes.agg(F.collect_set(BUCKET).alias("buckets"))
    if effect.limited is not None:
        frames["buffered"] = effect.limited.stats()
    elif holds_until_close(p):
        frames["buffered"] = ratelimit.held_until_close(batch, effect)
    found = tallied(frames)

    def n(name: str) -> int | None:
        return found[name]["n"] if name in found else None

    return Tally(
        closed=found["closed"]["n"],
        emitted=n("emitted"),
        opened=n("opened"),
        replaced=n("replaced") or 0,
        open=n("open"),
        changed=tuple(sorted(found["changed"]["buckets"] or ())) if "changed" in found else None,
        buffered=collected_stats(found["buffered"]) if "buffered" in found else None,
        counters=found.get("counters"),
        read=(found["read"]["n"] or 0) if "read" in found else None,
    )


def _reconciled(x: Planning, batch: Batch, effect: Effect, tally: Tally) -> Plan:
    """The plan with its counts: windows open from the count before and the changes (or as
    counted), a strict buffer's bound checked, and a one pass's counters counted again, apart,
    when the records it observed are not those its kept rows hold (a task run twice)."""
    inp, passed = x.inp, x.passed
    open_before = _open_before(x)
    if tally.opened is not None and open_before is not None:
        open_now = open_before + tally.opened - tally.replaced - tally.closed
    else:
        assert tally.open is not None  # counted when the changes are not
        open_now = tally.open
    check_buffer(x.steps.where, x.p, open_now, tally.buffered)
    counts = tally.counters
    if passed is not None:
        counts = passed.counts
        if tally.read != passed.records:  # a task's observed records counted twice (its stage ran again)
            inp, counts = passed.checked.read(), tallied({"counters": _counting(effect)})["counters"]
    assert counts is not None  # counted in the tally or in the pass
    return Plan(
        effect=effect,
        input=inp,
        stream_time=batch.stream_time,
        counts=counts,
        closed=tally.closed,
        emitted=tally.closed if tally.emitted is None else tally.emitted,
        windows_open=open_now,
        buffered=tally.buffered if effect.limited is not None else None,
        changed_buckets=tally.changed,
    )


def _open_before(x: Planning) -> int | None:
    """Windows open before the batch, as the last committed batch recorded them (0 before any)."""
    return x.last.windows_open if x.last else 0


def _counting(effect: Effect) -> DataFrame:
    """The plan's counters over its per-record frame, as one row."""
    return effect.counted.agg(*[v.alias(k) for k, v in effect.counters.items()])


def _small(s: Settings, inp: BatchInput, last: LedgerRow | None) -> bool:
    """Whether a rate-limited batch's buffer is folded on the driver (``ratelimit.limit``): its
    records and the entries the buffer held before it (the last batch's metrics) are at most
    ``Settings.local_fold_records``."""
    held = json.loads(last.metrics).get("suppression_buffer_count_current") if last and last.metrics else None
    return inp.count + (held or 0) <= s.local_fold_records


def _buffer(s: Settings, p: Pipeline, t: tables.Tables, last: LedgerRow | None) -> DataFrame | None:
    """The buffer's rows as of the last committed batch, read from the current version when only
    maintenance landed since (its files may be compacted and VACUUMed away)."""
    version, path = last.version("buffer") if last else None, state.buffer_path(t, p)
    if version is None or path is None:
        return None
    return tables.read(s.spark, path, writes.same_rows(s.spark, path, version))


def _count(df: DataFrame) -> DataFrame:
    return df.agg(F.count(F.lit(1)).alias("n"))


def tallied(frames: dict[str, DataFrame]) -> dict[str, dict]:
    """Collect one-row frames (by name) in one query: their rows as dicts, every column of the
    frame a key (a null as None, which ``to_json`` leaves out). A batch's counts are one Spark
    job, not one query each: most of a small batch's cost is per query (analysis, planning,
    scheduling), not per row."""
    tagged = [
        df.select(F.lit(name).alias("_name"), F.to_json(F.struct(*df.columns)).alias("_row"))
        for name, df in frames.items()
    ]
    rows = {r["_name"]: json.loads(r["_row"]) for r in functools.reduce(DataFrame.unionByName, tagged).collect()}
    return {name: {c: rows[name].get(c) for c in df.columns} for name, df in frames.items()}


def _with_stream_time(
    s: Settings, p: Pipeline, seq: int, inp: BatchInput, stb: int | None, batch_end: dt.datetime | None
) -> tuple[DataFrame, int | None]:
    """The records with their stream time before each, and the stream time after the batch."""
    if plans.needs_order(p):
        order = arrival_order(inp.frame, TS, p.arrival, p.keys)
        parallelism = max(1, min(s.partitions, inp.count // SCAN_RECORDS_PER_PARTITION))
        records, sta = with_stream_time(inp.frame, order, TS, seq, stb, p.lateness == "record", parallelism, inp.max_ts)
    else:
        records, sta = at_batch_start(inp.frame, stb, inp.max_ts)
    if p.idle_advance_ms is not None and batch_end is not None:
        sta = max(x for x in (sta, to_epoch_millis(batch_end) - p.idle_advance_ms) if x is not None)
    return records, sta


def check_buffer(where: str, p: Pipeline, windows_open: int, buffered: dict | None) -> None:
    """Strict bounded buffers (``shut_down_when_full``) stop the batch before anything is
    written when the buffer would exceed a bound after any record (its largest size in the
    batch, ``buffered``): a rate-limiting buffer holds updated keys, a final-results one the
    open windows (``windows_open`` after the batch for lateness="batch", whose buffer is not
    modelled)."""
    if not strict(p):
        return
    buf = p.suppression.buffer
    what = "entries" if p.emission.buffered else "windows"
    if buffered is not None:
        count, size = buffered["count_max"], buffered["size_max"]
    else:
        count, size = windows_open, None
    over = []
    if buf.record_limit is not None and count > buf.record_limit:
        over.append(f"max_records={buf.record_limit}")
    if buf.byte_limit is not None and size is not None and size > buf.byte_limit:
        over.append(f"max_bytes={buf.byte_limit}")
    if over:
        reached = f"{count} {what}" + (f" ({size} bytes)" if size is not None else "")
        raise BufferFullError(
            f"{where}: suppression buffer {p.suppression.name or '<unnamed>'} would hold {reached}, over its "
            f"bound {' and '.join(over)} (shut_down_when_full). Nothing was committed; raise the bound "
            "or use BufferConfig.unbounded(), then re-run the batch."
        )


@dataclass(frozen=True, kw_only=True)
class Counted:
    """What one batch did, by number: a plan's totals, or one interval's share of a chunk's
    (``operations.chunk``); ``metrics`` turns it into the batch's metrics row."""

    counts: dict  # the plan's counters (``Effect.counters``)
    records_in: int
    rejected: int
    emitted: int  # rows for the sink
    closed: int  # windows closed
    windows_open: int  # after the batch
    stream_time: int | None  # after the batch
    buffered: dict | None = None  # rate-limiting buffer statistics


def batch_metrics(p: Pipeline, plan: Plan, started_at: float) -> dict:
    """The metrics row of a batch that ran as ``plan`` (``metrics``)."""
    inp = plan.input
    counted = Counted(
        counts=plan.counts,
        records_in=inp.count,
        rejected=inp.rejected,
        emitted=plan.emitted,
        closed=plan.closed,
        windows_open=plan.windows_open,
        stream_time=plan.stream_time,
        buffered=plan.buffered,
    )
    return metrics(p, counted, int((time.monotonic() - started_at) * 1000))


def metrics(p: Pipeline, c: Counted, duration_ms: int) -> dict:
    """A batch's metrics row (KIP-328 names), recorded in its ledger row and published; the
    ledger row also keeps ``rows_published``, the rows the sink received (after any filter)."""
    final, buffered, open_now = p.emission.final, c.buffered, c.windows_open
    values = dict(
        c.counts,
        records_in=c.records_in,
        rejected_records_total=c.rejected,
        rows_published=c.emitted,
        suppression_emit_total=c.closed if final else 0,
        windows_open=open_now,
        windows_closed=c.closed,
        suppression_buffer_count_current=open_now if final else None,
        suppression_buffer_count_max=(open_now + c.closed) if final else None,
        stream_time=to_datetime(c.stream_time),
        batch_duration_ms=duration_ms,
    )
    if buffered is not None:
        values.update(
            suppression_emit_total=c.emitted,
            suppression_buffer_count_current=buffered["count"],
            suppression_buffer_count_max=buffered["count_max"],
            suppression_buffer_size_current=buffered["size"],
            suppression_buffer_size_max=buffered["size_max"],
        )
    return values
