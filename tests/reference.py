"""A pure-Python reference model of the semantics (SPEC 2-3), one record at a time, the way
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
    open_: dict = {}          # (key, start) -> Window, not yet emitted
    known: dict = {}          # sliding: key -> [(ts, value)] of every record seen
    emitted, arrival = [], 0
    for index, batch in enumerate(batches):
        st_batch = st
        for key, ts, raw in batch:
            value, arrival = (arrival, raw), arrival + 1   # values carry their arrival position
            sb = st_batch if lateness == "batch" else st
            is_open = (lambda s, e: sb is None or windows.close(s, e) > sb)
            if isinstance(windows, Tumbling):
                for s, e in windows.windows_for(ts):
                    if is_open(s, e):
                        open_.setdefault((key, s), Window(key, s, e)).values.append(value)
            elif isinstance(windows, Session):
                _session_record(windows, open_, key, ts, value, is_open)
            else:
                _sliding_record(windows, open_, known.setdefault(key, []), key, ts, value, is_open)
            st = ts if st is None else max(st, ts)
        for k in sorted((k for k, w in open_.items() if windows.close(w.start, w.end) <= _t(st)),
                        key=lambda k: (str(k[0]), k[1])):
            w = open_.pop(k)
            emitted.append({"key": w.key, "start": w.start, "end": w.end,
                            "values": [v for _, v in sorted(w.values, key=lambda x: x[0])],
                            "batch": index, "stream_time": st})
    return emitted


def _t(st):
    return -(2 ** 63) if st is None else st


def _session_record(windows, open_, key, ts, value, is_open):
    hits = [w for (k, _), w in open_.items() if k == key and is_open(w.start, w.end)
            and w.start - windows.gap <= ts <= w.end + windows.gap]
    if not hits and not is_open(ts, ts):
        return
    merged = Window(key, min([ts] + [w.start for w in hits]), max([ts] + [w.end for w in hits]))
    for w in hits:
        merged.values.extend(w.values)
        del open_[(key, w.start)]
    merged.values.append(value)
    open_[(key, merged.start)] = merged


def _sliding_record(windows, open_, seen, key, ts, value, is_open):
    size = windows.size
    for (k, _), w in open_.items():                      # 1. update open windows holding ts
        if k == key and w.start <= ts <= w.end and is_open(w.start, w.end):
            w.values.append(value)

    def create(start):                                    # a window and what it holds so far
        if (key, start) not in open_ and is_open(start, start + size):
            held = [v for t, v in seen if start <= t <= start + size]
            open_[(key, start)] = Window(key, start, start + size, held)
            return open_[(key, start)]
        return None

    left = create(max(ts - size, 0))                      # 2. the record's left window
    if left is not None:
        left.values.append(value)
    if any(ts < t <= ts + 1 + size for t, _ in seen):     # 3. its right window, if it holds records
        create(ts + 1)
    for t, _ in seen:                                     # 4. right windows of earlier records
        if t + 1 <= ts <= t + 1 + size:
            w = create(t + 1)
            if w is not None:
                w.values.append(value)
    seen.append((ts, value))
