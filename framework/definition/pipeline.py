"""The declarative pipeline: what to compute, never how (no Spark, no Delta in here).

A ``Pipeline`` is an immutable builder; every step returns a new pipeline and validates its
arguments at once, so a broken definition fails when it is written, not mid-batch.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import cast

from ..errors import DefinitionError
from . import emission
from .aggregations import Aggregate
from .emission import Emission
from .names import (
    EMITTED_COLUMNS,
    RESERVED_TABLES,
    TOMBSTONE,
    WINDOW_COLUMNS,
    find_up_to_case,
    identifier,
    reserved_root_entry,
    reserved_table,
    same_up_to_case,
)
from .suppress import Suppressed
from .windows import Windows, WindowType, to_millis

LATENESS_MODES = ("record", "batch")
BAD_RECORDS = ("refuse", "quarantine")  # what a batch does with records failing a per-record input check
_CASE = "Spark and Delta resolve column names ignoring case"


@dataclass(frozen=True)
class Step:
    """A stateless operator applied to results after suppression: filter, with_column or select."""

    op: str
    args: tuple[str, ...]

    def describe(self) -> str:
        return f"{self.op}({', '.join(self.args)})"


@dataclass(frozen=True)
class Pipeline:
    """A windowed (or plain) grouped aggregation, optionally suppressed, written to a sink.

    Example::

        Pipeline("user_alerts", timestamp="ts", arrival="seq")
            .group_by("user_id")
            .windowed_by(TimeWindows.of_size_and_grace(td(hours=1), td(minutes=10)))
            .aggregate(agg.count("events"))
            .suppress(Suppressed.until_window_closes(BufferConfig.unbounded()))
            .filter("events < 3")
            .to("user_alert_windows")

    ``bad_records`` says what a batch does with records that fail a per-record input check
    (null or unparsable event time, event time before 1970 or beyond the runtime's
    ``max_clock_skew``, null group key): ``"refuse"`` (the default) stops the batch, naming the
    first few such records, so nothing is lost unseen; ``"quarantine"`` leaves them out of the
    batch, keeps them in the ``rejected_records`` table (reason, batch, the record as JSON) and
    counts them (``rejected-records-total``), and the batch goes on with the rest. Checks of the
    whole batch (a missing or retyped column) refuse it either way.

    ``version`` numbers a changed definition of the same pipeline: each version keeps tables of
    its own, is built beside the running one and becomes the pipeline when switched to
    (``framework.operations.versions``); a definition never becomes a new version unless it says so.
    """

    name: str
    timestamp: str = "ts"
    arrival: str | None = None
    lateness: str = "record"
    idle_advance: timedelta | int | None = None  # kept as milliseconds (``idle_advance_ms``)
    bad_records: str = "refuse"
    version: int = 1  # which version of the pipeline this definition is (docs/operations.md#changing-a-pipeline)
    # set by the builder's steps, each checking its own
    keys: tuple[str, ...] = ()
    windows: Windows | None = None
    aggregates: tuple[Aggregate, ...] = ()
    suppression: Suppressed | None = None
    steps: tuple[Step, ...] = ()
    sink: str | None = None
    _defined: tuple[str, ...] = field(default=(), repr=False, compare=False)

    def __post_init__(self) -> None:
        """Check what the constructor was given (a builder step's ``replace`` passes it again)."""
        name = identifier(self.name, "pipeline name")
        clash = reserved_root_entry(name)
        if clash:
            raise DefinitionError(
                f"pipeline name {name!r} is {clash}, where every pipeline keeps its own folder "
                "(names are compared ignoring case); choose another pipeline name"
            )
        identifier(self.timestamp, f"pipeline {name!r}: timestamp column")
        if self.arrival is not None:
            identifier(self.arrival, f"pipeline {name!r}: arrival column")
        if self.lateness not in LATENESS_MODES:
            raise DefinitionError(f"pipeline {name!r}: lateness must be one of {LATENESS_MODES}, got {self.lateness!r}")
        if self.bad_records not in BAD_RECORDS:
            raise DefinitionError(
                f"pipeline {name!r}: bad_records must be one of {BAD_RECORDS}, got {self.bad_records!r}"
            )
        if isinstance(self.version, bool) or not isinstance(self.version, int) or self.version < 1:
            raise DefinitionError(f"pipeline {name!r}: version must be a whole number from 1, got {self.version!r}")
        if self.idle_advance is not None:  # frozen: the one normalisation, to milliseconds
            object.__setattr__(self, "idle_advance", to_millis(self.idle_advance, "idle_advance"))

    @property
    def idle_advance_ms(self) -> int | None:
        """``idle_advance`` in milliseconds (None: stream time moves with records only)."""
        return cast(int | None, self.idle_advance)

    def _next(self, step: str, **changes) -> "Pipeline":
        if self.sink is not None:
            raise DefinitionError(f"pipeline {self.name!r}: nothing may follow .to({self.sink!r})")
        return replace(self, _defined=self._defined + (step,), **changes)

    def _need(self, step: str, *before: str) -> None:
        missing = [b for b in before if b not in self._defined]
        if missing:
            raise DefinitionError(f"pipeline {self.name!r}: .{step}() needs .{missing[0]}() first")

    def group_by(self, *keys: str) -> "Pipeline":
        """Group records by one or more key columns (never null: a null key is an input error)."""
        if "group_by" in self._defined:
            raise DefinitionError(f"pipeline {self.name!r}: group_by() given twice")
        if not keys:
            raise DefinitionError(f"pipeline {self.name!r}: group_by() needs at least one key column")
        keys = tuple(identifier(k, f"pipeline {self.name!r}: group_by key") for k in keys)
        for same in same_up_to_case(keys):
            raise DefinitionError(
                f"pipeline {self.name!r}: group_by keys clash: {same} name the same column "
                f"({_CASE}); give each key column once"
            )
        for k in keys:
            framework_column = find_up_to_case(k, (*WINDOW_COLUMNS, *EMITTED_COLUMNS, TOMBSTONE))
            if framework_column:
                raise DefinitionError(
                    f"pipeline {self.name!r}: group_by key {k!r} clashes with the column "
                    f"{framework_column!r} the framework adds to results ({_CASE}); "
                    "rename the key column upstream"
                )
        return self._next("group_by", keys=keys)

    def windowed_by(self, windows: Windows) -> "Pipeline":
        """Aggregate per key and window (TimeWindows, SlidingWindows or SessionWindows)."""
        self._need("windowed_by", "group_by")
        if not isinstance(windows, WindowType):
            kinds = ", ".join(t.__name__ for t in WindowType.__subclasses__())
            raise DefinitionError(f"pipeline {self.name!r}: windowed_by() takes one of {kinds}, got {windows!r}")
        return self._next("windowed_by", windows=windows)

    def aggregate(self, *aggregates: Aggregate) -> "Pipeline":
        """The aggregates computed per key (and window); see ``framework.agg``."""
        self._need("aggregate", "group_by")
        if not aggregates or not all(isinstance(a, Aggregate) for a in aggregates):
            raise DefinitionError(f"pipeline {self.name!r}: aggregate() takes one or more agg.* values")
        for a in aggregates:
            framework_column = find_up_to_case(a.name, (*WINDOW_COLUMNS, *EMITTED_COLUMNS, TOMBSTONE))
            if framework_column:
                raise DefinitionError(
                    f"pipeline {self.name!r}: output column names clash: aggregate {a.name!r} "
                    f"is the column {framework_column!r} the framework adds to results ({_CASE}); "
                    "give the aggregate another name"
                )
        for same in same_up_to_case([*self.keys, *(a.name for a in aggregates)]):
            raise DefinitionError(
                f"pipeline {self.name!r}: output column names clash: {sorted(same)} are the same "
                f"column ({_CASE}); give each aggregate a name distinct from the keys and the "
                "other aggregates"
            )
        partials: dict[str, str] = {}
        for a in aggregates:
            for part in a.partials:
                other = partials.setdefault(part.column.lower(), a.name)
                if other.lower() != a.name.lower():
                    raise DefinitionError(
                        f"pipeline {self.name!r}: aggregates {other!r} and {a.name!r} both keep "
                        f"the state column {part.column!r} ({_CASE}); rename one of them"
                    )
        return self._next("aggregate", aggregates=tuple(aggregates))

    def suppress(self, suppressed: Suppressed) -> "Pipeline":
        """Hold results back (KIP-328): ``until_window_closes`` for final results only."""
        self._need("suppress", "aggregate")
        if not isinstance(suppressed, Suppressed):
            raise DefinitionError(f"pipeline {self.name!r}: suppress() takes a Suppressed value")
        table = suppressed.name and find_up_to_case(suppressed.name, RESERVED_TABLES)
        if table:
            raise DefinitionError(
                f"pipeline {self.name!r}: suppression name {suppressed.name!r} is the name of the "
                f"pipeline's own {RESERVED_TABLES[table]} ({table!r}; names are compared ignoring "
                "case); choose another name for Suppressed.with_name(...)"
            )
        kind = emission.of(suppressed)
        if kind.final and self.windows is None:
            raise DefinitionError(
                f"pipeline {self.name!r}: until_window_closes needs a windowed "
                "aggregation (add .windowed_by(...)); use until_time_limit to rate-limit a "
                "plain table"
            )
        if kind.final and suppressed.buffer.byte_limit is not None and self.lateness != "record":
            raise DefinitionError(
                f"pipeline {self.name!r}: a max_bytes bound on until_window_closes is checked "
                "after every record, which needs lateness='record' (the default); use "
                "max_records(n).shut_down_when_full() (checked on the windows held after the "
                "batch) or BufferConfig.unbounded()"
            )
        if kind.buffered and self.lateness != "record":
            raise DefinitionError(
                f"pipeline {self.name!r}: until_time_limit emits record by record, so it needs "
                "lateness='record' (the default)"
            )
        return self._next("suppress", suppression=suppressed)

    def filter(self, condition: str) -> "Pipeline":
        """Keep result rows matching a Spark SQL condition (parsed by Spark, never concatenated)."""
        return self._step("filter", condition)

    def with_column(self, name: str, expression: str) -> "Pipeline":
        """Add or replace a result column computed by a Spark SQL expression.

        Replacing takes the column's exact name: a new name that differs from an existing column
        only in case is refused, as are the emission columns the sink stamps after the steps."""
        name = identifier(name, f"pipeline {self.name!r}: with_column name")
        stamped = find_up_to_case(name, EMITTED_COLUMNS)
        if stamped:
            raise DefinitionError(
                f"pipeline {self.name!r}: with_column name {name!r} is the column {stamped!r} the "
                f"sink stamps on every row after the steps ({_CASE}), so it would be overwritten; "
                "choose another name"
            )
        existing = find_up_to_case(name, self._result_columns())
        if existing is not None and existing != name:
            raise DefinitionError(
                f"pipeline {self.name!r}: with_column name {name!r} differs only in case from the "
                f"result column {existing!r} ({_CASE}); use with_column({existing!r}, ...) to "
                "replace it, or choose another name"
            )
        return self._step("with_column", name, expression)

    def select(self, *columns: str) -> "Pipeline":
        """Keep only these result columns (emitted_batch_id and emitted_stream_time are always kept)."""
        columns = tuple(identifier(c, f"pipeline {self.name!r}: select column") for c in columns)
        for same in same_up_to_case(columns):
            raise DefinitionError(
                f"pipeline {self.name!r}: select columns {same} name the same column ({_CASE}); list each column once"
            )
        return self._step("select", *columns)

    def _result_columns(self) -> list[str]:
        """The result columns the steps so far leave (before the sink's emission stamp)."""
        columns = [
            *self.keys,
            *(WINDOW_COLUMNS if self.windows is not None else ()),
            *(a.name for a in self.aggregates),
        ]
        for s in self.steps:
            if s.op == "with_column" and s.args[0] not in columns:
                columns.append(s.args[0])
            elif s.op == "select":  # Spark keeps the name of the column a select resolves to
                columns = [find_up_to_case(c, columns) or c for c in s.args]
        return columns

    def _step(self, op: str, *args: str) -> "Pipeline":
        self._need(op, "aggregate")
        if not args or not all(isinstance(a, str) and a.strip() for a in args):
            raise DefinitionError(f"pipeline {self.name!r}: {op}() needs non-empty string arguments")
        if self.suppression is None:
            raise DefinitionError(
                f"pipeline {self.name!r}: {op}() may only follow suppress(): "
                "without suppression the sink is a continuously updated table"
            )
        return replace(self, steps=self.steps + (Step(op, args),))

    def to(self, table: str) -> "Pipeline":
        """Write results to the Delta table ``table`` under the pipeline's warehouse folder."""
        self._need("to", "aggregate")
        table = identifier(table, f"pipeline {self.name!r}: output table name")
        clash = reserved_table(table)
        if clash:
            raise DefinitionError(
                f"pipeline {self.name!r}: sink name {table!r} is {clash} under "
                f"<warehouse>/{self.name}/ (names are compared ignoring case); "
                "choose another name for .to(...)"
            )
        return self._next("to", sink=table)

    # ---- derived facts used by the runtime -------------------------------------------------
    @property
    def emission(self) -> Emission:
        """What the sink receives: final results, a log of rate-limited updates, or updates."""
        return emission.of(self.suppression)

    @property
    def identity(self) -> list[str]:
        """Columns that name one window of one key (a state row, a result row, a buffer entry):
        the keys, and the window type's ``bounds`` when windowed."""
        return [*self.keys, *(self.windows.bounds if self.windows is not None else ())]

    @property
    def keys_and_bounds(self) -> list[str]:
        """The keys, then both window bounds when windowed: what every state row, result row,
        update and buffer entry carries to say which window (or key) it is about."""
        return [*self.keys, *(["window_start", "window_end"] if self.windows is not None else [])]

    def check_complete(self) -> "Pipeline":
        """Raise unless the pipeline is ready to run (has group_by, aggregate and to)."""
        self._need("run", "group_by", "aggregate", "to")
        return self

    def describe(self) -> str:
        """The topology as text, like Kafka Streams' ``Topology.describe()``."""
        store = f"{self.name}._state ({'window' if self.windows is not None else 'key'} rows)"
        lines = [
            f"Topology: {self.name}" + (f" (version {self.version})" if self.version > 1 else ""),
            f"  Source: input (timestamp={self.timestamp}, arrival={self.arrival or '<event time>'}, "
            f"lateness={self.lateness}, bad_records={self.bad_records})",
            f"  --> GroupBy {list(self.keys)}",
        ]
        if self.windows is not None:
            lines.append(f"  --> WindowedBy {self.windows.describe()}")
        aggs = ", ".join(a.describe() for a in self.aggregates)
        lines.append(f"  --> Aggregate [{aggs}]  (store: {store})")
        if self.suppression is not None:
            label = self.suppression.name or "<unnamed>"
            buffer = f"{self.name}.buffer_{self.suppression.name or 'suppress'}" if self.emission.buffered else store
            lines.append(f"  --> Suppress {label}: {self.suppression.describe()}  (buffer: {buffer})")
        for s in self.steps:
            lines.append(f"  --> {s.describe()}")
        lines.append(f"  --> Sink {self.sink} ({self.emission.sink})")
        rejected = ", rejected records" if self.bad_records == "quarantine" else ""
        lines.append(
            f"  State: {self.name}._state (window state, ledger, metrics, late records{rejected}: one commit per batch)"
        )
        return "\n".join(lines)
