"""A pure-Python reference model of the semantics (docs/design.md#semantics), one record at a time, the way
Kafka Streams processes. Small and obviously correct; used only by tests.

A stream is a list of batches; a batch is a list of ``(key, ts_ms, value)`` in arrival order.
``run`` returns the final results: one dict per emitted window with its bounds, its values in
arrival order, and the batch index and stream time at which it was emitted.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Tumbling:
    size: int
    grace: int
    advance: int | None = None

    def windows_for(self, ts):
        adv = self.advance or self.size
        start = ts - ts % adv
        while start >= 0 and start > ts - self.size:
            yield start, start + self.size
            start -= adv

    def close(self, start, end):
        return end + self.grace


@dataclass(frozen=True)
class Sliding:
    size: int
    grace: int

    def close(self, start, end):
        return end + 1 + self.grace


@dataclass(frozen=True)
class Session:
    gap: int
    grace: int

    def close(self, start, end):
        return end + 1 + self.gap + self.grace


@dataclass
class Window:
    key: object
    start: int
    end: int
    values: list = field(default_factory=list)


def run(windows, batches, lateness="record"):
    """Final results of ``batches`` under ``windows``: list of dicts, in emission order."""
    st = None
    open_: dict = {}  # (key, start) -> Window, not yet emitted
    known: dict = {}  # sliding: key -> [(ts, value)] of every record seen
    emitted, arrival = [], 0
    for index, batch in enumerate(batches):
        st_batch = st
        for key, ts, raw in batch:
            value, arrival = (arrival, raw), arrival + 1  # values carry their arrival position
            sb = st_batch if lateness == "batch" else st
            is_open = lambda s, e: sb is None or windows.close(s, e) > sb
            if isinstance(windows, Tumbling):
                for s, e in windows.windows_for(ts):
                    if is_open(s, e):
                        open_.setdefault((key, s), Window(key, s, e)).values.append(value)
            elif isinstance(windows, Session):
                _session_record(windows, open_, key, ts, value, is_open)
            else:
                _sliding_record(windows, open_, known.setdefault(key, []), key, ts, value, is_open)
            st = ts if st is None else max(st, ts)
        for k in sorted(
            (k for k, w in open_.items() if windows.close(w.start, w.end) <= _t(st)), key=lambda k: (str(k[0]), k[1])
        ):
            w = open_.pop(k)
            emitted.append(
                {
                    "key": w.key,
                    "start": w.start,
                    "end": w.end,
                    "values": [v for _, v in sorted(w.values, key=lambda x: x[0])],
                    "batch": index,
                    "stream_time": st,
                }
            )
    return emitted


def _t(st):
    return -(2**63) if st is None else st


def _session_record(windows, open_, key, ts, value, is_open):
    hits = [
        w
        for (k, _), w in open_.items()
        if k == key and is_open(w.start, w.end) and w.start - windows.gap <= ts <= w.end + windows.gap
    ]
    if not hits and not is_open(ts, ts):
        return
    merged = Window(key, min([ts] + [w.start for w in hits]), max([ts] + [w.end for w in hits]))
    for w in hits:
        merged.values.extend(w.values)
        del open_[(key, w.start)]
    merged.values.append(value)
    open_[(key, merged.start)] = merged


def _sliding_record(windows, open_, seen, key, ts, value, is_open):
    """Add one record; return the windows it touched (updated or created), each once."""
    size = windows.size
    touched = [
        w
        for (k, _), w in open_.items()  # 1. update open windows holding ts
        if k == key and w.start <= ts <= w.end and is_open(w.start, w.end)
    ]

    def create(start):  # a window and what it holds so far
        if (key, start) not in open_ and is_open(start, start + size):
            held = [v for t, v in seen if start <= t <= start + size]
            open_[(key, start)] = Window(key, start, start + size, held)
            return open_[(key, start)]
        return None

    left = create(max(ts - size, 0))  # 2. the record's left window
    right = None  # 3. its right window, if it holds records
    if any(ts < t <= ts + 1 + size for t, _ in seen):
        right = create(ts + 1)
    earlier = [
        create(t + 1)
        for t, _ in seen  # 4. right windows of earlier records
        if t + 1 <= ts <= t + 1 + size
    ]
    for w in touched + [left] + earlier:
        if w is not None:
            w.values.append(value)
    seen.append((ts, value))
    return touched + [w for w in [left, right, *earlier] if w is not None]


def rate_limited(batches, limit, max_records=None, max_bytes=None, eager=True, windows=None):
    """``until_time_limit`` (docs/design.md#suppression), one record at a time: the latest value per key, or with
    ``windows`` (Tumbling or Sliding) the count per key and window, updated in every window the
    record touches (by start). Returns the emissions in order as
    ``(key, window_start or None, value, batch index, stream time)``, and the largest
    (entries, bytes) the buffer held after any record."""
    st, buf, out, peak = None, {}, [], (0, 0)
    open_, seen = {}, {}  # windows: (key, start) -> Window holding event times; sliding: key -> records

    def size():
        return sum(0 if v is None else len(str(v).encode()) for _, v in buf.values())

    def leave(ident, index):
        _, value = buf.pop(ident)
        out.append((ident[0], ident[1], value, index, st))

    def touched(key, ts, is_open):
        if isinstance(windows, Sliding):
            return _sliding_record(windows, open_, seen.setdefault(key, []), key, ts, ts, is_open)
        hit = [open_.setdefault((key, s), Window(key, s, e)) for s, e in windows.windows_for(ts) if is_open(s, e)]
        for w in hit:
            w.values.append(ts)
        return hit

    for index, batch in enumerate(batches):
        for key, ts, value in batch:
            sb, st = st, ts if st is None else max(st, ts)
            if windows is None:
                updates = [((key, None), ts, value)]
            else:
                is_open = lambda s, e: sb is None or windows.close(s, e) > sb
                updates = [
                    ((key, w.start), max(w.values), len(w.values))
                    for w in sorted(touched(key, ts, is_open), key=lambda w: w.start)
                ]
            for ident, t, v in updates:
                buf[ident] = (buf[ident][0] if ident in buf else t, v)
                for i in sorted(buf, key=lambda i: (buf[i][0], i[0], i[1] or 0)):
                    if buf[i][0] <= st - limit:
                        leave(i, index)
                while eager and (
                    (max_records is not None and len(buf) > max_records)
                    or (max_bytes is not None and size() > max_bytes)
                ):
                    leave(min(buf, key=lambda i: (buf[i][0], i[0], i[1] or 0)), index)
            for i in sorted(buf, key=lambda i: (buf[i][0], i[0], i[1] or 0)):
                if buf[i][0] <= st - limit:
                    leave(i, index)
            peak = (max(peak[0], len(buf)), max(peak[1], size()))
    return out, peak


def held_until_close(windows, batches):
    """``until_window_closes``'s buffer (KIP-328) over time windows: every open window, put on
    each update (its value: the count of its records) and evicted once stream time reaches its
    close. The largest (windows, bytes of the values' string form) it held after any record,
    per batch."""
    st, held, peaks = None, {}, []
    for batch in batches:
        peak = (0, 0)
        for key, ts, _ in batch:
            sb, st = st, ts if st is None else max(st, ts)
            for s, e in windows.windows_for(ts):
                if sb is None or windows.close(s, e) > sb:
                    held[(key, s)] = (windows.close(s, e), held.get((key, s), (0, 0))[1] + 1)
            held = {w: (close, n) for w, (close, n) in held.items() if close > st}
            peak = max(peak[0], len(held)), max(peak[1], sum(len(str(n)) for _, n in held.values()))
        peaks.append(peak)
    return peaks
