"""KIP-328's suppression buffer, one update at a time (pure Python: no Spark, no Delta).

This is the exact, sequential definition of ``until_time_limit``; ``ratelimit`` runs it per
key in parallel (time bound only, or strict bounds checked afterwards) or, for an eager
size-bounded buffer, over the whole batch in arrival order.

For each update, as Kafka's suppress processor does: put it (a new key gets buffer time =
the update's time; an update of a buffered key replaces the value and keeps the buffer time),
evict every entry with ``buffer time <= stream time - limit``, then, if a bound is exceeded,
evict the oldest (buffer time, then key) until it holds again (eager) or record the overflow
(strict: the batch is refused). Every change is reported as a ``Change`` row.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Iterable, Iterator

END = 2**62  # position of the end of a batch (after its last record)


@dataclass
class Entry:
    """One buffered key: ``ref`` says where its current value is (the update that set it,
    or None for the value stored before this batch)."""

    ident: tuple
    order: tuple
    time: int
    size: int
    ref: tuple | None = None


@dataclass(frozen=True)
class Update:
    """A new value for ``ident`` from the record at arrival position ``pos``. ``before`` and
    ``after`` are the stream time before and after that record."""

    ident: tuple
    order: tuple
    pos: int
    before: int
    after: int
    time: int
    size: int
    ref: tuple


@dataclass(frozen=True)
class Tick:
    """Stream time after the record at ``pos`` (records that updated nothing advance it too)."""

    pos: int
    after: int


@dataclass(frozen=True)
class Change:
    """What happened to an entry. ``kind``: "put" (entered or updated), "emit" (left) or
    "keep" (still buffered after the batch). An emit whose ``pos`` is None left at the first
    record whose stream time reached ``threshold`` (a per-key fold does not see that record)."""

    kind: str
    entry: Entry
    pos: int | None
    stream_time: int | None
    d_count: int
    d_bytes: int
    threshold: int | None = None


class Buffer:
    """A time-ordered buffer with optional record and byte bounds."""

    def __init__(
        self, limit_ms: int, max_records: int | None = None, max_bytes: int | None = None, eager: bool = False
    ):
        self.limit, self.max_records, self.max_bytes, self.eager = limit_ms, max_records, max_bytes, eager
        self.entries: dict[tuple, Entry] = {}
        self._heap: list[tuple[int, tuple, int, tuple]] = []
        self._serial = 0
        self.bytes = 0

    def load(self, entries: Iterable[Entry]) -> None:
        """Entries buffered before this batch."""
        for e in entries:
            self._add(e)

    def _add(self, e: Entry) -> None:
        self.entries[e.ident] = e
        self.bytes += e.size
        self._serial += 1
        heapq.heappush(self._heap, (e.time, e.order, self._serial, e.ident))

    def _oldest(self) -> Entry | None:
        while self._heap:
            time, _, _, ident = self._heap[0]
            e = self.entries.get(ident)
            if e is not None and e.time == time:
                return e
            heapq.heappop(self._heap)  # stale: that entry left (and maybe came back later)
        return None

    def _evict(self, e: Entry, pos: int | None, stream_time: int | None, threshold: int | None = None) -> Change:
        del self.entries[e.ident]
        self.bytes -= e.size
        return Change("emit", e, pos, stream_time, -1, -e.size, threshold)

    def over(self) -> bool:
        return (self.max_records is not None and len(self.entries) > self.max_records) or (
            self.max_bytes is not None and self.bytes > self.max_bytes
        )

    def expire(self, stream_time: int, pos: int | None) -> list[Change]:
        """Evict every entry whose time limit has passed at ``stream_time``, oldest first."""
        out = []
        while (e := self._oldest()) is not None and e.time <= stream_time - self.limit:
            out.append(
                self._evict(
                    e, pos, stream_time if pos is not None else None, None if pos is not None else e.time + self.limit
                )
            )
        return out

    def process(self, u: Update) -> list[Change]:
        """Apply one update (and the time and size constraints after it)."""
        out = self.expire(u.before, None)  # left at an earlier record this fold did not see
        old = self.entries.get(u.ident)
        if old is None:
            self._add(Entry(u.ident, u.order, u.time, u.size, u.ref))
            out.append(Change("put", self.entries[u.ident], u.pos, u.after, 1, u.size))
        else:
            self.bytes += u.size - old.size
            out.append(Change("put", old, u.pos, u.after, 0, u.size - old.size))
            old.size, old.ref = u.size, u.ref
        out += self.expire(u.after, u.pos)
        while self.eager and self.over() and (oldest := self._oldest()) is not None:
            out.append(self._evict(oldest, u.pos, u.after))
        return out

    def tick(self, t: Tick) -> list[Change]:
        return self.expire(t.after, t.pos)

    def remaining(self) -> list[Change]:
        return [Change("keep", e, None, None, 0, 0) for e in self.entries.values()]


def fold(buffer: Buffer, events: Iterable[Update | Tick], stream_time: int | None, end_known: bool) -> Iterator[Change]:
    """Run ``events`` (in arrival order) through ``buffer``; then expire at the batch's final
    ``stream_time`` (idle advancement, or a shortened limit, can expire entries no record did).
    ``end_known`` says whether every record was seen (a Tick each): if not, entries expiring
    after the last update left at a record this fold did not see (``pos`` None)."""
    for ev in events:
        yield from buffer.process(ev) if isinstance(ev, Update) else buffer.tick(ev)
    if stream_time is not None:
        for c in buffer.expire(stream_time, END):
            if not end_known:
                c = Change("emit", c.entry, None, None, c.d_count, c.d_bytes, c.entry.time + buffer.limit)
            yield c
    yield from buffer.remaining()
