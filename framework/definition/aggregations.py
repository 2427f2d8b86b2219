"""Aggregate functions as Spark SQL text, split into partial / merge / finish steps.

Each aggregate keeps one or more *partial* columns in window state. ``partial`` aggregates raw
records, ``merge`` aggregates partial columns (from state and from a batch, or from two sessions
being merged), ``finish`` turns merged partials into the output value. Because every aggregate
is mergeable, state can be updated batch by batch and sessions can merge.

Order-sensitive aggregates (latest, earliest, collect_list) use the arrival order column
``columns.ARRIVAL`` (batch sequence, position in batch), so they mean the same whatever the
batch split; they say so (``Aggregate.ordered``), as a plan computes that column only when needed.
"""

from __future__ import annotations

from dataclasses import dataclass

from .columns import ARRIVAL
from .names import identifier, quoted


@dataclass(frozen=True)
class Partial:
    """One state column: how to build it from records and how to merge two of it."""

    column: str
    partial: str
    merge: str
    running: str | None = None  # the merge as a window function over "{w}"; default: merge OVER (w)

    def over(self, window: str) -> str:
        """The merge as a running aggregate over the window spec ``window`` (SQL text): the
        value after each update, which rate-limited suppression buffers."""
        return (self.running or f"{self.merge} OVER ({{w}})").replace("{w}", window)


@dataclass(frozen=True)
class Aggregate:
    """A named output column computed from partial columns."""

    name: str
    function: str
    input_column: str | None
    partials: tuple[Partial, ...]
    finish: str
    ordered: bool = False  # reads the arrival order (``ARRIVAL``): the plan must compute it

    def __post_init__(self) -> None:
        # an Aggregate built by hand (agg.Aggregate is public) says so through its partials
        if not self.ordered and any(ARRIVAL in p.partial for p in self.partials):
            object.__setattr__(self, "ordered", True)

    def describe(self) -> str:
        arg = self.input_column or ""
        return f"{self.function}({arg}) AS {self.name}"


def _simple(function: str, name: str, column: str | None, partial: str, merge: str) -> Aggregate:
    name = identifier(name, f"agg.{function} output name")
    p = f"_p_{name}"
    return Aggregate(name, function, column, (Partial(p, partial, merge.format(p=quoted(p))),), quoted(p))


def _col(column: str, function: str) -> str:
    return quoted(identifier(column, f"agg.{function} input column"))


def _ordered(function: str, name: str, column: str, pick: str) -> Aggregate:
    c = _col(column, function)
    agg = _simple(function, name, column, f"{pick}(struct({ARRIVAL} AS o, {c} AS v))", pick + "({p})")
    return Aggregate(agg.name, function, column, agg.partials, f"{agg.finish}.v", ordered=True)


def count(name: str = "count") -> Aggregate:
    """Number of records (rows, nulls included) in the window."""
    return _simple("count", name, None, "count(1)", "sum({p})")


def sum(column: str, name: str | None = None) -> Aggregate:  # noqa: A001 - mirrors SQL
    """Sum of ``column`` (nulls ignored, as SQL does)."""
    return _simple("sum", name or f"sum_{column}", column, f"sum({_col(column, 'sum')})", "sum({p})")


def min(column: str, name: str | None = None) -> Aggregate:  # noqa: A001
    """Smallest value of ``column``."""
    return _simple("min", name or f"min_{column}", column, f"min({_col(column, 'min')})", "min({p})")


def max(column: str, name: str | None = None) -> Aggregate:  # noqa: A001
    """Largest value of ``column``."""
    return _simple("max", name or f"max_{column}", column, f"max({_col(column, 'max')})", "max({p})")


def avg(column: str, name: str | None = None) -> Aggregate:
    """Mean of the non-null values of ``column`` (kept as sum and count, so it merges exactly)."""
    name = identifier(name or f"avg_{column}", "agg.avg output name")
    c = _col(column, "avg")
    s, n = f"_p_{name}_sum", f"_p_{name}_n"
    return Aggregate(
        name,
        "avg",
        column,
        (
            Partial(s, f"sum(cast({c} AS double))", f"sum({quoted(s)})"),
            Partial(n, f"count({c})", f"sum({quoted(n)})"),
        ),
        f"{quoted(s)} / {quoted(n)}",
    )


def latest(column: str, name: str | None = None) -> Aggregate:
    """Value of the last record to arrive (nulls included), like a KTable's latest value."""
    return _ordered("latest", name or f"latest_{column}", column, "max")


def earliest(column: str, name: str | None = None) -> Aggregate:
    """Value of the first record to arrive (nulls included)."""
    return _ordered("earliest", name or f"earliest_{column}", column, "min")


def collect_list(column: str, name: str | None = None) -> Aggregate:
    """All values of ``column`` in arrival order (nulls included)."""
    name = identifier(name or f"list_{column}", "agg.collect_list output name")
    c, p = _col(column, "collect_list"), f"_p_{name}"
    return Aggregate(
        name,
        "collect_list",
        column,
        (
            Partial(
                p,
                f"collect_list(struct({ARRIVAL} AS o, {c} AS v))",
                f"flatten(collect_list({quoted(p)}))",
                f"flatten(collect_list({quoted(p)}) OVER ({{w}}))",
            ),
        ),
        f"transform(array_sort({quoted(p)}), x -> x.v)",
        ordered=True,
    )


def custom(name: str, partial: str, merge: str, finish: str | None = None) -> Aggregate:
    """A user-defined mergeable aggregate given as Spark SQL expressions.

    ``partial`` aggregates input rows into a column called ``name``; ``merge`` aggregates that
    column across partials; ``finish`` (default: the column itself) maps it to the output.

    Example::

        agg.custom("sumsq", partial="sum(v * v)", merge="sum(sumsq)", finish="sqrt(sumsq)")
    """
    name = identifier(name, "agg.custom name")
    for what, text in (("partial", partial), ("merge", merge), ("finish", finish or name)):
        if not isinstance(text, str) or not text.strip():
            raise ValueError(f"agg.custom({name!r}): '{what}' must be a non-empty SQL expression")
    # user SQL may read the arrival order column too
    return Aggregate(
        name, "custom", None, (Partial(name, partial, merge),), finish or quoted(name), ordered=ARRIVAL in partial
    )


def input_columns(aggregates: tuple[Aggregate, ...]) -> list[str]:
    """Input columns the built-in aggregates read (custom ones are checked by Spark)."""
    return sorted({a.input_column for a in aggregates if a.input_column})
