"""The batch protocol: run one batch of a pipeline exactly once.

1. Read the ledger: a committed batch id is a no-op (same input) or a loud error (other input);
   ids must increase; a started-but-unfinished batch must be finished first.
2. Validate the input (one pass, while the ledger is read), append a *started* ledger row.
3. Plan the batch from state as of the last committed batch (Delta time travel), while the
   started row commits.
4. Write each table at most once (commits tagged with the batch, see ``state``), all at the
   same time: window state, kept records, results, late records, metrics.
5. Append the *committed* ledger row: the commit point. Readers of ``read_output`` see results
   as of the last committed batch.

Steps overlap because a batch is mostly small Spark jobs and Delta commits that wait on the
driver; the order that matters (claim before writes, writes before the commit) is kept.

A crash between any two writes leaves the ledger at the previous batch; re-running the batch
replans from the same state and skips the writes that already landed. Of two runners of one
batch, the one whose *started* row lands claims it; the other stops before writing anything.
"""
from __future__ import annotations

import datetime as dt
import functools
import logging
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable

from delta.tables import DeltaTable
from py4j.protocol import Py4JJavaError
from pyspark import inheritable_thread_target
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql import functions as F

from . import engine, metrics, ratelimit, sinks, state
from .errors import (BatchFailedError, BatchOrderError, BufferFullError, ConcurrentBatchError, DefinitionError,
                     FingerprintMismatchError, FrameworkError)
from .sources import check_drift, read_batch
from .streamtime import arrival_order, at_batch_start, to_datetime, to_epoch_millis, with_stream_time
from .topology import Pipeline
from .windows import SlidingWindows, TimeWindows

log = logging.getLogger("framework.runtime")

SCAN_RECORDS_PER_PARTITION = 200_000  # below this a batch's stream-time scan runs as one task
ATTEMPTS = 1_000_000  # ledger 'started' rows: txnVersion = seq * ATTEMPTS + earlier attempts of the batch
WRITE_POINTS = ("ledger_start", "state", "records", "buffer", "output", "late_records", "metrics", "ledger_commit")


_LEDGER_ROW = Row(*(field.split()[0] for field in state.LEDGER_SCHEMA.split(", ")))


@dataclass(frozen=True)
class BatchResult:
    """What ``run_batch`` did."""

    pipeline: str
    batch_id: str
    seq: int
    status: str                      # "committed" | "already committed"
    emitted: int
    dropped_late: int
    stream_time: dt.datetime | None
    metrics: dict = field(default_factory=dict)


@dataclass(frozen=True)
class _Plan:
    """A planned batch and its counts."""

    outcome: engine.Outcome
    stream_time: int | None
    counts: dict          # the outcome's counters
    closed: int           # windows closed
    emitted: int          # rows for the sink
    open_now: Callable[[], int]  # windows open after the batch (counted once, when first asked)
    buffered: dict | None  # rate-limiting buffer statistics


class _Kept:
    """Frames cached for the duration of one batch (reused by several writes), then released."""

    def __init__(self):
        self.frames: list[DataFrame] = []

    def __call__(self, df: DataFrame) -> DataFrame:
        self.frames.append(df.persist())
        return df

    def release(self) -> None:
        for df in self.frames:
            df.unpersist()


def _definition(p: Pipeline) -> str:
    """The parts of a pipeline that state depends on; changing them needs a new pipeline."""
    w = p.windows.describe() if p.windows is not None else "none"
    return f"keys={list(p.keys)}; windows={w}; aggregates={[a.describe() for a in p.aggregates]}"


class Runtime:
    """Runs pipelines' batches against Delta tables under ``warehouse``.

    Final results and rate-limited updates are audited before they are published
    (write-audit-publish): a failing critical expectation of the pipeline's suite
    (``expectations/``) stops the batch with a ``QualityGateError`` and nothing is committed.
    ``quality=False`` skips the audit.
    ``bucket`` is the width of the close-time buckets that partition window state.
    ``max_clock_skew`` refuses a batch holding event times later than the clock (the batch's
    ``batch_end``, else now) plus this skew; ``None`` accepts any time.

    Example::

        rt = Runtime(spark, warehouse="/data/lake")
        result = rt.run_batch(pipeline, batch_id="2026-01-01T00", input_df=df)
        rt.read_output(pipeline).show()
    """

    def __init__(self, spark: SparkSession, warehouse: str, bucket: dt.timedelta = dt.timedelta(hours=1),
                 quality: bool = True, expectations: str | None = None,
                 before_write: Callable[[str], None] | None = None,
                 max_clock_skew: dt.timedelta | None = dt.timedelta(days=1)):
        self.spark = spark
        self.warehouse = warehouse
        self.bucket_ms = bucket // dt.timedelta(milliseconds=1)
        self.quality, self.expectations = quality, expectations
        self._before_write = before_write or (lambda point: None)
        self.max_clock_skew = max_clock_skew
        self.partitions = int(spark.conf.get("spark.sql.shuffle.partitions"))
        self._ledgers: dict[str, tuple[tuple[str, int], list[Row]]] = {}  # path -> (table id, version), rows

    def tables(self, p: Pipeline) -> state.Tables:
        """Paths of ``p``'s Delta tables."""
        return state.Tables(f"{self.warehouse.rstrip('/')}/{p.name}", p.sink or "output")

    # ---- reading ---------------------------------------------------------------------------
    def ledger(self, p: Pipeline) -> DataFrame:
        """The batch ledger: a 'started' and a 'committed' row per batch."""
        return state.read(self.spark, self.tables(p).ledger)

    def _last_commit(self, p: Pipeline):
        path = self.tables(p).ledger
        if not state.exists(self.spark, path):
            return None
        rows = state.read(self.spark, path).filter("status = 'committed'").orderBy(F.desc("seq")).limit(1).collect()
        return rows[0] if rows else None

    def read_output(self, p: Pipeline) -> DataFrame:
        """The results table as of the last committed batch."""
        last = self._last_commit(p)
        if last is None or last.output_version is None:
            raise FrameworkError(f"pipeline {p.name!r}: no batch has produced results yet")
        return state.read(self.spark, self.tables(p).output, last.output_version)

    def read_metrics(self, p: Pipeline) -> DataFrame:
        """One metrics row per committed batch."""
        return state.read(self.spark, self.tables(p).metrics)

    def read_late(self, p: Pipeline) -> DataFrame:
        """Records that landed in no window, with the stream time that made them late."""
        return state.read(self.spark, self.tables(p).late)

    def describe(self, p: Pipeline) -> str:
        """The topology as text, with where its tables live."""
        return p.describe() + f"\n  Warehouse: {self.tables(p).root}"

    # ---- running ---------------------------------------------------------------------------
    def run_batch(self, pipeline: Pipeline, batch_id: str, input_df: DataFrame,
                  batch_end: dt.datetime | None = None) -> BatchResult:
        """Apply one batch of records to ``pipeline``, exactly once.

        ``batch_end`` is the orchestrator's interval end; with ``idle_advance`` set on the
        pipeline, stream time advances to at least ``batch_end - idle_advance``.
        """
        p = pipeline.check_complete()
        if not isinstance(batch_id, str) or not batch_id.strip() or len(batch_id) > 256:
            raise FrameworkError(f"pipeline {p.name!r}: batch_id must be a non-empty string (<= 256 chars)")
        self._where, self._step = f"pipeline {p.name!r}, batch {batch_id!r}", "reading the ledger"
        try:
            return self._run(p, batch_id, input_df, batch_end)
        except (Py4JJavaError, PySparkException) as e:
            text = str(getattr(e, "java_exception", None) or e)  # Py4JJavaError's own first line names no cause
            cause = (text.strip().splitlines() or [type(e).__name__])[0][:500]
            raise BatchFailedError(
                f"{self._where}: failed while {self._step}: {cause}. The batch is not committed; fix the "
                "cause (see the chained Spark error) and re-run it.") from e

    def _run(self, p: Pipeline, batch_id: str, input_df: DataFrame, batch_end: dt.datetime | None) -> BatchResult:
        started_at = time.monotonic()
        t = self.tables(p)
        (seen, rows), inp = self._concurrently({
            "reading the ledger": lambda: self._read_ledger(t.ledger),
            "validating the input": lambda: read_batch(p, batch_id, input_df, self._latest_ms(batch_end))})
        committed = {r.batch_id: r for r in rows if r.status == "committed"}
        last = max(committed.values(), key=lambda r: r.seq, default=None)
        where = self._where
        check_drift(p, batch_id, input_df, last.input_schema if last else None)
        if batch_id in committed:
            done = committed[batch_id]
            if done.fingerprint != inp.fingerprint:
                raise FingerprintMismatchError(
                    f"{where}: already committed (seq {done.seq}) with different input "
                    f"(fingerprint {done.fingerprint} != {inp.fingerprint}). Committed batches are immutable; "
                    "use replay to re-run a historical range.")
            return self._result_of(p, done, "already committed")
        if last is not None and batch_id < last.batch_id:
            raise BatchOrderError(f"{where}: out of order: batch {last.batch_id!r} (seq {last.seq}) is already "
                                  "committed and batch ids must increase.")
        seq = last.seq + 1 if last else 1
        for r in rows:
            if r.status == "started" and r.seq == seq and (r.batch_id, r.fingerprint) != (batch_id, inp.fingerprint):
                raise BatchOrderError(
                    f"{where}: batch {r.batch_id!r} (seq {seq}) was started and not committed; re-run it with "
                    "its original input first (its partial writes are replayed idempotently).")
        if last is not None and last.definition != _definition(p):
            raise DefinitionError(f"{where}: the pipeline definition changed incompatibly since batch "
                                  f"{last.batch_id!r}: was [{last.definition}], now [{_definition(p)}]. "
                                  "State cannot be reinterpreted; create a pipeline with a new name.")

        attempt = uuid.uuid4().hex
        stb = last.stream_time if last else None
        earlier = {r.attempt for r in rows if r.status == "started" and r.seq == seq}

        started = self._ledger_row(seq, batch_id, "started", attempt, inp, stb, None, {}, p)

        def claim() -> None:
            if not state.claim(self._ledger_frame(started), t.ledger,
                               state.WriteId(f"{p.name}.ledger.start", seq * ATTEMPTS + len(earlier)), attempt,
                               seen[1], mergeSchema="true"):
                raise ConcurrentBatchError(
                    f"{where}: another runner started this batch at the same time; this attempt stopped before "
                    "writing. Re-run the batch: it completes or reports 'already committed'.")

        def wid(table: str) -> state.WriteId:
            return state.WriteId(f"{p.name}.{table}", seq, resumed=bool(earlier))

        kept = _Kept()
        try:  # planning only reads, so it runs while the claim commits
            plan = self._concurrently({"writing 'ledger_start'": lambda: self._write("ledger_start", claim),
                                       "reading state and planning": lambda: self._plan(p, batch_id, seq, inp, last,
                                                                                        batch_end, kept)})[1]
            outcome, sta, counts = plan.outcome, plan.stream_time, plan.counts
            rows_out = sinks.shape(p, outcome.results, batch_id, sta)
            self._step = "auditing the results"
            if plan.emitted and self.quality and p.suppression is not None:
                from . import quality  # GX loads only in processes that have final or rate-limited rows to audit
                published = self._as_of(t.output, last.output_version if last else None)
                quality.gate(self.spark, p, rows_out.drop("_gone"), published, batch_id, self.warehouse,
                             expectations_dir=self.expectations)

            values: dict = {}  # the metrics row, returned in the BatchResult

            def metrics_row() -> DataFrame:  # counts windows open while the other tables are written
                final, buffered, open_now = p.suppressed_final, plan.buffered, plan.open_now()
                values.update(counts, records_in=inp.count, suppression_emit_total=plan.closed if final else 0,
                              windows_open=open_now, windows_closed=plan.closed,
                              suppression_buffer_count_current=open_now if final else None,
                              suppression_buffer_count_max=(open_now + plan.closed) if final else None,
                              stream_time=to_datetime(sta),
                              batch_duration_ms=int((time.monotonic() - started_at) * 1000))
                if buffered is not None:
                    values.update(suppression_emit_total=plan.emitted,
                                  suppression_buffer_count_current=buffered["count"],
                                  suppression_buffer_count_max=buffered["count_max"],
                                  suppression_buffer_size_current=buffered["size"],
                                  suppression_buffer_size_max=buffered["size_max"])
                return metrics.frame(self.spark, p.name, batch_id, seq, values)

            writes = {"state": lambda: self._write_state(p, outcome, wid("state"), sta, kept),
                      "records": lambda: self._write_records(p, outcome, wid("records")),
                      "buffer": lambda: self._write_buffer(p, outcome, wid("buffer")),
                      "metrics": lambda: state.append(metrics_row(), t.metrics, wid("metrics"))}
            if plan.emitted:
                writes["output"] = lambda: sinks.publish(p, rows_out, t.output, wid("output"))
            if counts.get("late_records"):
                late = outcome.late.select(*p.keys, F.timestamp_millis("_ts").alias("event_time"),
                                           F.timestamp_millis("_sb").alias("stream_time_before"),
                                           F.lit(batch_id).alias("batch_id"), F.lit(seq).cast("long").alias("seq"),
                                           F.to_json(F.struct(*[F.col(c) for c in input_df.columns])).alias("record"))
                writes["late_records"] = lambda: state.append(late, t.late, wid("late"))
            self._concurrently({f"writing {point!r}": lambda point=point, action=action: self._write(point, action)
                                for point, action in writes.items()})
        finally:
            kept.release()

        versions = {"state": state.latest_version(self.spark, t.state),
                    "records": state.latest_version(self.spark, t.records)
                    if isinstance(p.windows, SlidingWindows) else None,
                    "buffer": state.latest_version(self.spark, self._buffer_path(p)) if p.rate_limited else None,
                    "output": state.latest_version(self.spark, t.output) if plan.emitted or last is None
                    else last.output_version}
        commit = self._ledger_row(seq, batch_id, "committed", attempt, inp, stb, sta, versions, p, plan.open_now())
        self._write("ledger_commit", lambda: state.save(  # mergeSchema: ledgers from before windows_open
            self._ledger_frame(commit), t.ledger, state.WriteId(f"{p.name}.ledger.commit", seq), mergeSchema="true"))
        if not earlier:  # the claim and the commit made the next two versions, unless another writer came between
            self._ledgers[t.ledger] = ((seen[0], seen[1] + 2), [*rows, started, commit])
        log.info("%s: committed seq=%d emitted=%d stream_time=%s in %.1f s", where, seq, plan.emitted,
                 to_datetime(sta), time.monotonic() - started_at)
        return BatchResult(p.name, batch_id, seq, "committed", plan.emitted, int(counts.get("late_records") or 0),
                           to_datetime(sta), values)

    def _plan(self, p: Pipeline, batch_id: str, seq: int, inp, last, batch_end: dt.datetime | None,
              kept: _Kept) -> _Plan:
        """Plan the batch from state as of the last committed batch and count what it does
        (the counts run at the same time; results stay cached for the writes)."""
        t, stb = self.tables(p), last.stream_time if last else None
        if engine.needs_order(p):
            order = arrival_order(inp.frame, "_ts", p.arrival, p.keys)
            parallelism = max(1, min(self.partitions, inp.count // SCAN_RECORDS_PER_PARTITION))
            records, sta = with_stream_time(inp.frame, order, "_ts", seq, stb, p.lateness == "record", parallelism,
                                            inp.max_ts)
        else:
            records, sta = at_batch_start(inp.frame, stb, inp.max_ts)
        if p.idle_advance_ms is not None and batch_end is not None:
            sta = max(x for x in (sta, to_epoch_millis(batch_end) - p.idle_advance_ms) if x is not None)
        batch = engine.Batch(p, seq, records, stb, sta,
                             self._as_of(t.state, last.state_version if last else None),
                             self._as_of(t.records, last.records_version if last else None),
                             self.bucket_ms, self._as_of(self._buffer_path(p), last.buffer_version if last else None),
                             cache=kept)
        outcome = engine.plan(batch)
        if p.rate_limited:
            outcome = ratelimit.limit(batch, outcome)
        open_before = last.asDict().get("windows_open") if last else 0

        def windows() -> tuple[int, int]:
            kept(outcome.results)  # caching plans the read of state: here, beside the counters' job
            closed = outcome.closed.count()
            same = outcome.closed is outcome.results and not p.steps
            return closed, closed if same else sinks.shape(p, outcome.results, "", sta).count()

        counted = {"counters": lambda: outcome.counted.agg(*[v.alias(k) for k, v in outcome.counters.items()])
                   .collect()[0].asDict(), "windows": windows}
        counts, (closed, emitted) = self._concurrently(counted)

        @functools.cache
        def open_now() -> int:
            if outcome.opened is not None and open_before is not None:
                return open_before + outcome.opened() - closed
            return outcome.open_windows.count()

        buffered = outcome.limited.stats() if outcome.limited is not None else None
        self._check_buffer(p, batch_id, batch, open_now, buffered)
        return _Plan(outcome, sta, counts, closed, emitted, open_now, buffered)

    def replay(self, pipeline: Pipeline, batches) -> "ReplayResult":
        """Re-run the committed batches from ``batches[0]`` through the last one with the given
        input (``ReplayBatch`` or ``(batch_id, input_df)``), replacing their results atomically.
        See ``framework.replay``."""
        from .replay import replay
        return replay(self, pipeline, batches)

    # ---- helpers ---------------------------------------------------------------------------
    def _write(self, point: str, action: Callable[[], None]) -> None:
        self._step = f"writing {point!r}"
        self._before_write(point)
        try:
            action()
        except Exception as e:  # Delta reports a lost race as Concurrent*Exception
            if "Concurrent" not in type(e).__name__ + str(e)[:300]:
                raise
            raise ConcurrentBatchError(
                f"{self._where}: another runner wrote {point!r} at the same time; this attempt "
                "stopped. Re-run the batch: it completes idempotently or reports 'already committed'.") from e

    def _concurrently(self, tasks: dict[str, Callable[[], object]]) -> list:
        """Run ``tasks`` (named by their step) at the same time and return their results in order;
        after all have ended, raise the first failure, naming its step.

        A batch's writes go to different tables, each is tagged and skipped when a resumed batch
        finds it made, and the ledger commit after them is the commit point, so their order does
        not matter. Small Spark jobs and Delta commits mostly wait on the driver (log listing,
        task launch), so they overlap well even on two cores."""
        with ThreadPoolExecutor(len(tasks), thread_name_prefix="batch") as pool:
            futures = {step: pool.submit(inheritable_thread_target(self.spark)(task)) for step, task in tasks.items()}
        for step, future in futures.items():
            if future.exception() is not None:
                self._step = step
                raise future.exception()
        return [future.result() for future in futures.values()]

    def _latest_ms(self, batch_end: dt.datetime | None) -> int | None:
        """The latest event time a batch may hold (SPEC 4: far-future times are refused)."""
        if self.max_clock_skew is None:
            return None
        clock = batch_end or dt.datetime.now(dt.timezone.utc)
        return to_epoch_millis(clock + self.max_clock_skew)

    def _as_of(self, path: str, version: int | None) -> DataFrame | None:
        return None if version is None else state.read(self.spark, path, version)

    def _ledger_row(self, seq, batch_id, status, attempt, inp, stb, sta, versions, p,
                    windows_open: int | None = None) -> Row:
        return _LEDGER_ROW(seq, batch_id, status, attempt, inp.fingerprint, inp.count, stb, sta,
                           versions.get("state"), versions.get("records"), versions.get("output"),
                           inp.schema_json, _definition(p), dt.datetime.now(dt.timezone.utc).replace(tzinfo=None),
                           versions.get("buffer"), windows_open)

    def _ledger_frame(self, row: Row) -> DataFrame:
        return self.spark.createDataFrame([row], state.LEDGER_SCHEMA)

    def _read_ledger(self, path: str) -> tuple[tuple[str, int], list[Row]]:
        """The ledger's (table id, version) and rows; rows this runtime already knows at that
        version of that table are not read again (a Delta version never changes)."""
        state.create(self.spark, path, state.LEDGER_SCHEMA)
        seen = state.head(self.spark, path)
        known = self._ledgers.get(path)
        if known is not None and known[0] == seen:
            return known
        return seen, state.read(self.spark, path, seen[1]).collect()

    def _write_state(self, p: Pipeline, outcome: engine.Outcome, wid: state.WriteId, sta: int | None,
                     kept) -> None:
        path = self.tables(p).state
        if outcome.state_rewrite is not None:
            rows, replaced = outcome.state_rewrite
            state.create(self.spark, path, rows.schema, partition_by="_bucket")
            state.rewrite(rows, path, replaced, wid)
            return
        if outcome.state_changes is None:
            return
        changes = kept(outcome.state_changes)
        columns = [c for c in changes.columns if c != "_gone"]
        state.create(self.spark, path, changes.select(*columns).schema, partition_by="_bucket")
        ident = p.identity
        on = " AND ".join(f"t.`{c}` = s.`{c}`" for c in ident)
        due = f"s._close <= {sta if sta is not None else engine.NO_TIME}"
        values = {f"`{c}`": f"s.`{c}`" for c in columns}
        state.once(self.spark, path, wid, lambda: (
            DeltaTable.forPath(self.spark, path).alias("t").merge(changes.alias("s"), on)
            .whenMatchedDelete(f"s._gone OR {due}")
            .whenMatchedUpdate(set=values)
            .whenNotMatchedInsert(condition=f"NOT s._gone AND NOT ({due})", values=values)
            .execute()))

    def _write_records(self, p: Pipeline, outcome: engine.Outcome, wid: state.WriteId) -> None:
        if outcome.new_records is None:
            return
        path = self.tables(p).records
        new = outcome.new_records.withColumn("_tbucket", F.floor(F.col("_ts") / self.bucket_ms).cast("long"))
        state.create(self.spark, path, new.schema, partition_by="_tbucket")
        values = {f"`{c}`": f"s.`{c}`" for c in new.columns}
        merge = (DeltaTable.forPath(self.spark, path).alias("t")
                 .merge(new.alias("s"), "t._ord = s._ord").whenNotMatchedInsert(values=values))
        if outcome.records_cutoff is not None:
            merge = merge.whenNotMatchedBySourceDelete(f"t._ts < {outcome.records_cutoff}")
        state.once(self.spark, path, wid, merge.execute)

    def _write_buffer(self, p: Pipeline, outcome: engine.Outcome, wid: state.WriteId) -> None:
        if outcome.limited is not None:  # the buffer after the batch replaces the one before
            state.rewrite(outcome.limited.buffer, self._buffer_path(p), None, wid)

    def _buffer_path(self, p: Pipeline) -> str | None:
        return self.tables(p).buffer(p.suppression.name or "suppress") if p.rate_limited else None

    def _check_buffer(self, p: Pipeline, batch_id: str, batch: engine.Batch, held: Callable[[], int],
                      buffered: dict | None) -> None:
        """Strict bounded buffers (``shut_down_when_full``) stop the batch before anything is
        written when the buffer would exceed a bound after any record (its largest size in the
        batch): a rate-limiting buffer holds updated keys, a final-results one the open windows
        (after the batch only for sliding and session windows, whose buffer is not modelled)."""
        buf = p.suppression.buffer if p.suppression is not None else None
        if buf is None or getattr(buf, "when_full", None) != "shut_down":
            return
        what = "entries" if p.rate_limited else "windows"
        if buffered is None and isinstance(p.windows, TimeWindows) and p.lateness == "record":
            buffered = ratelimit.held_until_close(batch)
        if buffered is not None:
            count, size = buffered["count_max"], buffered["size_max"]
        else:
            count, size = held(), None
        over = []
        if buf.record_limit is not None and count > buf.record_limit:
            over.append(f"max_records={buf.record_limit}")
        if buf.byte_limit is not None and size is not None and size > buf.byte_limit:
            over.append(f"max_bytes={buf.byte_limit}")
        if over:
            reached = f"{count} {what}" + (f" ({size} bytes)" if size is not None else "")
            raise BufferFullError(
                f"pipeline {p.name!r}, batch {batch_id!r}: suppression buffer "
                f"{p.suppression.name or '<unnamed>'} would hold {reached}, over its bound "
                f"{' and '.join(over)} (shut_down_when_full). Nothing was committed; raise the bound "
                "or use BufferConfig.unbounded(), then re-run the batch.")

    def _result_of(self, p: Pipeline, row, status: str) -> BatchResult:
        m = self.read_metrics(p).filter(F.col("seq") == row.seq).collect()
        values = m[0].asDict() if m else {}
        return BatchResult(p.name, row.batch_id, row.seq, status, int(values.get("suppression_emit_total") or 0),
                           int(values.get("late_records") or 0), to_datetime(row.stream_time), values)
