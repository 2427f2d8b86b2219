"""What a ``Runtime`` was configured with: the settings every attempt of a batch (or of a
replayed batch) runs under. Immutable, so an attempt never sees them change mid-way."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Callable

from pyspark.sql import SparkSession

from ..execution.streamtime import to_epoch_millis


@dataclass(frozen=True, kw_only=True)
class Settings:
    """See ``Runtime`` for what each means."""

    spark: SparkSession
    warehouse: str
    bucket_ms: int  # width of window state's close-time buckets
    quality: bool  # audit final and rate-limited rows before publishing
    expectations: str | None  # folder of the expectation suites (None: the default)
    before_write: Callable[[str], None]  # called before each write point (tests inject crashes)
    max_clock_skew: dt.timedelta | None
    partitions: int  # spark.sql.shuffle.partitions

    def latest_ms(self, batch_end: dt.datetime | None) -> int | None:
        """The latest event time a batch may hold (far-future times are refused: docs/design.md#input-checks)."""
        if self.max_clock_skew is None:
            return None
        clock = batch_end or dt.datetime.now(dt.timezone.utc)
        return to_epoch_millis(clock + self.max_clock_skew)
