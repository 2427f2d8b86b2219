"""Per-key folds in arrival order: the decisions a plan must take one record after another,
from what the key holds, as a Kafka Streams processor takes them.

Two window types need one: session windows (which open sessions a record joins or merges) and
sliding windows (which windows a record updates or creates, KIP-450). The fold decides only
*which* windows hold which records; the aggregates stay in SQL.

``run`` is one ``mapInArrow`` pass. Its input is each key's held rows (from state) and the
batch's records, partitioned by key and sorted (held rows first, then records in arrival
order), so the pass sees each key's rows together. A ``KeyFold`` is made per key, takes its
rows and gives out rows of its ``COLUMNS`` (all ``long``), which ``run`` returns after the keys.
"""

from __future__ import annotations

import bisect
from abc import ABC, abstractmethod
from typing import Callable, ClassVar, Iterable, Iterator

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import LongType, StructField, StructType

from ..definition.columns import ARRIVAL_POS, STREAM_BEFORE, TS
from ..definition.windows import SessionWindows, SlidingWindows

HELD, RECORD, TOMBSTONE = 0, 1, 2  # kinds of input row (and of a session fold's member)
ROW_KIND, ID, A, B = "_row_kind", "_id", "_a", "_b"  # input: kind, id (window start or arrival position), two times
BATCH_ROWS = 10_000  # output rows per Arrow batch


class KeyFold(ABC):
    """One key's fold: held rows first, then records in arrival order, then ``rows``."""

    COLUMNS: ClassVar[tuple[str, ...]]

    @abstractmethod
    def held(self, ident: int, a: int, b: int) -> None:
        """A row the key holds from earlier batches."""

    @abstractmethod
    def record(self, pos: int, ts: int, judged: int | None) -> None:
        """A record at event time ``ts``, judged against stream time ``judged`` (None: no
        stream time yet)."""

    @abstractmethod
    def rows(self) -> Iterable[tuple]:
        """What the fold decided, one tuple of ``COLUMNS`` per row."""


def run(held: DataFrame, records: DataFrame, keys: list[str], make: Callable[[], KeyFold]) -> DataFrame:
    """``make``'s fold over every key: ``held`` has the keys, ``ID``, ``A`` and ``B``;
    ``records`` the keys, ``ARRIVAL_POS``, ``TS`` and ``STREAM_BEFORE``. Checkpointed, as the
    plan reads it several times."""
    rows = held.select(
        *keys, F.lit(HELD).alias(ROW_KIND), ID, A, B, F.lit(None).cast("long").alias(STREAM_BEFORE)
    ).unionByName(
        records.select(
            *keys,
            F.lit(RECORD).alias(ROW_KIND),
            F.col(ARRIVAL_POS).alias(ID),
            F.col(TS).alias(A),
            F.col(TS).alias(B),
            STREAM_BEFORE,
        )
    )
    schema = StructType([*(records.schema[k] for k in keys), *(StructField(c, LongType()) for c in make().COLUMNS)])
    ordered = rows.repartition(*keys).sortWithinPartitions(*keys, ROW_KIND, ID)
    return ordered.mapInArrow(_each_key(keys, make, schema), schema).localCheckpoint(eager=True)


def _each_key(keys: list[str], make: Callable[[], KeyFold], schema: StructType):
    """The ``mapInArrow`` function: a fresh fold per key, its rows out after the key."""
    arrow = to_arrow_schema(schema)
    names = arrow.names

    def to_batch(out: list) -> pa.RecordBatch:
        columns: list = list(zip(*out)) if out else [[] for _ in names]
        return pa.RecordBatch.from_arrays(
            [pa.array(c, type=arrow.field(n).type) for n, c in zip(names, columns)], schema=arrow
        )

    def fold(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        key: tuple | None = None
        one: KeyFold = make()
        out: list = []
        for batch in batches:
            column = {name: batch.column(name).to_pylist() for name in batch.schema.names}
            rows = zip(zip(*(column[k] for k in keys)), *(column[c] for c in (ROW_KIND, ID, A, B, STREAM_BEFORE)))
            for row_key, kind, ident, a, b, judged in rows:
                if row_key != key:
                    if key is not None:
                        out.extend((*key, *r) for r in one.rows())
                    key, one = row_key, make()
                if kind == HELD:
                    one.held(ident, a, b)
                else:
                    one.record(ident, a, judged)
            if len(out) >= BATCH_ROWS:
                yield to_batch(out)
                out = []
        if key is not None:
            out.extend((*key, *r) for r in one.rows())
        yield to_batch(out)

    return fold


def _open(close: int, judged: int | None) -> bool:
    return judged is None or close > judged


# ---- session windows ---------------------------------------------------------------------------
class Sessions(KeyFold):
    """Sessions (KIP-94): held rows are open sessions (``A``, ``B``: start and end, ``ID`` the
    start). A record joins every *open* session within ``gap`` (merging them); a session closed
    before the record arrived is left as it was emitted. A record with no open neighbour whose
    own session is already closed is late (left out).

    Out (``_member``, ``_id``, ``_start``, ``_end``, ``_at``, ``_step``, ``_opens``): each held
    session's and landed record's membership of the sessions after the batch (``_member``
    ``HELD`` or ``RECORD``, ``_at`` null), a record's with the sessions it opened (``_opens``:
    1 less the open sessions it joined, so merging two counts -1). With ``updates``, also Kafka's forwards
    (``KStreamSessionWindowAggregate``), at the record's position ``_at`` in order ``_step``: a
    ``TOMBSTONE`` for each session the record merged away or extended (unless its own session
    ``[ts, ts]`` is the result), then the record's session, as one row per member it holds then.
    Those rows grow with the square of a session's records in one batch."""

    COLUMNS = ("_member", "_id", "_start", "_end", "_at", "_step", "_opens")

    def __init__(self, w: SessionWindows, updates: bool = False):
        self.gap, self.after_end, self.updates = w.gap_ms, w.close_after_end_ms(), updates
        self.active: list = []  # [start, end, members]; members are (kind, id)
        self.done: list = []
        self.forwards: list[tuple] = []
        self.opens: dict[int, int] = {}  # by landed record: the sessions it opened

    def held(self, ident: int, a: int, b: int) -> None:
        self.active.append([a, b, [(HELD, ident)]])

    def record(self, pos: int, ts: int, judged: int | None) -> None:
        if judged is not None:  # the sessions closed before the record stay as they were emitted
            closed = [s for s in self.active if not _open(s[1] + self.after_end, judged)]
            if closed:
                self.done += closed
                self.active = [s for s in self.active if _open(s[1] + self.after_end, judged)]
        hit = [s for s in self.active if s[0] - self.gap <= ts <= s[1] + self.gap]
        if not hit and not _open(ts + self.after_end, judged):
            return
        self.opens[pos] = 1 - len(hit)
        replaced = [(s[0], s[1]) for s in hit] if self.updates else []  # their bounds before the record
        if len(hit) == 1:  # the session grows in place (a copy of its members a record cost a
            joined = hit[0]  # session of n records n * n / 2 copies: 0.6 s a session of 7,200)
            joined[0], joined[1] = min(ts, joined[0]), max(ts, joined[1])
            joined[2].append((RECORD, pos))
        else:
            joined = [
                min([ts] + [s[0] for s in hit]),
                max([ts] + [s[1] for s in hit]),
                [m for s in hit for m in s[2]] + [(RECORD, pos)],
            ]
            self.active = [s for s in self.active if all(s is not h for h in hit)] + [joined]
        if self.updates:
            gone = sorted(replaced, key=lambda s: (s[1], s[0])) if joined[:2] != [ts, ts] else []
            self.forwards += [(TOMBSTONE, None, a, b, pos, step, None) for step, (a, b) in enumerate(gone)]
            self.forwards += [(kind, ident, *joined[:2], pos, len(gone), None) for kind, ident in joined[2]]

    def rows(self) -> Iterable[tuple]:
        for s in self.active + self.done:
            yield from (
                (kind, ident, s[0], s[1], None, None, self.opens.get(ident) if kind == RECORD else None)
                for kind, ident in s[2]
            )
        yield from self.forwards


# ---- sliding windows ---------------------------------------------------------------------------
WINDOW, MEMBER, COPY, LANDING = 0, 1, 2, 3  # kinds of sliding output row


class _Held:
    """A window as the sliding fold holds it: Kafka's aggregate and timestamp, here the stored
    window whose partials it starts from (``base``), the batch's records it holds since, and the
    latest event time in it."""

    __slots__ = ("base", "members", "max_ts", "changed")

    def __init__(self, base: int | None, members: list, max_ts: int | None):
        self.base, self.members, self.max_ts, self.changed = base, members, max_ts, False

    def copy(self) -> "_Held":
        return _Held(self.base, list(self.members), self.max_ts)


def _copied(source: _Held, max_ts: int | None) -> _Held:
    """A new window holding what ``source`` holds: its members count as copied, not as updates."""
    return _Held(source.base, [(p, 0) for p, _ in source.members], max_ts)


class Sliding(KeyFold):
    """Sliding windows (KIP-450) as ``KStreamSlidingWindowAggregate`` creates them: from the
    windows the key holds, in arrival order (docs/design.md#windows). Held rows are windows
    (``ID`` start, ``A`` latest event time). A record updates the held windows that contain it,
    finds the previous record only through them, and creates its left window, the previous
    record's right window and its own right window by Kafka's rules; a window is created or
    updated only while open for the record.

    Out (``_out``, ``_start``, ``_id``, ``_base``, ``_max_ts``, ``_n``): per changed window a
    ``WINDOW`` row (its stored base window and latest event time); per record a window holds a
    ``MEMBER`` row (``_n`` 1 when the record updated it, 0 when copied in as the window was
    created); per right window created as a copy a ``COPY`` row (an update without a record);
    per record a ``LANDING`` row (``_n`` the windows it was dropped from). A record that updated
    no window is late."""

    COLUMNS = ("_out", "_start", "_id", "_base", "_max_ts", "_n")

    def __init__(self, w: SlidingWindows):
        self.size, self.w = w.size_ms, w
        self.windows: dict[int, _Held] = {}
        self.starts: list[int] = []  # sorted
        self.landings: list[tuple] = []

    def held(self, ident: int, a: int, b: int) -> None:
        self.windows[ident] = _Held(ident, [], a)
        bisect.insort(self.starts, ident)

    def _between(self, lo: int, hi: int) -> list[int]:
        return self.starts[bisect.bisect_left(self.starts, lo) : bisect.bisect_right(self.starts, hi)]

    def record(self, pos: int, ts: int, judged: int | None) -> None:
        self.pos, self.ts, self.judged, self.drops = pos, ts, judged, 0
        if not _open(self.w.last_close(ts), judged):  # even its last window closed: skipped whole
            self.drops += 1
        elif ts < self.size:
            self._early()
        else:
            self._in_order()
        self.landings.append((LANDING, None, pos, None, None, self.drops))

    def _update(self, start: int, win: _Held) -> None:
        """Kafka's ``updateWindowAndForward``: the record joins ``win`` if it is still open."""
        if not _open(self.w.close(start + self.size), self.judged):
            self.drops += 1
            return
        if self.windows.get(start) is not win:  # a new window: put, replacing any held one
            if start not in self.windows:
                bisect.insort(self.starts, start)
            self.windows[start] = win
        win.members.append((self.pos, 1))
        win.max_ts = self.ts if win.max_ts is None else max(win.max_ts, self.ts)
        win.changed = True

    def _put_copy(self, start: int, source: _Held) -> None:
        """The record's right window, created as a copy of the window holding the later records
        (Kafka puts it without the record, and forwards it)."""
        win = _copied(source, source.max_ts)
        win.changed = True
        if start not in self.windows:
            bisect.insort(self.starts, start)
        self.windows[start] = win
        self.landings.append((COPY, start, self.pos, None, None, 0))

    def _in_order(self) -> None:
        """Kafka's ``processReverse``: held windows from the latest start down."""
        ts, size = self.ts, self.size
        seen: set[int] = set()
        left: _Held | None = None
        right: _Held | None = None
        left_exists = right_exists = False
        previous: int | None = None
        for start in reversed(self._between(max(0, ts - 2 * size), ts + 1)):
            win = self.windows[start]
            seen.add(start)
            end = start + size
            if start == ts + 1:
                right_exists = True
            elif end > ts:
                if right is None:
                    right = win.copy()
                self._update(start, win)
            elif end == ts:
                latest = win.max_ts
                left_exists = True
                self._update(start, win)
                if latest is not None and latest < ts:
                    previous = latest
                else:
                    return
            else:
                left, previous = win.copy(), win.max_ts
                break
        if previous is not None and previous + 1 not in seen and previous + 1 + size >= ts:
            self._update(previous + 1, _Held(None, [], None))  # the previous record's right window
        if not left_exists:  # the record's left window, holding the previous window's records if it reaches
            reaches = left is not None and previous is not None and ts - size <= previous
            self._update(ts - size, _copied(left, ts) if left is not None and reaches else _Held(None, [], None))
        if not right_exists and right is not None and right.max_ts is not None and right.max_ts > ts:
            self._put_copy(ts + 1, right)

    def _early(self) -> None:
        """Kafka's ``processEarly``: records before ``size`` share the window ``[0, size]``."""
        ts = self.ts
        seen: set[int] = set()
        combined: _Held | None = None
        combined_latest: int | None = None
        right: _Held | None = None
        right_exists = False
        previous: int | None = None
        for start in self._between(0, ts + 1):
            win = self.windows[start]
            seen.add(start)
            if start == 0:
                combined, combined_latest = win, win.max_ts
                if win.max_ts is not None and win.max_ts < ts:
                    previous = win.max_ts
            elif start <= ts:
                right = win.copy()
                self._update(start, win)
            else:
                right_exists = True
        if right is None and combined is not None and combined_latest is not None and combined_latest > ts:
            right = combined.copy()
        if not right_exists and right is not None and right.max_ts is not None and right.max_ts > ts:
            self._put_copy(ts + 1, right)
        if previous is not None and previous + 1 not in seen:
            self._update(previous + 1, _Held(None, [], None))
        self._update(0, combined if combined is not None else _Held(None, [], None))

    def rows(self) -> Iterable[tuple]:
        for start, win in self.windows.items():
            if win.changed:
                yield (WINDOW, start, None, win.base, win.max_ts, 0)
                yield from ((MEMBER, start, p, None, None, direct) for p, direct in win.members)
        yield from self.landings
