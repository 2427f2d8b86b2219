"""Window definitions (pure values, no Spark): what a window is and when it closes.

All times are integer milliseconds since the epoch, as in Kafka Streams. A window is *closed*
once stream time >= its close time; from then on it never changes again (docs/design.md#closing).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any, ClassVar, Protocol, TypeVar, cast

from ..errors import DefinitionError


class _Time(Protocol):
    def __add__(self, other: int, /) -> Any: ...


T = TypeVar("T", bound=_Time)  # a time: int milliseconds, or a Spark Column of them (anything ``+ int`` keeps)


def to_millis(d: timedelta | int, what: str) -> int:
    """A duration as whole milliseconds; ints are taken as milliseconds already."""
    if isinstance(d, timedelta):
        ms = d // timedelta(milliseconds=1)
    elif isinstance(d, int) and not isinstance(d, bool):
        ms = d
    else:
        raise DefinitionError(f"'{what}' must be a timedelta or milliseconds (int), got {d!r}")
    if ms < 0:
        raise DefinitionError(f"'{what}' must not be negative, got {d!r}")
    return ms


def duration_text(ms: int) -> str:
    """A duration as a person reads it: ``1h``, ``1h30min``, ``45s``, ``250ms``, ``0s``."""
    parts = []
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("min", 60_000), ("s", 1000), ("ms", 1)):
        count, ms = divmod(ms, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts) or "0s"


class WindowType(ABC):
    """What a window type answers for the layers above it, which ask rather than test its class.

    A window closes a fixed time after its end (``close_after_end_ms``), so the engine, rate
    limiting and quality checks compute it one way. The class attributes say the rest: which
    plan computes it, what identifies one window, and how its state and sinks treat it. Adding a
    window type means a class here and a plan module in ``execution/plans`` (docs/design.md#window-types).
    """

    kind: ClassVar[str]
    """The plan that computes these windows: ``execution.plans.PLANS[kind]``, a module of its own."""
    bounds: ClassVar[tuple[str, ...]] = ("window_start",)
    """The window columns that, with the keys, name one window as it changes: a session by both
    bounds, as a merge or an extension makes a new session."""
    end_inclusive: ClassVar[bool] = False
    """Whether a window's end is in it, so a window may end where it starts (one record)."""
    held_after_close: ClassVar[bool] = False
    """Whether state keeps a window after it closes, until its plan marks it gone."""
    merges: ClassVar[bool] = False
    """Whether windows merge: a merged-away window is deleted from state (``GONE``) and, in a
    rate-limited sink, replaced by a tombstone."""
    scans_in_order: ClassVar[bool] = True
    """Whether the plan needs each record's arrival position and the stream time just before it."""

    @abstractmethod
    def describe(self) -> str:
        """The windows as a person reads them (``Pipeline.describe``)."""

    @abstractmethod
    def spec(self) -> str:
        """The windows' parameters as a batch's ledger row records them (``definition``): never
        reworded, as a changed text is a changed definition, which a pipeline refuses."""

    @abstractmethod
    def close_after_end_ms(self) -> int:
        """Close time minus ``window_end`` (as state and the sink carry it)."""

    def close(self, end: T) -> T:
        """The close time of the window ending at ``end``."""
        return cast(T, end + self.close_after_end_ms())


@dataclass(frozen=True)
class TimeWindows(WindowType):
    """Tumbling (advance == size) or hopping windows, epoch-aligned, ``[start, start + size)``.

    A record at ``ts`` belongs to every window with ``start <= ts < start + size``; a window
    closes at ``end + grace``. Cost: one state row per key and open window.
    """

    size_ms: int
    grace_ms: int
    advance_ms: int

    @staticmethod
    def of_size_and_grace(size: timedelta | int, grace: timedelta | int) -> "TimeWindows":
        """Tumbling windows of ``size``, accepting records up to ``grace`` after the window end."""
        size_ms = to_millis(size, "size")
        if size_ms <= 0:
            raise DefinitionError("TimeWindows 'size' must be positive")
        return TimeWindows(size_ms, to_millis(grace, "grace"), size_ms)

    def advance_by(self, advance: timedelta | int) -> "TimeWindows":
        """Hopping windows: a new window starts every ``advance`` (0 < advance <= size)."""
        advance_ms = to_millis(advance, "advance")
        if not 0 < advance_ms <= self.size_ms:
            raise DefinitionError(f"TimeWindows 'advance' must be in (0, size={self.size_ms} ms], got {advance_ms} ms")
        return replace(self, advance_ms=advance_ms)

    kind = "time"
    scans_in_order = False  # judged per batch, unless lateness or aggregates ask for order

    def close_after_end_ms(self) -> int:
        """Ends are exclusive: a window closes ``grace`` after its end."""
        return self.grace_ms

    def close_offset_ms(self) -> int:
        """Close time minus window start."""
        return self.close(self.size_ms)

    def describe(self) -> str:
        shape = "tumbling" if self.advance_ms == self.size_ms else f"hopping advance={duration_text(self.advance_ms)}"
        return f"TimeWindows({shape}, size={duration_text(self.size_ms)}, grace={duration_text(self.grace_ms)})"

    def spec(self) -> str:
        shape = "tumbling" if self.advance_ms == self.size_ms else f"hopping advance={self.advance_ms}ms"
        return f"TimeWindows({shape}, size={self.size_ms}ms, grace={self.grace_ms}ms)"


@dataclass(frozen=True)
class SlidingWindows(WindowType):
    """KIP-450 sliding windows: ``[t - size, t]`` both ends inclusive, one window per distinct
    set of records. A record defines a left window ending at it and, when later records fall
    within ``size`` of it, a right window starting 1 ms after it, decided as Kafka Streams does
    from the windows the key holds. Closes at ``end + 1 ms + grace``.
    Cost: the windows of the last ``3 * size + grace`` are held, closed ones included.
    """

    size_ms: int
    grace_ms: int

    @staticmethod
    def of_time_difference_and_grace(size: timedelta | int, grace: timedelta | int) -> "SlidingWindows":
        """Windows over records at most ``size`` apart, accepting records ``grace`` late."""
        size_ms = to_millis(size, "time difference")
        if size_ms <= 0:
            raise DefinitionError("SlidingWindows 'time difference' must be positive")
        return SlidingWindows(size_ms, to_millis(grace, "grace"))

    kind = "sliding"
    end_inclusive = True
    held_after_close = True  # later records find their previous record through closed windows

    def close_after_end_ms(self) -> int:
        """Ends are inclusive: a window closes ``1 ms + grace`` after its end."""
        return 1 + self.grace_ms

    def last_close(self, ts: T) -> T:
        """The close time of the last window a record at ``ts`` can be in (the one starting at
        it): once stream time reaches it, the record is late."""
        return self.close(cast(T, ts + self.size_ms))

    def held_ms(self) -> int:
        """How far a held window's start may be behind stream time and still be read: a record
        still lands only within ``size + grace`` of stream time (``last_close``), and looks
        back ``2 * size`` for windows, as Kafka's store fetch does. Older windows are forgotten."""
        return 3 * self.size_ms + self.grace_ms

    def describe(self) -> str:
        return f"SlidingWindows(size={duration_text(self.size_ms)}, grace={duration_text(self.grace_ms)})"

    def spec(self) -> str:  # state holds Kafka's windows (versions before them kept records)
        return f"SlidingWindows(size={self.size_ms}ms, grace={self.grace_ms}ms) holding windows"


@dataclass(frozen=True)
class SessionWindows(WindowType):
    """KIP-94 session windows: records within ``gap`` of each other form one session, bounds
    are the first and last event time (inclusive). A session closes at
    ``end + 1 ms + gap + grace``: until then a later record may still extend it.
    Every aggregate used with sessions must be mergeable (all built-in ones are).
    """

    gap_ms: int
    grace_ms: int

    @staticmethod
    def of_inactivity_gap_and_grace(gap: timedelta | int, grace: timedelta | int) -> "SessionWindows":
        """Sessions split by ``gap`` of inactivity, accepting records ``grace`` late."""
        return SessionWindows(to_millis(gap, "gap"), to_millis(grace, "grace"))

    kind = "session"
    bounds = ("window_start", "window_end")
    end_inclusive = True
    merges = True

    def close_after_end_ms(self) -> int:
        """Ends are inclusive and a record within ``gap`` may still extend the session."""
        return 1 + self.gap_ms + self.grace_ms

    def describe(self) -> str:
        return f"SessionWindows(gap={duration_text(self.gap_ms)}, grace={duration_text(self.grace_ms)})"

    def spec(self) -> str:
        return f"SessionWindows(gap={self.gap_ms}ms, grace={self.grace_ms}ms)"


Windows = TimeWindows | SlidingWindows | SessionWindows
