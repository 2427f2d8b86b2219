"""Final results only: Kafka Streams' windowed aggregation and suppression as idempotent
Spark + Delta micro-batches.

The public API (SPEC section 9)::

    from framework import (Pipeline, TimeWindows, SlidingWindows, SessionWindows,
                           Suppressed, BufferConfig, agg, Runtime, spark_session)
"""
from . import aggregations as agg
from .errors import (BatchFailedError, BatchOrderError, BufferFullError, ConcurrentBatchError,
                     DefinitionError, FingerprintMismatchError, FrameworkError, InputError, QualityGateError,
                     ReplayError)
from .suppress import BufferConfig, Suppressed
from .topology import Pipeline
from .windows import SessionWindows, SlidingWindows, TimeWindows


def __getattr__(name: str):
    # Spark-dependent names load lazily so that DAG files can import the topology cheaply.
    if name == "Runtime":
        from .runtime import Runtime
        return Runtime
    if name == "spark_session":
        from .session import spark_session
        return spark_session
    if name == "BatchResult":
        from .runtime import BatchResult
        return BatchResult
    raise AttributeError(name)


__all__ = ["Pipeline", "TimeWindows", "SlidingWindows", "SessionWindows", "Suppressed", "BufferConfig",
           "agg", "Runtime", "spark_session", "BatchResult", "FrameworkError", "DefinitionError",
           "InputError", "BatchFailedError", "BatchOrderError", "FingerprintMismatchError", "ConcurrentBatchError",
           "BufferFullError", "QualityGateError", "ReplayError"]
