"""KIP-328 suppression as values: ``Suppressed`` says *when* a result may leave,
``BufferConfig`` says how big the buffer may grow and what happens when it is full.

Strict configs never emit early (required for final results); eager configs emit the oldest
entry when full (fine for rate limiting). The two are separate classes so that
``until_window_closes`` can refuse an eager config when the pipeline is defined.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import timedelta

from ..errors import DefinitionError
from .names import identifier
from .windows import duration_text, to_millis


@dataclass(frozen=True)
class BufferConfig:
    """Bounds of a suppression buffer (None = unbounded) and the policy when they are exceeded.

    The buffer always lives in a Delta table, so it is never limited by memory; bounds exist to
    reproduce KIP-328's eviction behaviour and to cap state deliberately.
    """

    record_limit: int | None = None
    byte_limit: int | None = None

    @staticmethod
    def unbounded() -> "StrictBufferConfig":
        """Never emit early and never fail: the buffer grows with the number of open windows."""
        return StrictBufferConfig(None, None, "unbounded")

    @staticmethod
    def max_records(n: int) -> "EagerBufferConfig":
        """At most ``n`` keys; by default emits the oldest early when full (eager)."""
        return EagerBufferConfig(_bound(n, "max_records"), None)

    @staticmethod
    def max_bytes(n: int) -> "EagerBufferConfig":
        """At most ``n`` bytes of values; by default emits the oldest early when full (eager)."""
        return EagerBufferConfig(None, _bound(n, "max_bytes"))

    def with_max_records(self, n: int):
        """The same policy with a record bound."""
        return replace(self, record_limit=_bound(n, "max_records"))

    def with_max_bytes(self, n: int):
        """The same policy with a byte bound."""
        return replace(self, byte_limit=_bound(n, "max_bytes"))

    def with_no_bound(self) -> "StrictBufferConfig":
        """Remove both bounds (a strict, unbounded buffer)."""
        return StrictBufferConfig(None, None, "unbounded")

    def shut_down_when_full(self) -> "StrictBufferConfig":
        """Strict: when a bound is exceeded, abort the batch with BufferFullError, commit nothing."""
        return StrictBufferConfig(self.record_limit, self.byte_limit, "shut_down")

    def spill_to_disk_when_full(self) -> "StrictBufferConfig":
        """Strict: the buffer is already on disk (Delta), so this is unbounded and never fails."""
        return StrictBufferConfig(None, None, "spill_to_disk")

    def emit_early_when_full(self) -> "EagerBufferConfig":
        """Eager: when a bound is exceeded, emit the oldest entries (not final results)."""
        return EagerBufferConfig(self.record_limit, self.byte_limit)

    def shuts_down_when_full(self) -> bool:
        """Whether exceeding a bound aborts the batch (``BufferFullError``): only a strict buffer
        made with ``shut_down_when_full()``."""
        return False

    def describe(self) -> str:
        bounds = [
            f"max_records={self.record_limit}" if self.record_limit is not None else "",
            f"max_bytes={self.byte_limit}" if self.byte_limit is not None else "",
        ]
        return ", ".join(b for b in bounds if b) or "unbounded"


@dataclass(frozen=True)
class StrictBufferConfig(BufferConfig):
    """A buffer that never emits before its time: the only kind allowed for final results."""

    when_full: str = "shut_down"

    def shuts_down_when_full(self) -> bool:
        return self.when_full == "shut_down"

    def describe(self) -> str:
        return f"strict({super().describe()}, when_full={self.when_full})"


@dataclass(frozen=True)
class EagerBufferConfig(BufferConfig):
    """A buffer that emits its oldest entries early when full: good for rate limiting only."""

    def describe(self) -> str:
        return f"eager({super().describe()}, emit_early_when_full)"


def _bound(n: int, what: str) -> int:
    """A bound as Kafka Streams takes it: zero holds nothing (every update leaves at once, or a
    strict buffer is full at its first entry)."""
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        raise DefinitionError(f"BufferConfig.{what} must be an int >= 0, got {n!r}")
    return n


@dataclass(frozen=True)
class Suppressed:
    """When a suppressed result leaves the buffer (KIP-328)."""

    mode: str
    buffer: BufferConfig
    time_limit_ms: int | None = None
    name: str | None = None

    @staticmethod
    def until_window_closes(buffer: BufferConfig) -> "Suppressed":
        """Emit exactly one final result per key and window, once the window has closed
        (stream time >= close time). Only strict buffers are accepted: an eager buffer would
        emit a window early and then have to emit it again, breaking "final"."""
        if not isinstance(buffer, StrictBufferConfig):
            raise DefinitionError(
                "Suppressed.until_window_closes needs a strict buffer (it must never emit early): "
                f"got {buffer.describe()}. Use BufferConfig.unbounded(), "
                "BufferConfig.max_records(n).shut_down_when_full(), "
                "BufferConfig.max_bytes(n).shut_down_when_full() or spill_to_disk_when_full()."
            )
        return Suppressed("until_window_closes", buffer)

    @staticmethod
    def until_time_limit(limit: timedelta | int, buffer: BufferConfig) -> "Suppressed":
        """Rate-limit updates: a key leaves the buffer once stream time reaches ``limit`` after
        the update that put it there (later updates replace its value, not its timer), so each
        key is emitted at most once per ``limit`` of stream time, with its latest value. Any
        buffer config: an eager one also emits the oldest keys early when full. ``limit = 0``
        disables suppression and flushes the buffer. The sink is a log of emissions.
        Cost: one buffer row per key updated within the last ``limit``."""
        return Suppressed("until_time_limit", buffer, to_millis(limit, "time limit"))

    def with_name(self, name: str) -> "Suppressed":
        """A stable name for the buffer's state, so other topology changes never lose it."""
        return replace(self, name=identifier(name, "Suppressed name"))

    def describe(self) -> str:
        limit = f", limit={duration_text(self.time_limit_ms)}" if self.time_limit_ms is not None else ""
        return f"Suppressed.{self.mode}({self.buffer.describe()}{limit})"
