"""The batch protocol: run one batch of a pipeline exactly once.

1. Read the ledger: a committed batch id is a no-op (same input) or a loud error (other input);
   ids must increase; a started-but-unfinished batch must be finished first.
2. Validate the input (one pass), append a *started* ledger row.
3. Plan the batch from state as of the last committed batch (Delta time travel).
4. Write each table at most once (commits tagged with the batch, see ``state``): window state,
   kept records, results, late records, metrics.
5. Append the *committed* ledger row: the commit point. Readers of ``read_output`` see results
   as of the last committed batch.

A crash between any two writes leaves the ledger at the previous batch; re-running the batch
replans from the same state and skips the writes that already landed. Of two runners of one
batch, the one whose *started* row lands claims it; the other stops before writing anything.
"""
from __future__ import annotations

import datetime as dt
import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import Callable

from delta.tables import DeltaTable
from py4j.protocol import Py4JJavaError
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from . import engine, metrics, ratelimit, sinks, state
from .errors import (BatchFailedError, BatchOrderError, BufferFullError, ConcurrentBatchError, DefinitionError,
                     FingerprintMismatchError, FrameworkError)
from .sources import read_batch
from .streamtime import arrival_order, to_datetime, to_epoch_millis, with_stream_time
from .topology import Pipeline
from .windows import SlidingWindows, TimeWindows

log = logging.getLogger("framework.runtime")

SCAN_RECORDS_PER_PARTITION = 200_000  # below this a batch's stream-time scan runs as one task
ATTEMPTS = 1_000_000  # ledger 'started' rows: txnVersion = seq * ATTEMPTS + earlier attempts of the batch
WRITE_POINTS = ("ledger_start", "state", "records", "buffer", "output", "late_records", "metrics", "ledger_commit")


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
        state.create(self.spark, t.ledger, state.LEDGER_SCHEMA)
        rows = state.read(self.spark, t.ledger).collect()
        committed = {r.batch_id: r for r in rows if r.status == "committed"}
        last = max(committed.values(), key=lambda r: r.seq, default=None)
        where = self._where
        self._step = "validating the input"

        inp = read_batch(p, batch_id, input_df, last.input_schema if last else None, self._latest_ms(batch_end))
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
        self._write("ledger_start", lambda: state.append_exclusive(
            self._ledger_row(seq, batch_id, "started", attempt, inp, stb, None, {}, p),
            t.ledger, state.WriteId(f"{p.name}.ledger.start", seq * ATTEMPTS + len(earlier)), attempt))
        if not state.committed_by(self.spark, t.ledger, attempt):
            raise ConcurrentBatchError(
                f"{where}: another runner started this batch at the same time; this attempt stopped before "
                "writing. Re-run the batch: it completes or reports 'already committed'.")

        def wid(table: str) -> state.WriteId:
            return state.WriteId(f"{p.name}.{table}", seq, resumed=bool(earlier))

        self._step = "reading state and planning"
        order = arrival_order(inp.frame, "_ts", p.arrival, p.keys)
        parallelism = max(1, min(self.partitions, inp.count // SCAN_RECORDS_PER_PARTITION))
        records, sta = with_stream_time(inp.frame, order, "_ts", seq, stb, p.lateness == "record", parallelism,
                                        inp.max_ts)
        if p.idle_advance_ms is not None and batch_end is not None:
            sta = max(x for x in (sta, to_epoch_millis(batch_end) - p.idle_advance_ms) if x is not None)
        batch = engine.Batch(p, seq, records, stb, sta,
                             self._as_of(t.state, last.state_version if last else None),
                             self._as_of(t.records, last.records_version if last else None),
                             self.bucket_ms, self._as_of(self._buffer_path(p), last.buffer_version if last else None))
        outcome = engine.plan(batch)
        if p.rate_limited:
            outcome = ratelimit.limit(batch, outcome)
        kept = _Kept()
        results = kept(outcome.results)
        rows_out = kept(sinks.shape(p, results, batch_id, sta))
        counts = outcome.counted.agg(*[v.alias(k) for k, v in outcome.counters.items()]).collect()[0].asDict()
        n_rows, open_now = rows_out.count(), outcome.open_windows.count()
        buffered = outcome.limited.stats() if outcome.limited is not None else None
        self._check_buffer(p, batch_id, batch, open_now, buffered)
        if n_rows and self.quality and p.suppression is not None:
            from . import quality  # GX loads only in processes that have final or rate-limited rows to audit
            published = self._as_of(t.output, last.output_version if last else None)
            quality.gate(self.spark, p, rows_out.drop("_gone"), published, batch_id, self.warehouse,
                         expectations_dir=self.expectations)

        self._write("state", lambda: self._write_state(p, outcome, wid("state"), sta, kept))
        self._write("records", lambda: self._write_records(p, outcome, wid("records")))
        self._write("buffer", lambda: self._write_buffer(p, outcome, wid("buffer")))
        if n_rows:
            self._write("output", lambda: sinks.publish(p, rows_out, t.output, wid("output")))
        if counts.get("late_records"):
            late = outcome.late.select(*p.keys, F.timestamp_millis("_ts").alias("event_time"),
                                       F.timestamp_millis("_sb").alias("stream_time_before"),
                                       F.lit(batch_id).alias("batch_id"), F.lit(seq).cast("long").alias("seq"),
                                       F.to_json(F.struct(*[F.col(c) for c in input_df.columns])).alias("record"))
            self._write("late_records", lambda: state.append(late, t.late, wid("late")))

        closed = outcome.closed.count()
        kept.release()
        final = p.suppressed_final
        values = dict(counts, records_in=inp.count, suppression_emit_total=closed if final else 0,
                      windows_open=open_now, windows_closed=closed,
                      suppression_buffer_count_current=open_now if final else None,
                      suppression_buffer_count_max=(open_now + closed) if final else None,
                      stream_time=to_datetime(sta), batch_duration_ms=int((time.monotonic() - started_at) * 1000))
        if buffered is not None:
            values.update(suppression_emit_total=n_rows, suppression_buffer_count_current=buffered["count"],
                          suppression_buffer_count_max=buffered["count_max"],
                          suppression_buffer_size_current=buffered["size"],
                          suppression_buffer_size_max=buffered["size_max"])
        self._write("metrics", lambda: state.append(metrics.frame(self.spark, p.name, batch_id, seq, values),
                                                    t.metrics, wid("metrics")))
        versions = {"state": state.latest_version(self.spark, t.state),
                    "records": state.latest_version(self.spark, t.records)
                    if isinstance(p.windows, SlidingWindows) else None,
                    "buffer": state.latest_version(self.spark, self._buffer_path(p)) if p.rate_limited else None,
                    "output": state.latest_version(self.spark, t.output) if n_rows or last is None
                    else last.output_version}
        self._write("ledger_commit", lambda: state.append(
            self._ledger_row(seq, batch_id, "committed", attempt, inp, stb, sta, versions, p),
            t.ledger, state.WriteId(f"{p.name}.ledger.commit", seq)))
        log.info("%s: committed seq=%d emitted=%d stream_time=%s", where, seq, n_rows, to_datetime(sta))
        return BatchResult(p.name, batch_id, seq, "committed", n_rows, int(counts.get("late_records") or 0),
                           to_datetime(sta), values)

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

    def _latest_ms(self, batch_end: dt.datetime | None) -> int | None:
        """The latest event time a batch may hold (SPEC 4: far-future times are refused)."""
        if self.max_clock_skew is None:
            return None
        clock = batch_end or dt.datetime.now(dt.timezone.utc)
        return to_epoch_millis(clock + self.max_clock_skew)

    def _as_of(self, path: str, version: int | None) -> DataFrame | None:
        return None if version is None else state.read(self.spark, path, version)

    def _ledger_row(self, seq, batch_id, status, attempt, inp, stb, sta, versions, p) -> DataFrame:
        row = (seq, batch_id, status, attempt, inp.fingerprint, inp.count, stb, sta,
               versions.get("state"), versions.get("records"), versions.get("output"),
               inp.schema_json, _definition(p), dt.datetime.now(dt.timezone.utc).replace(tzinfo=None),
               versions.get("buffer"))
        return self.spark.createDataFrame([row], state.LEDGER_SCHEMA)

    def _write_state(self, p: Pipeline, outcome: engine.Outcome, wid: state.WriteId, sta: int | None,
                     kept) -> None:
        path = self.tables(p).state
        if outcome.state_rewrite is not None:
            rows, replaced = outcome.state_rewrite
            rows = kept(rows)
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

    def _check_buffer(self, p: Pipeline, batch_id: str, batch: engine.Batch, held: int,
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
            count, size = held, None
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
