"""The runtime: the public entry point that runs pipelines' batches and reads their tables.

A thin facade: the batch protocol lives in ``attempt`` (one ``BatchAttempt`` per batch run),
publication in ``publication``, replays in ``replay``. A ``Runtime`` keeps only its settings,
the ledgers it has read (rows at a Delta version never change) and the catalog tables it
registered, so any number of batches may run through one runtime, also at the same time.
"""

from __future__ import annotations

import datetime as dt
import logging
import warnings
from dataclasses import replace
from typing import Callable, Iterable

from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession

from ..definition.pipeline import Pipeline
from ..errors import CommitLockTimeout, FrameworkError, first_line
from ..storage import backend, bookkeeping, classic, compaction, ledger, locks, tables, versions
from ..storage import catalog as tables_catalog
from .attempt import BatchAttempt, BatchResult, result_of
from .chunk import CHUNK_RECORDS, Progress, Range, run_chunks
from .replay import ReplayBatch, ReplayResult, replay, replay_range, restorable_start
from .settings import LOCAL_FOLD_RECORDS, LOCAL_FOLD_RECORDS_DEFAULT, Settings

log = logging.getLogger("framework.runtime")


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
    external tables once a batch committed (``framework.storage.catalog``): ``lake.user_alert_windows``.
    ``following`` lets batches run on a version the pipeline was switched away from: the build
    of a version that follows the pipeline's (``framework.operations.versions``).

    Example::

        rt = Runtime(spark, warehouse="/data/lake")
        result = rt.run_batch(pipeline, batch_id="2026-01-01T00", input_df=df)
        rt.read_output(pipeline).show()
    """

    def __init__(
        self,
        spark: SparkSession,
        warehouse: str,
        bucket: dt.timedelta = dt.timedelta(hours=1),
        quality: bool = True,
        expectations: str | None = None,
        before_write: Callable[[str], None] | None = None,
        max_clock_skew: dt.timedelta | None = dt.timedelta(days=1),
        catalog: str | None = None,
        following: bool = False,
    ):
        session = backend.of(spark)  # classic or Spark Connect: chosen once, for the session's life
        locks.check_atomic_commits(spark, warehouse)  # on S3, the LogStore replaces the file lock
        self.settings = Settings(
            spark=spark,
            backend=session,
            warehouse=warehouse,
            bucket_ms=bucket // dt.timedelta(milliseconds=1),
            quality=quality,
            expectations=expectations,
            before_write=before_write or (lambda point: None),
            max_clock_skew=max_clock_skew,
            partitions=int(spark.conf.get("spark.sql.shuffle.partitions") or 200),
            local_fold_records=int(
                spark.conf.get(LOCAL_FOLD_RECORDS, str(LOCAL_FOLD_RECORDS_DEFAULT)) or LOCAL_FOLD_RECORDS_DEFAULT
            ),
            following=following,
        )
        self.catalog = catalog if catalog is None else tables_catalog.check_schema(catalog)
        self._registered: set[str] = set()  # catalog tables this runtime registered or found
        self._ledgers = ledger.Ledgers(spark)

    @property
    def spark(self) -> SparkSession:
        return self.settings.spark

    @property
    def warehouse(self) -> str:
        return self.settings.warehouse

    @property
    def ledgers(self) -> ledger.Ledgers:
        """The ledgers this runtime read (rows known at a table version are not read again)."""
        return self._ledgers

    def tables(self, p: Pipeline) -> tables.Tables:
        """Paths of the Delta tables of ``p`` (of its version: ``storage.versions``)."""
        return tables.Tables(versions.root(self.warehouse, p.name, p.version), p.sink or "output")

    def current_version(self, p: Pipeline) -> int:
        """The version that is pipeline ``p.name`` (the last switch's; 1 if it never switched)."""
        return versions.current(self.spark, self.warehouse, p.name)

    # ---- reading ---------------------------------------------------------------------------
    def read_ledger(self, p: Pipeline) -> DataFrame:
        """The batch ledger: a 'committed' row per batch ('replaced' once a replay re-ran it),
        with ``ledger.LedgerRow``'s columns; no rows before the first batch."""
        rows = bookkeeping.read_ledger(self.spark, self.tables(p).root)
        return rows if rows is not None else self.spark.createDataFrame([], ledger.LEDGER_SCHEMA)

    def ledger(self, p: Pipeline) -> DataFrame:
        """Deprecated: ``read_ledger`` (the name of earlier versions, beside the ``ledger`` module)."""
        warnings.warn("Runtime.ledger is deprecated: use Runtime.read_ledger", DeprecationWarning, stacklevel=2)
        return self.read_ledger(p)

    def committed_batch(self, p: Pipeline, batch_id: str) -> BatchResult | None:
        """What batch ``batch_id`` of ``p`` did, as its ledger row records it; None until it commits."""
        row = bookkeeping.last_committed(self.spark, self.tables(p).root, batch_id)
        return None if row is None else result_of(p, row, "committed")

    def register(self, p: Pipeline) -> list[str]:
        """Keep ``p``'s existing tables in the ``catalog`` schema (no-op without one); their names.
        Each batch does it (tables registered before are skipped); call it for a pipeline that
        ran elsewhere."""
        if self.catalog is None or p.version != self.current_version(p):  # the names are the pipeline's version's
            return []
        try:
            t = self.tables(p)
            late = self._ledgers.late_schema(t.state)
            names = tables_catalog.register(self.spark, self.catalog, p, t, skip=self._registered, late_schema=late)
        except (classic.JavaError, PySparkException) as e:
            raise FrameworkError(
                f"pipeline {p.name!r}: registering its tables in catalog schema {self.catalog!r} failed: "
                f"{first_line(e)}. The batches are not affected: fix the catalog, then re-run the batch (a "
                "committed one reports 'already committed' and registers its tables)."
            ) from e
        self._registered.update(names)
        return names

    def read_output(self, p: Pipeline, version: int | None = None) -> DataFrame:
        """The results table: the published results of committed batches, of the version that
        is the pipeline (whichever ``p`` is: readers follow a switch), or of ``version``."""
        p = replace(p, version=version or self.current_version(p))
        if not tables.exists(self.spark, self.tables(p).output):
            raise FrameworkError(f"pipeline {p.name!r}: no batch has produced results yet")
        return tables.read(self.spark, self.tables(p).output)

    def read_metrics(self, p: Pipeline) -> DataFrame:
        """One metrics row per committed batch."""
        metrics = bookkeeping.read_metrics(self.spark, self.tables(p).root)
        if metrics is None:
            raise FrameworkError(f"pipeline {p.name!r}: no batch has committed yet")
        return metrics

    def read_late(self, p: Pipeline) -> DataFrame:
        """Records that landed in no window, with the stream time that made them late."""
        late = bookkeeping.read_late(self.spark, self.tables(p).root)
        if late is None:
            raise FrameworkError(f"pipeline {p.name!r}: no batch has kept late records yet")
        return late

    def read_rejected(self, p: Pipeline) -> DataFrame:
        """Records a quarantining pipeline (``bad_records="quarantine"``) left out of their
        batch: ``reason``, ``batch_id``, ``seq``, the record as JSON (``record``)."""
        rejected = bookkeeping.read_rejected(self.spark, self.tables(p).root)
        if rejected is None:
            raise FrameworkError(f"pipeline {p.name!r}: no batch has rejected records yet")
        return rejected

    def describe(self, p: Pipeline) -> str:
        """The topology as text, with where its tables live."""
        return p.describe() + f"\n  Warehouse: {self.tables(p).root}"

    # ---- running ---------------------------------------------------------------------------
    def run_batch(
        self,
        pipeline: Pipeline,
        batch_id: str,
        input_df: DataFrame,
        batch_end: dt.datetime | None = None,
        batch_start: dt.datetime | None = None,
        allow_gap: bool = False,
    ) -> BatchResult:
        """Apply one batch of records to ``pipeline``, exactly once (the protocol: ``attempt``).

        ``batch_end`` is the orchestrator's interval end; with ``idle_advance`` set on the
        pipeline, stream time advances to at least ``batch_end - idle_advance``. A batch given
        its interval's ``batch_start`` too (jobs do) is recorded with it, and refused with a
        ``SkippedIntervalError`` unless it starts where the last committed batch with an
        interval ended (``allow_gap``: the gap is intended).
        """
        p = pipeline.check_complete()
        attempt = BatchAttempt(self.settings, p, batch_id, self.tables(p), self._ledgers)
        self.register(p)  # a catalog name taken by another table stops the batch before it runs
        result = attempt.run(input_df, batch_end, batch_start, allow_gap)
        if result.status == ledger.Status.COMMITTED.value:
            self._maintain(p, result.batch_id, result.seq)
        self.register(p)
        return result

    def run_range(
        self,
        pipeline: Pipeline,
        r: Range,
        chunk_records: int = CHUNK_RECORDS,
        allow_gap: bool = False,
        progress: Progress | None = None,
    ) -> list[BatchResult]:
        """Apply the consecutive intervals of range ``r`` (``chunk.Range``: them and their
        records) of ``pipeline`` in order, each recorded as its own batch (its id, interval,
        fingerprint, metrics and asset of results) exactly as if run one by one. They run in
        chunks of at most ``chunk_records`` records, a chunk one Spark plan and one commit point
        (``chunk.ChunkAttempt``); a pipeline a chunk cannot count exactly (``chunk_refusal``) runs
        interval by interval. Intervals committed already report 'already committed' (or a
        ``FingerprintMismatchError``). ``progress(results, how)`` is called after each chunk (or
        interval) with its results.

        Example::

            hour = timedelta(hours=1)
            days = [Interval(f"{t:%Y-%m-%dT%H}", t, t + hour) for t in (start + k * hour for k in range(720))]
            rt.run_range(alerts, Range(days, landing_df, "ingest_time"))
        """
        p = pipeline.check_complete()
        t = self.tables(p)

        def maintain(done: list[BatchResult]) -> None:  # compact where one of its batches would have
            due = [r for r in done if r.status == ledger.Status.COMMITTED.value and compaction.due(t, r.seq)]
            if due:
                self._maintain(p, due[-1].batch_id, due[-1].seq)

        self.register(p)  # a catalog name taken by another table stops the range before it runs
        ran = run_chunks(
            self.settings,
            self._ledgers,
            p,
            t,
            r,
            bound=chunk_records,
            allow_gap=allow_gap,
            progress=progress,
            after=maintain,
        )
        self.register(p)
        return ran

    def _maintain(self, p: Pipeline, batch_id: str, seq: int) -> None:
        """Compact the bookkeeping tables that are due (``storage.compaction``); the batch stays
        committed whatever happens here."""
        try:
            compaction.compact(self.spark, compaction.due(self.tables(p), seq))
        except (classic.JavaError, PySparkException, CommitLockTimeout) as e:
            log.warning(
                "pipeline %r, batch %r: compacting the bookkeeping tables failed (the batch is committed; a later "
                "batch compacts them): %s",
                p.name,
                batch_id,
                first_line(e),
            )

    def replay(
        self,
        pipeline: Pipeline,
        batches: Iterable[ReplayBatch | tuple[str, DataFrame]],
        progress: Callable[[int, int], None] | None = None,
    ) -> ReplayResult:
        """Re-run the committed batches from ``batches[0]`` through the last one with the given
        input (``ReplayBatch`` or ``(batch_id, input_df)``), replacing their results atomically;
        ``progress(done, total)`` is called as each has run. See ``framework.operations.replay``."""
        return replay(self.settings, self._ledgers, self.tables(pipeline), pipeline, batches, progress)

    def replay_start(self, pipeline: Pipeline, batch_id: str) -> str:
        """Where a replay from committed batch ``batch_id`` can start: ``batch_id``, or the first
        interval of the chunk (or replayed range) that holds it (``replay.restorable_start``)."""
        _, rows = self._ledgers.read(self.tables(pipeline).state)
        return restorable_start(rows, batch_id)

    def replay_range(
        self, pipeline: Pipeline, r: Range, chunk_records: int = CHUNK_RECORDS, progress: Progress | None = None
    ) -> ReplayResult:
        """``replay`` of the committed intervals of ``r`` through the last committed batch, with
        the corrected records ``r`` holds, run in chunks. See ``framework.operations.replay``."""
        return replay_range(self.settings, self._ledgers, self.tables(pipeline), pipeline, r, chunk_records, progress)
