"""Final results only: Kafka Streams' windowed aggregation and suppression as idempotent
Spark + Delta micro-batches.

The public API (docs/design.md#public-api)::

    from framework import (Pipeline, TimeWindows, SlidingWindows, SessionWindows,
                           Suppressed, BufferConfig, agg, Runtime, spark_session)
"""

from .definition import aggregations as agg
from .definition.pipeline import Pipeline
from .definition.suppress import BufferConfig, Suppressed
from .definition.windows import SessionWindows, SlidingWindows, TimeWindows
from .errors import (
    BatchFailedError,
    BatchOrderError,
    BufferFullError,
    CommitLockTimeout,
    ConcurrentBatchError,
    DefinitionError,
    FingerprintMismatchError,
    FrameworkError,
    InputError,
    PublicationError,
    QualityGateError,
    ReplayError,
    SkippedIntervalError,
    VersionError,
    VersionSwitchedError,
)


def __getattr__(name: str):
    # Spark-dependent names load lazily so that DAG files can import the topology cheaply.
    if name == "Runtime":
        from .operations.runtime import Runtime

        return Runtime
    if name == "spark_session":
        from .storage.session import spark_session

        return spark_session
    if name == "BatchResult":
        from .operations.runtime import BatchResult

        return BatchResult
    if name in ("Interval", "Range"):  # a range of intervals: Runtime.run_range, replay_range
        from .operations import chunk

        return getattr(chunk, name)
    raise AttributeError(name)


__all__ = [
    "Pipeline",
    "TimeWindows",
    "SlidingWindows",
    "SessionWindows",
    "Suppressed",
    "BufferConfig",
    "agg",
    "Runtime",
    "spark_session",
    "BatchResult",
    "Interval",
    "Range",
    "FrameworkError",
    "DefinitionError",
    "InputError",
    "BatchFailedError",
    "BatchOrderError",
    "FingerprintMismatchError",
    "ConcurrentBatchError",
    "CommitLockTimeout",
    "PublicationError",
    "BufferFullError",
    "QualityGateError",
    "SkippedIntervalError",
    "ReplayError",
    "VersionError",
    "VersionSwitchedError",
]
