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


def run(windows, batches, lateness="record", still_open=None, counted=None):
    """Final results of ``batches`` under ``windows``: list of dicts, in emission order; the
    number of windows open after each batch is appended to ``still_open`` if given, and its
    lateness counters to ``counted``: the largest lateness (stream time before a record minus
    its event time, or 0) and, for time windows, the windows records were too late for and the
    records too late for all of theirs."""
    st = None
    open_: dict = {}  # (key, start) -> Window, not yet emitted
    held: dict = {}  # sliding: key -> the windows Kafka's store holds (start -> [Window, latest event time])
    emitted, arrival = [], 0
    for index, batch in enumerate(batches):
        st_batch = st
        counts = {"record_lateness_max": 0.0} | (
            {"late_record_drop_total": 0, "late_records": 0} if isinstance(windows, Tumbling) else {}
        )
        for key, ts, raw in batch:
            value, arrival = (arrival, raw), arrival + 1  # values carry their arrival position
            sb = st_batch if lateness == "batch" else st
            is_open = lambda s, e: sb is None or windows.close(s, e) > sb
            counts["record_lateness_max"] = max(counts["record_lateness_max"], float(max(0, _t(sb) - ts)))
            if isinstance(windows, Tumbling):
                spans = list(windows.windows_for(ts))
                for s, e in spans:
                    if is_open(s, e):
                        open_.setdefault((key, s), Window(key, s, e)).values.append(value)
                dropped = sum(1 for s, e in spans if not is_open(s, e))
                counts["late_record_drop_total"] += dropped
                counts["late_records"] += dropped == len(spans)
            elif isinstance(windows, Session):
                _session_record(windows, open_, key, ts, value, is_open)
            else:
                _sliding_record(windows, open_, held.setdefault(key, {}), key, ts, value, is_open)
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
        if still_open is not None:
            still_open.append(len(open_))
        if counted is not None:
            counted.append(counts)
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


def _once(windows):
    """``windows`` without repeats, by start: Kafka puts the previous record's right window twice
    when it is also the record's left window (same start, same value); the framework counts one
    update."""
    return list({w.start: w for w in windows}.values())


def _sliding_record(windows, open_, held, key, ts, value, is_open):
    """Add one record as ``KStreamSlidingWindowAggregate`` does (``processReverse`` and
    ``processEarly``): from the windows the key holds (``held``: start -> [Window, latest event
    time], closed ones included), not from every record seen. Returns the windows it put
    (updated or created), each once, in the order Kafka puts them."""
    size, put = windows.size, []

    def update(start, values, latest):  # updateWindowAndForward: only while the window is open;
        if not is_open(start, start + size):  # ``values`` given: a new window, replacing any held
            return
        w = held[start][0] if values is None else Window(key, start, start + size, list(values))
        w.values.append(value)
        held[start] = [w, ts if latest is None else max(latest, ts)]
        open_[(key, start)] = w
        put.append(w)

    def copy_right(source):  # the record's right window: a copy of the window holding later records
        w = Window(key, ts + 1, ts + 1 + size, list(source[0].values))
        held[ts + 1] = [w, source[1]]
        open_[(key, ts + 1)] = w
        put.append(w)

    if not is_open(ts, ts + size):  # even the last window it could be in is closed
        return []
    if ts < size:  # early records share [0, size]
        combined = right = previous = None
        right_exists = False
        for start in sorted(s for s in held if 0 <= s <= ts + 1):
            if start == 0:
                combined = list(held[0])
                if held[0][1] < ts:
                    previous = held[0][1]
            elif start <= ts:
                right = [Window(key, start, start + size, list(held[start][0].values)), held[start][1]]
                update(start, None, held[start][1])
            else:
                right_exists = True
        if right is None and combined is not None and combined[1] > ts:
            right = [Window(key, 0, size, list(combined[0].values)), combined[1]]
        if not right_exists and right is not None and right[1] > ts:
            copy_right(right)
        if previous is not None and previous + 1 not in held:
            update(previous + 1, [], None)
        update(0, [] if combined is None else None, None if combined is None else combined[1])
        return _once(put)
    left = right = previous = None
    left_exists = right_exists = False
    for start in sorted((s for s in held if max(0, ts - 2 * size) <= s <= ts + 1), reverse=True):
        end, (w, latest) = start + size, held[start]
        if start == ts + 1:
            right_exists = True
        elif end > ts:
            right = right or [Window(key, start, end, list(w.values)), latest]
            update(start, None, latest)
        elif end == ts:
            left_exists = True
            update(start, None, latest)
            if latest >= ts:
                return _once(put)
            previous = latest
        else:
            left, previous = list(w.values), latest
            break
    if previous is not None and previous + 1 not in held and previous + 1 + size >= ts:
        update(previous + 1, [], None)  # the previous record's right window
    if not left_exists:  # the record's left window, holding the previous window's records if it reaches
        update(ts - size, left if left is not None and ts - size <= previous else [], None)
    if not right_exists and right is not None and right[1] > ts:
        copy_right(right)
    return _once(put)


def rate_limited(batches, limit, max_records=None, max_bytes=None, eager=True, windows=None):
    """``until_time_limit`` (docs/design.md#suppression), one record at a time: the latest value per key, or with
    ``windows`` (Tumbling or Sliding) the count per key and window, updated in every window the
    record touches (by start), or (Session) Kafka's forwards, tombstones included. Returns the
    emissions in order as ``(key, window_start or None, value, batch index, stream time)``
    (sessions: ``(key, start, end, value or None, ...)``), and the largest (entries, bytes) the
    buffer held after any record."""
    st, buf, out, peak = None, {}, [], (0, 0)
    open_, held = {}, {}  # windows: (key, start) -> Window holding event times; sliding: key -> held windows

    def size():
        return sum(0 if v is None else len(str(v).encode()) for _, v in buf.values())

    def leave(ident, index):
        _, value = buf.pop(ident)
        out.append((*ident, value, index, st))

    def order(i):  # oldest buffer time first, ties by key (and window)
        return (buf[i][0], i[0], *(x or 0 for x in i[1:]))

    for index, batch in enumerate(batches):
        for key, ts, value in batch:
            sb, st = st, ts if st is None else max(st, ts)
            if windows is None:
                updates = [((key, None), ts, value)]
            elif isinstance(windows, Session):
                is_open = lambda s, e: sb is None or windows.close(s, e) > sb
                updates = [(i, t, n) for i, t, n, _ in _session_forwards(windows, open_, key, ts, is_open)]
            else:
                is_open = lambda s, e: sb is None or windows.close(s, e) > sb
                updates = [
                    ((key, w.start), max(w.values), len(w.values))
                    for w in sorted(_puts(windows, open_, held, key, ts, is_open), key=lambda w: w.start)
                ]
            for ident, t, v in updates:
                buf[ident] = (buf[ident][0] if ident in buf else t, v)
                for i in sorted(buf, key=order):
                    if buf[i][0] <= st - limit:
                        leave(i, index)
                while eager and (
                    (max_records is not None and len(buf) > max_records)
                    or (max_bytes is not None and size() > max_bytes)
                ):
                    leave(min(buf, key=order), index)
            for i in sorted(buf, key=order):
                if buf[i][0] <= st - limit:
                    leave(i, index)
            peak = (max(peak[0], len(buf)), max(peak[1], size()))
    return out, peak


def _session_forwards(windows, open_, key, ts, is_open):
    """What ``KStreamSessionWindowAggregate`` forwards for one record, as (entry, time, value,
    close): a tombstone (value None) for each open session the record merges or extends (unless
    its own session ``[ts, ts]`` is the result), then its session with its count; entries are
    (key, start, end), stamped with the session's end."""
    hits = sorted(
        (
            w
            for (k, _), w in open_.items()
            if k == key and is_open(w.start, w.end) and w.start - windows.gap <= ts <= w.end + windows.gap
        ),
        key=lambda w: (w.end, w.start),
    )
    if not hits and not is_open(ts, ts):
        return []
    _session_record(windows, open_, key, ts, ts, is_open)
    s = open_[(key, min([ts] + [w.start for w in hits]))]
    gone = [] if (s.start, s.end) == (ts, ts) else hits
    return [((key, w.start, w.end), w.end, None, windows.close(w.start, w.end)) for w in gone] + [
        ((key, s.start, s.end), s.end, len(s.values), windows.close(s.start, s.end))
    ]


def _puts(windows, open_, held, key, ts, is_open):
    """The windows (Tumbling or Sliding) a record at ``ts`` updates or creates, holding event times."""
    if isinstance(windows, Sliding):
        return _sliding_record(windows, open_, held.setdefault(key, {}), key, ts, ts, is_open)
    hit = [open_.setdefault((key, s), Window(key, s, e)) for s, e in windows.windows_for(ts) if is_open(s, e)]
    for w in hit:
        w.values.append(ts)
    return hit


def held_until_close(windows, batches):
    """``until_window_closes``'s buffer (KIP-328): every window put (its value: the count of its
    records; sessions' tombstones too, valued None), kept until stream time reaches the close of
    the window first put under its name. The largest (windows, bytes of the values' string
    form) it held after any record, per batch."""
    st, entries, open_, held, peaks = None, {}, {}, {}, []
    for batch in batches:
        peak = (0, 0)
        for key, ts, _ in batch:
            sb, st = st, ts if st is None else max(st, ts)
            is_open = lambda s, e: sb is None or windows.close(s, e) > sb
            if isinstance(windows, Session):
                puts = [(i, n, close) for i, _, n, close in _session_forwards(windows, open_, key, ts, is_open)]
            else:
                puts = [
                    ((key, w.start), len(w.values), windows.close(w.start, w.end))
                    for w in _puts(windows, open_, held, key, ts, is_open)
                ]
            for i, n, close in puts:
                entries[i] = (entries[i][0] if i in entries else close, n)
            entries = {w: (close, n) for w, (close, n) in entries.items() if close > st}
            bytes_ = sum(0 if n is None else len(str(n)) for _, n in entries.values())
            peak = max(peak[0], len(entries)), max(peak[1], bytes_)
        peaks.append(peak)
    return peaks
