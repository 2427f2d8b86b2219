"""The batch protocol: run one batch of a pipeline exactly once, whatever else runs.

1. Read the ledger (its version is the attempt's *fence*) and validate the input, at once.
   Finish publishing the last committed batch if its publication was cut short (step 6).
   A committed batch id is a no-op (same input) or a loud error (other input); ids increase.
2. Plan the batch from state as of the versions the last committed batch recorded (Delta time
   travel): planning is deterministic from those versions and the input.
3. Audit the results (write-audit-publish). Nothing has been written yet, so a failed gate, a
   full strict buffer or input that fails while planning leaves nothing behind.
4. Write, all at the same time: each state table *advanced* from its recorded version
   (``writes.advance``: whatever an attempt that never committed left there is undone first),
   and the sink rows and late records *staged* under ``_staging/<seq>-<attempt>`` (Parquet
   files: only their publisher reads them). Beside the writes, the snapshots of the tables
   steps 5 and 6 commit to are read, so those commits start from cached snapshots.
5. Append the ledger row (versions written, metrics) with ``ledger.commit_point``: Delta commits
   it only if no other batch or replay committed since the attempt read the ledger. This is
   the commit point; of overlapping attempts exactly one passes it, the others stop here.
6. Publish: append the staged rows to the sink, late records and metrics tables, all at once
   (each once: Delta's transaction id skips a repeat), then remove the staging folder. Whoever
   finds a committed batch still staged (the committing attempt died) publishes it the same way.

No attempt ever holds a claim, so nothing wedges: a batch that failed anywhere before step 5
is re-run with the same or corrected input as if it had never run. Other writers' commits
(``OPTIMIZE``, table properties, ``VACUUM``) change no rows and fence out nothing.
"""
from __future__ import annotations

import datetime as dt
import functools
import json
import logging
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

from delta.tables import DeltaTable
from py4j.protocol import Py4JJavaError
from pyspark import inheritable_thread_target
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql import functions as F

from ..definition.pipeline import Pipeline
from ..definition.windows import TimeWindows
from ..errors import (
    BatchFailedError,
    BatchOrderError,
    BufferFullError,
    ConcurrentBatchError,
    DefinitionError,
    FingerprintMismatchError,
    FrameworkError,
)
from ..execution import engine, ratelimit
from ..execution.sources import check_drift, read_batch
from ..execution.streamtime import arrival_order, at_batch_start, to_datetime, to_epoch_millis, with_stream_time
from ..storage import catalog as tables_catalog
from ..storage import files, ledger, metrics, sinks, tables, writes

if TYPE_CHECKING:
    from .replay import ReplayResult

log = logging.getLogger("framework.runtime")

SCAN_RECORDS_PER_PARTITION = 200_000  # below this a batch's stream-time scan runs as one task
WRITE_POINTS = ("state", "records", "buffer", "output", "late_records", "ledger_commit", "publish")
PUBLICATION = "_publish.json"  # in a staging folder: what to publish once its attempt committed
ATTEMPTED = "_batch_id"        # in a staging folder: the batch its attempt runs


_LEDGER_ROW = Row(*(field.split()[0] for field in ledger.LEDGER_SCHEMA.split(", ")))


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


def _recorded_metrics(row: Row) -> dict:
    """A committed ledger row's metrics (kept as JSON beside its stream time)."""
    return {**json.loads(row.metrics), "stream_time": to_datetime(row.stream_time)}


def _cause(e: Exception) -> str:
    """The first line of a Spark error (a Py4JJavaError's own first line names no cause)."""
    text = str(getattr(e, "java_exception", None) or e)
    return (text.strip().splitlines() or [type(e).__name__])[0][:500]


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
    ``catalog`` names a schema of the session's catalog that keeps the pipeline's tables as
    external tables once a batch committed (``framework.catalog``): ``lake.user_alert_windows``.

    Example::

        rt = Runtime(spark, warehouse="/data/lake")
        result = rt.run_batch(pipeline, batch_id="2026-01-01T00", input_df=df)
        rt.read_output(pipeline).show()
    """

    def __init__(self, spark: SparkSession, warehouse: str, bucket: dt.timedelta = dt.timedelta(hours=1),
                 quality: bool = True, expectations: str | None = None,
                 before_write: Callable[[str], None] | None = None,
                 max_clock_skew: dt.timedelta | None = dt.timedelta(days=1), catalog: str | None = None):
        self.spark = spark
        self.catalog = catalog if catalog is None else tables_catalog.check_schema(catalog)
        self._registered: set[str] = set()  # catalog tables this runtime registered or found
        self.warehouse = warehouse
        self.bucket_ms = bucket // dt.timedelta(milliseconds=1)
        self.quality, self.expectations = quality, expectations
        self._before_write = before_write or (lambda point: None)
        self.max_clock_skew = max_clock_skew
        self.partitions = int(spark.conf.get("spark.sql.shuffle.partitions"))
        self._ledgers: dict[str, tuple[tuple[str, int], list[Row]]] = {}  # path -> (table id, version), rows

    def tables(self, p: Pipeline) -> tables.Tables:
        """Paths of ``p``'s Delta tables."""
        return tables.Tables(f"{self.warehouse.rstrip('/')}/{p.name}", p.sink or "output")

    # ---- reading ---------------------------------------------------------------------------
    def ledger(self, p: Pipeline) -> DataFrame:
        """The batch ledger: a 'committed' row per batch ('replaced' once a replay re-ran it)."""
        return tables.read(self.spark, self.tables(p).ledger)

    def committed_batch(self, p: Pipeline, batch_id: str) -> BatchResult | None:
        """What batch ``batch_id`` of ``p`` did, as its ledger row records it; None until it commits."""
        path = self.tables(p).ledger
        if not tables.exists(self.spark, path):
            return None
        rows = tables.read(self.spark, path).filter((F.col("status") == "committed") & (F.col("batch_id") == batch_id))
        row = rows.orderBy(F.desc("seq")).limit(1).collect()
        return self._result_of(p, row[0], "committed") if row else None

    def register(self, p: Pipeline) -> list[str]:
        """Keep ``p``'s existing tables in the ``catalog`` schema (no-op without one); their names.
        Each batch does it (tables registered before are skipped); call it for a pipeline that
        ran elsewhere."""
        if self.catalog is None:
            return []
        try:
            names = tables_catalog.register(self.spark, self.catalog, p, self.tables(p), skip=self._registered)
        except (Py4JJavaError, PySparkException) as e:
            raise FrameworkError(
                f"pipeline {p.name!r}: registering its tables in catalog schema {self.catalog!r} failed: "
                f"{_cause(e)}. The batches are not affected: fix the catalog, then re-run the batch (a "
                "committed one reports 'already committed' and registers its tables).") from e
        self._registered.update(names)
        return names

    def read_output(self, p: Pipeline) -> DataFrame:
        """The results table: the published results of committed batches."""
        if not tables.exists(self.spark, self.tables(p).output):
            raise FrameworkError(f"pipeline {p.name!r}: no batch has produced results yet")
        return tables.read(self.spark, self.tables(p).output)

    def read_metrics(self, p: Pipeline) -> DataFrame:
        """One metrics row per committed batch."""
        return tables.read(self.spark, self.tables(p).metrics)

    def read_late(self, p: Pipeline) -> DataFrame:
        """Records that landed in no window, with the stream time that made them late."""
        return tables.read(self.spark, self.tables(p).late)

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
            self.register(p)  # a catalog name taken by another table stops the batch before it runs
            result = self._run(p, batch_id, input_df, batch_end)
            self.register(p)
            return result
        except (Py4JJavaError, PySparkException) as e:
            cause = _cause(e)
            if self._step == "writing 'publish'" or self._step.startswith("publishing"):
                raise BatchFailedError(
                    f"{self._where}: failed while {self._step}: {cause}. The committed batch's rows stay staged; "
                    "the next run of any batch of the pipeline publishes them once the cause is fixed.") from e
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
        self._step = "publishing the last committed batch"
        pending = self.finish(p, last)
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
        self._undo_legacy_attempts(p, t, rows, last, seq)
        if last is not None and last.definition != _definition(p):
            raise DefinitionError(f"{where}: the pipeline definition changed incompatibly since batch "
                                  f"{last.batch_id!r}: was [{last.definition}], now [{_definition(p)}]. "
                                  "State cannot be reinterpreted; create a pipeline with a new name.")

        self._check_unfinished(t, pending, seq, batch_id)
        attempt = uuid.uuid4().hex
        staging = f"{t.staging}/{seq}-{attempt}"
        files.put_text(self.spark, f"{staging}/{ATTEMPTED}", batch_id)
        kept = _Kept()
        try:
            self._step = "reading state and planning"
            plan = self._plan(p, batch_id, seq, inp, last, batch_end, kept)
            outcome, sta, counts = plan.outcome, plan.stream_time, plan.counts
            rows_out = sinks.shape(p, outcome.results, batch_id, sta)
            self._step = "auditing the results"
            if plan.emitted and self.quality and p.suppression is not None:
                from . import quality  # GX loads only in processes that have final or rate-limited rows to audit
                published = tables.read(self.spark, t.output) if tables.exists(self.spark, t.output) else None
                quality.gate(self.spark, p, rows_out.drop("_gone"), published, batch_id, self.warehouse,
                             expectations_dir=self.expectations)

            def tag(table: str) -> str:
                return f"{writes.TAG}{p.name}.{table}@{seq}:{attempt}"

            def base(table: str) -> int | None:
                return last[f"{table}_version"] if last is not None and f"{table}_version" in last else None

            planned = {"state": lambda: self._write_state(p, outcome, base("state"), tag("state"), sta, kept),
                      "records": lambda: self._write_records(p, outcome, base("records"), tag("records")),
                      "buffer": lambda: self._write_buffer(p, outcome, base("buffer"), tag("buffer"))}
            if plan.emitted:
                planned["output"] = lambda: files.stage(sinks.staged(p, rows_out), f"{staging}/output")
            if counts.get("late_records"):
                late = outcome.late.select(*p.keys, F.timestamp_millis("_ts").alias("event_time"),
                                           F.timestamp_millis("_sb").alias("stream_time_before"),
                                           F.lit(batch_id).alias("batch_id"), F.lit(seq).cast("long").alias("seq"),
                                           F.to_json(F.struct(*[F.col(c) for c in input_df.columns])).alias("record"))
                planned["late_records"] = lambda: files.stage(late, f"{staging}/late_records")
            tasks = {f"writing {point!r}": lambda point=point, action=action: self._write(point, action)
                     for point, action in planned.items()}
            tasks["counting open windows"] = plan.open_now
            for path in (t.ledger, t.metrics, *([t.output] if plan.emitted else []),
                         *([t.late] if "late_records" in planned else [])):  # what the commit and publication write
                tasks[f"reading {path}"] = lambda path=path: tables.prepare(self.spark, path)
            written = dict(zip(planned, self._concurrently(tasks)))
            values = self._metrics(p, plan, inp, started_at)
        finally:
            kept.release()

        versions = {name: written.get(name, base(name)) for name in ("state", "records", "buffer")}
        staged = [name for name in ("output", "late_records") if name in planned]
        files.put_text(self.spark, f"{staging}/{PUBLICATION}", json.dumps({"replay": False, "staged": staged}))
        commit = self._ledger_row(p, seq, batch_id, attempt, inp, last, sta, versions, values,
                                  output_base=tables.latest_version(self.spark, t.output))
        self._write("ledger_commit", lambda: self._commit(p, t.ledger, seen, rows, commit, tag("ledger")))
        self._write("publish", lambda: self.finish(p, commit))
        log.info("%s: committed seq=%d emitted=%d stream_time=%s in %.1f s", where, seq, plan.emitted,
                 to_datetime(sta), time.monotonic() - started_at)
        return BatchResult(p.name, batch_id, seq, "committed", plan.emitted, int(counts.get("late_records") or 0),
                           to_datetime(sta), values)

    def _commit(self, p: Pipeline, path: str, seen: tuple[str, int, int], rows: list[Row], commit: Row,
                tag: str) -> None:
        """Pass the commit point, or stop: another batch or replay committed since the ledger was read."""
        made = ledger.commit_point(self._ledger_frame(commit), path, seen[1], seen[2], tag, mergeSchema="true")
        if made is None:
            raise self._fenced_out()
        if made == seen[1] + 1:  # nothing came between: the ledger this runtime knows is current
            self._ledgers[path] = ((seen[0], made, seen[2] + 1), [*rows, commit])

    def _fenced_out(self) -> ConcurrentBatchError:
        return ConcurrentBatchError(
            f"{self._where}: another attempt of this batch (or a replay) committed first; this attempt "
            "published nothing. Re-run the batch: it reports 'already committed' or runs on the new state.")

    def _metrics(self, p: Pipeline, plan: "_Plan", inp, started_at: float) -> dict:
        """The batch's metrics row (KIP-328 names), recorded in its ledger row and published; the
        ledger row also keeps ``rows_published``, the rows the sink received (after any filter)."""
        final, buffered, open_now = p.suppressed_final, plan.buffered, plan.open_now()
        values = dict(plan.counts, records_in=inp.count, rows_published=plan.emitted,
                      suppression_emit_total=plan.closed if final else 0,
                      windows_open=open_now, windows_closed=plan.closed,
                      suppression_buffer_count_current=open_now if final else None,
                      suppression_buffer_count_max=(open_now + plan.closed) if final else None,
                      stream_time=to_datetime(plan.stream_time),
                      batch_duration_ms=int((time.monotonic() - started_at) * 1000))
        if buffered is not None:
            values.update(suppression_emit_total=plan.emitted,
                          suppression_buffer_count_current=buffered["count"],
                          suppression_buffer_count_max=buffered["count_max"],
                          suppression_buffer_size_current=buffered["size"],
                          suppression_buffer_size_max=buffered["size_max"])
        return values

    # ---- publishing ------------------------------------------------------------------------
    def finish(self, p: Pipeline, last: Row | None) -> list[str]:
        """Publish committed batch ``last`` if it is still staged, and remove the staging
        folders of attempts that can no longer commit (an attempt of a committed sequence
        number that is not the committed one). Idempotent: safe to run again at any point, and
        beside another runner's ``finish``. Returns the staging folders left: attempts of later
        batches, maybe still running."""
        t, left = self.tables(p), []
        for name in files.list_names(self.spark, t.staging):
            seq, _, attempt = name.partition("-")
            folder = f"{t.staging}/{name}"
            spec = None
            if last is not None and attempt == last.attempt:
                spec = json.loads(files.get_text(self.spark, f"{folder}/{PUBLICATION}") or "null")
                # the staged tables are removed before the spec: one missing means published
                if spec is not None and all(files.is_staged(self.spark, f"{folder}/{s}") for s in spec["staged"]):
                    self._publish(p, t, folder, last, spec)
            elif last is None or not seq.isdigit() or int(seq) > last.seq:
                left.append(name)
                continue
            for staged in (spec or {}).get("staged", []):
                files.remove(self.spark, f"{folder}/{staged}")
            files.remove(self.spark, folder)
        return left

    def _undo_legacy_attempts(self, p: Pipeline, t: tables.Tables, rows: list[Row], last: Row | None, seq: int) -> None:
        """Remove what an unfinished attempt of the previous protocol (a ledger row 'started',
        which wrote results, metrics and late records before its commit) published."""
        started = [r.batch_id for r in rows if r.status == "started" and r.seq == seq
                   and not (r.fingerprint or "").startswith("replay@")]
        if not started:
            return
        self._step = "undoing an unfinished attempt of an earlier version"
        tag = f"{writes.TAG}{p.name}.legacy@{seq}"
        output_rows = F.col("emitted_batch_id").isin(started) if p.suppression is not None else None
        for path, rows_of in ((t.metrics, F.col("seq") == seq), (t.late, F.col("seq") == seq), (t.output, output_rows)):
            if rows_of is not None and tables.exists(self.spark, path):
                writes.tagged(self.spark, path, tag, lambda path=path, rows_of=rows_of:
                             DeltaTable.forPath(self.spark, path).delete(rows_of))
        before = last.output_version if last is not None else None
        if p.suppression is None and before is not None and tables.latest_version(self.spark, t.output) != before:
            writes.reset(self.spark, t.output, before, tag)

    def _check_unfinished(self, t: tables.Tables, pending: list[str], seq: int, batch_id: str) -> None:
        """Refuse to run a batch while an attempt of an earlier batch id at the same sequence
        number did not commit (it failed, or still runs): its records would be skipped. That
        batch may be re-run with corrected input; nothing else needs it."""
        for name in pending:
            if name.startswith(f"{seq}-"):
                other = files.get_text(self.spark, f"{t.staging}/{name}/{ATTEMPTED}")
                if other is not None and other != batch_id:
                    raise BatchOrderError(
                        f"{self._where}: batch {other!r} (seq {seq}) was attempted and has not committed (it "
                        f"failed, or still runs); run it to completion first, with its input corrected if "
                        "need be, so that its records are not skipped.")

    def _publish(self, p: Pipeline, t: tables.Tables, folder: str, last: Row, spec: dict) -> None:
        """Publish a committed attempt's staged rows, each table once (Delta skips a repeat)."""
        tag = f"{writes.TAG}{p.name}.publish@{last.seq}:{last.attempt}"
        if spec["replay"]:
            from .replay import publish_range
            publish_range(self, p, t, folder, spec, tag)
            return
        once = {"txnAppId": writes.LEDGER_APP, "txnVersion": str(last.seq)}
        tasks = {"publishing metrics": lambda: writes.save(self._metrics_frame(p, last), t.metrics, tag, **once)}
        if "output" in spec["staged"]:
            tasks["publishing results"] = lambda: sinks.publish(
                p, files.read_staged(self.spark, f"{folder}/output"), t.output, last.seq, tag,
                tombstones=getattr(t, "tombstones", False))
        if "late_records" in spec["staged"]:
            tasks["publishing late records"] = lambda: writes.save(
                files.read_staged(self.spark, f"{folder}/late_records"), t.late, tag, **once)
        self._concurrently(tasks)  # three tables, each commit skipped by Delta if it landed already

    def _metrics_frame(self, p: Pipeline, row: Row) -> DataFrame:
        return metrics.frame(self.spark, p.name, row.batch_id, row.seq, _recorded_metrics(row))

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

    def replay(self, pipeline: Pipeline, batches) -> ReplayResult:
        """Re-run the committed batches from ``batches[0]`` through the last one with the given
        input (``ReplayBatch`` or ``(batch_id, input_df)``), replacing their results atomically.
        See ``framework.replay``."""
        from .replay import replay
        return replay(self, pipeline, batches)

    # ---- helpers ---------------------------------------------------------------------------
    def _write(self, point: str, action: Callable[[], object]) -> object:
        self._step = f"writing {point!r}"
        self._before_write(point)
        try:
            return action()
        except Exception as e:
            if not writes.lost_race(e):
                raise
            if point == "ledger_commit":
                raise self._fenced_out() from e
            raise ConcurrentBatchError(
                f"{self._where}: another attempt or writer changed {point!r} at the same time; this attempt "
                "stopped before its commit point. Re-run the batch: it runs again or reports 'already "
                "committed'.") from e

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
        """A state table's rows as of a recorded version, read from the current version when
        only maintenance landed since (its files may be compacted and VACUUMed away)."""
        return None if version is None else tables.read(self.spark, path, writes.same_rows(self.spark, path, version))

    def _ledger_row(self, p: Pipeline, seq: int, batch_id: str, attempt: str, inp, last: Row | None,
                    sta: int | None, versions: dict, values: dict, output_base: int | None) -> Row:
        row = dict.fromkeys(_LEDGER_ROW)
        row.update(seq=seq, batch_id=batch_id, status="committed", attempt=attempt, fingerprint=inp.fingerprint,
                   records_in=inp.count, stream_time_before=last.stream_time if last else None, stream_time=sta,
                   state_version=versions.get("state"), records_version=versions.get("records"),
                   buffer_version=versions.get("buffer"), input_schema=inp.schema_json, definition=_definition(p),
                   at=dt.datetime.now(dt.timezone.utc).replace(tzinfo=None), windows_open=values.get("windows_open"),
                   output_base=output_base,
                   metrics=json.dumps({k: v for k, v in values.items() if k != "stream_time"}))
        return _LEDGER_ROW(*row.values())

    def _ledger_frame(self, row: Row) -> DataFrame:
        return self.spark.createDataFrame([row], ledger.LEDGER_SCHEMA)

    def _read_ledger(self, path: str) -> tuple[tuple[str, int, int], list[Row]]:
        """The ledger's (table id, version, fence) and rows; rows this runtime already knows at
        that version of that table are not read again (a Delta version never changes)."""
        tables.create(self.spark, path, ledger.LEDGER_SCHEMA)
        known = self._ledgers.get(path)
        if known is not None and known[0][:2] == tables.head(self.spark, path):
            return known  # its fence too: reading the fence costs a Spark job
        seen = ledger.ledger_head(self.spark, path)
        return seen, tables.read(self.spark, path, seen[1]).collect()

    def _write_state(self, p: Pipeline, outcome: engine.Outcome, base: int | None, tag: str, sta: int | None,
                     kept) -> int | None:
        path = self.tables(p).state
        if outcome.state_rewrite is not None:
            rows, replaced = outcome.state_rewrite
            tables.create(self.spark, path, rows.schema, partition_by="_bucket")
            return writes.advance(self.spark, path, base, tag, lambda: writes.rewrite(rows, path, replaced, tag))
        if outcome.state_changes is None:
            return base
        changes = kept(outcome.state_changes)
        columns = [c for c in changes.columns if c != "_gone"]
        tables.create(self.spark, path, changes.select(*columns).schema, partition_by="_bucket")
        ident = p.identity
        on = " AND ".join(f"t.`{c}` = s.`{c}`" for c in ident)
        due = f"s._close <= {sta if sta is not None else engine.NO_TIME}"
        values = {f"`{c}`": f"s.`{c}`" for c in columns}
        return writes.advance(self.spark, path, base, tag, lambda: writes.tagged(self.spark, path, tag, lambda: (
            DeltaTable.forPath(self.spark, path).alias("t").merge(changes.alias("s"), on)
            .whenMatchedDelete(f"s._gone OR {due}")
            .whenMatchedUpdate(set=values)
            .whenNotMatchedInsert(condition=f"NOT s._gone AND NOT ({due})", values=values)
            .execute())))

    def _write_records(self, p: Pipeline, outcome: engine.Outcome, base: int | None, tag: str) -> int | None:
        if outcome.new_records is None:
            return base
        path = self.tables(p).records
        new = outcome.new_records.withColumn("_tbucket", F.floor(F.col("_ts") / self.bucket_ms).cast("long"))
        tables.create(self.spark, path, new.schema, partition_by="_tbucket")
        values = {f"`{c}`": f"s.`{c}`" for c in new.columns}

        def merge() -> None:
            builder = (DeltaTable.forPath(self.spark, path).alias("t")
                       .merge(new.alias("s"), "t._ord = s._ord").whenNotMatchedInsert(values=values))
            if outcome.records_cutoff is not None:
                builder = builder.whenNotMatchedBySourceDelete(f"t._ts < {outcome.records_cutoff}")
            writes.tagged(self.spark, path, tag, builder.execute)
        return writes.advance(self.spark, path, base, tag, merge)

    def _write_buffer(self, p: Pipeline, outcome: engine.Outcome, base: int | None, tag: str) -> int | None:
        if outcome.limited is None:
            return base
        path = self._buffer_path(p)  # the buffer after the batch replaces the one before
        tables.create(self.spark, path, outcome.limited.buffer.schema)
        return writes.advance(self.spark, path, base, tag,
                             lambda: writes.rewrite(outcome.limited.buffer, path, None, tag))

    def _buffer_path(self, p: Pipeline) -> str | None:
        return self.tables(p).buffer(p.suppression.name) if p.rate_limited else None

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

    def _result_of(self, p: Pipeline, row: Row, status: str) -> BatchResult:
        if "metrics" in row and row.metrics is not None:
            values = _recorded_metrics(row)
        else:  # a ledger row from before metrics were kept in the ledger
            m = self.read_metrics(p).filter(F.col("seq") == row.seq).collect()
            values = m[0].asDict() if m else {}
        published = values.get("rows_published", values.get("suppression_emit_total"))  # older rows: no count
        return BatchResult(p.name, row.batch_id, row.seq, status, int(published or 0),
                           int(values.get("late_records") or 0), to_datetime(row.stream_time), values)
