"""Execution: turn one batch plus the previous state into state changes and results, with a
plan per window type (``PLANS``, by ``WindowType.kind``) and one for a plain table.

Pure DataFrame plans, no writes (``storage.state`` and ``storage.sinks`` write what an
attempt, ``operations.attempt``, planned). Two strategies:

- time windows (``time``) and plain tables (``plain``): a row per record and window holding it
  (per record for a plain table), aggregated into partial columns; time windows keep a log of
  partial rows (one per window and batch, or chunk, that touched it) merged when the window
  closes, a plain table one row per key merged with the batch's;
- session (``session``) and sliding (``sliding``) windows: a fold over each key's rows in arrival
  order (``execution.fold``) decides which sessions a record joins or merges, or which sliding
  windows it updates and creates (as Kafka Streams does, from the windows the key holds);
  aggregation stays in SQL.

A record joins window w only while ``close_time(w) > stream time before the record``
(docs/design.md#lateness); each window type says when its windows close (``Windows.close``).
Every plan yields an ``Effect`` of one shape, its updates too (``execution.batch``), so rate
limiting (``ratelimit``), which comes after, never asks which plan made it.
"""

from __future__ import annotations

from typing import Any, Callable

from pyspark.sql import DataFrame

from ...definition.pipeline import Pipeline
from ...definition.windows import SessionWindows, SlidingWindows, TimeWindows
from ..batch import Batch, Effect
from . import plain, session, sliding, time

__all__ = ["PLANS", "effect_of", "needs_order", "reduce", "reduces"]

PLANS: dict[str, Callable[[Batch, Any], Effect]] = {
    TimeWindows.kind: time.plan,
    SlidingWindows.kind: sliding.plan,
    SessionWindows.kind: session.plan,
}
"""The plan of each window type (``WindowType.kind``); a pipeline without windows is a plain table."""


def effect_of(b: Batch) -> Effect:
    """The effect of batch ``b`` for its pipeline's window type."""
    w = b.pipeline.windows
    return plain.plan(b) if w is None else PLANS[w.kind](b, w)


def reduces(p: Pipeline) -> bool:
    """Whether ``p``'s plan takes its records from one pass over them (``reduce``), which the
    input's validation and the batch's counters can ride along: time windows judged per batch.
    A plan that needs arrival order reads the records in that order first."""
    return isinstance(p.windows, TimeWindows) and not needs_order(p)


def reduce(p: Pipeline, records: DataFrame, input_columns: tuple[str, ...], observe: time.Observe) -> DataFrame:
    """``records`` (with ``STREAM_BEFORE``) as ``p``'s plan keeps them (``Batch.reduced``), its
    counters computed on the way by ``observe``; for pipelines that ``reduces``."""
    assert isinstance(p.windows, TimeWindows)
    return time.reduce(p, p.windows, records, input_columns, observe)


def needs_order(p: Pipeline) -> bool:
    """Whether a plan needs each record's arrival position and the stream time just before it
    (a scan over the batch in arrival order): per-record lateness, sessions, sliding windows,
    rate limiting and order-sensitive aggregates do; time windows judged per batch do not."""
    ordered = any(a.ordered for a in p.aggregates)
    in_order = p.windows is not None and p.windows.scans_in_order
    return p.lateness == "record" or ordered or p.emission.buffered or in_order
