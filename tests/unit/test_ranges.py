"""A range's intervals and a replay's start, without Spark (``operations.chunk``, ``operations.replay``)."""

import datetime as dt

import pytest

from framework import FrameworkError, Interval, Range
from framework.operations.chunk import split
from framework.operations.replay import restorable_start
from framework.storage.ledger import LedgerRow

T0, HOUR = dt.datetime(2026, 1, 1), dt.timedelta(hours=1)


def _hours(*starts):
    return [Interval(f"{T0 + k * HOUR:%Y-%m-%dT%H}", T0 + k * HOUR, T0 + (k + 1) * HOUR) for k in starts]


def test_a_range_takes_consecutive_intervals_in_the_order_of_their_ids_only():
    assert len(Range(_hours(0, 1, 2), None, "arrived").intervals) == 3
    with pytest.raises(FrameworkError, match="each ending where the next starts"):
        Range(_hours(0, 2), None, "arrived")  # a gap: its records would go to the next interval
    shuffled = _hours(0, 1)
    shuffled[1] = Interval("2025-12-31T23", shuffled[1].start, shuffled[1].end)
    with pytest.raises(FrameworkError, match="batch ids in increasing order"):
        Range(shuffled, None, "arrived")
    with pytest.raises(FrameworkError, match="empty"):
        Range([Interval("b", T0, T0)], None, "arrived")


def _row(seq, batch_id, attempt, state_version):
    return LedgerRow(seq=seq, batch_id=batch_id, status="committed", attempt=attempt, state_version=state_version)


def test_a_replay_from_inside_a_chunk_starts_at_the_chunk_and_nothing_else_moves_it():
    rows = [
        _row(1, "a", "before-upgrade", None),  # a row from before the _state table: no state kept
        _row(2, "b", "x", 7),  # a chunk of three: its first row has the state before it
        _row(3, "c", "x", None),
        _row(4, "d", "x", None),
        _row(5, "e", "y", 9),
    ]
    assert restorable_start(rows, "d") == "b" and restorable_start(rows, "c") == "b"
    assert restorable_start(rows, "b") == "b" and restorable_start(rows, "e") == "e"
    assert restorable_start(rows, "a") == "a"  # the replay refuses it, naming why
    assert restorable_start(rows, "cc") == "cc"  # not committed: the replay refuses it


def test_a_range_splits_by_records_and_apart_from_committed_intervals():
    hours = _hours(*range(400))
    sizes = [len(chunk) for chunk in split(hours, [10] * 400, set(), bound=10_000)]
    assert sizes == [400]  # no cap on intervals: a month of hours is one chunk when its records fit
    assert [len(c) for c in split(hours[:10], [10] * 10, set(), bound=30)] == [3, 3, 3, 1]  # the record bound
    assert [len(c) for c in split(hours[:4], [50, 1, 1, 1], set(), bound=30)] == [1, 3]  # a big interval alone
    committed = {hours[1].batch_id, hours[2].batch_id}
    assert [[iv.batch_id for iv in c] for c in split(hours[:4], [1] * 4, committed, bound=30)] == [
        [hours[0].batch_id],
        [hours[1].batch_id, hours[2].batch_id],
        [hours[3].batch_id],
    ]
