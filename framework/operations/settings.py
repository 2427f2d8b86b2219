"""What a ``Runtime`` was configured with: the settings every attempt of a batch (or of a
replayed batch) runs under. Immutable, so an attempt never sees them change mid-way."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Callable

from pyspark.sql import SparkSession

from ..execution.streamtime import to_epoch_millis
from ..storage.backend import SessionBackend

#: A Spark conf: a rate-limited batch whose records and previously buffered entries are at most
#: this many (default 10,000) folds its buffer on the driver, in one query (``ratelimit.limit``).
LOCAL_FOLD_RECORDS = "spark.finalresults.rateLimit.localFoldRecords"
LOCAL_FOLD_RECORDS_DEFAULT = 10_000


@dataclass(frozen=True, kw_only=True)
class Settings:
    """See ``Runtime`` for what each means."""

    spark: SparkSession
    backend: SessionBackend  # what differs between a classic and a Spark Connect session: chosen once, here
    warehouse: str
    bucket_ms: int  # width of window state's close-time buckets
    quality: bool  # audit final and rate-limited rows before publishing
    expectations: str | None  # folder of the expectation suites (None: the default)
    before_write: Callable[[str], None]  # called before each write point (tests inject crashes)
    max_clock_skew: dt.timedelta | None
    partitions: int  # spark.sql.shuffle.partitions
    local_fold_records: int  # LOCAL_FOLD_RECORDS: a rate-limited batch up to this size folds on the driver
    following: bool = False  # may write a version the pipeline was switched away from (``versions.build``)

    def latest_ms(self, batch_end: dt.datetime | None) -> int | None:
        """The latest event time a batch may hold (far-future times are refused: docs/design.md#input-checks)."""
        if self.max_clock_skew is None:
            return None
        clock = batch_end or dt.datetime.now(dt.timezone.utc)
        return to_epoch_millis(clock + self.max_clock_skew)
