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
from dataclasses import dataclass, replace

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
    input: BatchInput  # as validated (``read_in_one_pass`` may have validated it again)
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
    query over it: a tiny session-window batch took 9.4 s with ``persist``, 8.0 s with this.
    Callers use the frame returned.

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
        kept = df.localCheckpoint(eager=now)
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


def reads_in_one_pass(s: Settings, p: Pipeline) -> bool:
    """Whether a batch of ``p`` validates its input in the plan's one pass over the records
    (``read_in_one_pass``), not in a query of its own: for a plan that ``reduces`` them, in a
    classic session (over Connect a checkpoint's query returns no observed aggregates to the client)."""
    return plans.reduces(p) and classic.is_classic(s.spark)


def read_in_one_pass(
    steps: Steps, p: Pipeline, checked: CheckedInput, last: LedgerRow | None, kept: Kept
) -> tuple[BatchInput, Pass | None]:
    """The input validated and reduced in one read of it: the plan's reduction (``plans.reduce``)
    kept now, the input's summary and the plan's counters computed on its way. InputError as
    ``CheckedInput.read`` raises it, after the read. Should a summary not come back (a plan Spark
    optimized away), the input is validated in a query of its own, and the plan reduces it again."""
    steps.step = "reading and validating the input"
    validation, counting = classic.observation(), classic.observation()
    records = checked.frame.observe(validation, *checked.summary()).filter(~checked.bad)
    records, _ = at_batch_start(records, last.stream_time if last else None, None)
    reduced = kept(
        plans.reduce(
            p, records, checked.columns, lambda df, exprs: df.observe(counting, *[v.alias(k) for k, v in exprs.items()])
        ),
        now=True,
    )
    summary, counts = classic.observed(validation), classic.observed(counting)
    if summary is None or counts is None:
        return checked.read(), None
    inp = checked.validated(summary)
    if inp.rejected:  # ``plan`` checks the records kept, not those rejected: these are counted again
        inp = checked.read()
    return inp, Pass(checked, reduced, counts, summary["n"] - summary["rejected"])


def definition(p: Pipeline) -> str:
    """The parts of a pipeline that state depends on; changing them needs a new pipeline."""
    w = p.windows.spec() if p.windows is not None else "none"
    return f"keys={list(p.keys)}; windows={w}; aggregates={[a.describe() for a in p.aggregates]}"


def plan(
    s: Settings,
    steps: Steps,
    p: Pipeline,
    t: tables.Tables,
    seq: int,
    inp: BatchInput,
    last: LedgerRow | None,
    read_version: int,
    batch_end: dt.datetime | None,
    kept: Kept,
    passed: Pass | None = None,
) -> Plan:
    """Plan the batch from ``_state`` as of ``read_version`` (where the attempt read the
    ledger; -1: no table yet) and the buffer as of the last committed batch, and count what it
    does (every count in one query, ``tallied``; results stay checkpointed for the writes)."""
    stb = last.stream_time if last else None
    records, sta = _with_stream_time(s, p, seq, inp, stb, batch_end)

    held = state.windows(s.spark, t.state, read_version)
    batch = Batch(
        pipeline=p,
        seq=seq,
        records=records,
        stream_time_before=stb,
        stream_time=sta,
        state=held,
        bucket_ms=s.bucket_ms,
        buffer=_buffer(s, p, t, last),
        keep=kept,
        event_times=(inp.min_ts, inp.max_ts) if inp.min_ts is not None and inp.max_ts is not None else None,
        input_columns=inp.columns,
        reduced=passed.reduced if passed is not None else None,
    )
    effect = plans.effect_of(batch)
    if p.rate_limited:
        effect = ratelimit.limit(batch, effect, locally=_small(s, inp, last))
    open_before = last.windows_open if last else 0

    results = kept(effect.results)  # for the counts, the audit and the staging write
    effect = replace(effect, results=results, closed=results if effect.results_are_closed else effect.closed)
    if effect.state_changes is not None:  # read by the counts and the commit point's MERGE
        effect = replace(effect, state_changes=kept(effect.state_changes))
    same = effect.results_are_closed and not p.steps  # every closed window is a sink row
    counting = effect.counted.agg(*[v.alias(k) for k, v in effect.counters.items()])
    frames = {"closed": _count(effect.closed)}
    if passed is None:
        frames["counters"] = counting
    else:  # counted in the pass: what its kept rows hold, to check the count by
        frames["read"] = passed.reduced.agg(F.sum(RECORDS).alias("n"))
    if not same:
        frames["emitted"] = _count(sinks.shape(p, results, "", sta))
    if effect.opened is not None and open_before is not None:
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
    tally = tallied(frames)
    closed = tally["closed"]["n"]
    emitted = closed if same else tally["emitted"]["n"]
    opened, replaced = tally.get("opened"), tally.get("replaced", {"n": 0})
    open_now = open_before + opened["n"] - replaced["n"] - closed if opened is not None else tally["open"]["n"]
    buffered = collected_stats(tally["buffered"]) if "buffered" in frames else None
    check_buffer(steps.where, p, open_now, buffered)
    counts = passed.counts if passed is not None else tally["counters"]
    if passed is not None and (tally["read"]["n"] or 0) != passed.records:
        # a task's observed records counted twice (its stage ran again): count again, apart
        inp, counts = passed.checked.read(), tallied({"counters": counting})["counters"]
    return Plan(
        effect=effect,
        input=inp,
        stream_time=sta,
        counts=counts,
        closed=closed,
        emitted=emitted,
        windows_open=open_now,
        buffered=buffered if effect.limited is not None else None,
        changed_buckets=tuple(sorted(tally["changed"]["buckets"] or ())) if "changed" in frames else None,
    )


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
    what = "entries" if p.rate_limited else "windows"
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


def batch_metrics(p: Pipeline, plan: Plan, started_at: float) -> dict:
    """The batch's metrics row (KIP-328 names), recorded in its ledger row and published; the
    ledger row also keeps ``rows_published``, the rows the sink received (after any filter)."""
    final, buffered, open_now, inp = p.suppressed_final, plan.buffered, plan.windows_open, plan.input
    values = dict(
        plan.counts,
        records_in=inp.count,
        rejected_records_total=inp.rejected,
        rows_published=plan.emitted,
        suppression_emit_total=plan.closed if final else 0,
        windows_open=open_now,
        windows_closed=plan.closed,
        suppression_buffer_count_current=open_now if final else None,
        suppression_buffer_count_max=(open_now + plan.closed) if final else None,
        stream_time=to_datetime(plan.stream_time),
        batch_duration_ms=int((time.monotonic() - started_at) * 1000),
    )
    if buffered is not None:
        values.update(
            suppression_emit_total=plan.emitted,
            suppression_buffer_count_current=buffered["count"],
            suppression_buffer_count_max=buffered["count_max"],
            suppression_buffer_size_current=buffered["size"],
            suppression_buffer_size_max=buffered["size_max"],
        )
    return values
