"""Identifier validation: names become table paths and column references, so they are checked
once at the boundary and never interpolated unchecked (docs/design.md#names)."""

from __future__ import annotations

import re

from ..errors import DefinitionError

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")


def identifier(value: object, what: str) -> str:
    """Return ``value`` if it is a valid identifier, else raise naming ``what``."""
    if not isinstance(value, str) or not _IDENTIFIER.fullmatch(value):
        raise DefinitionError(f"{what} must match [A-Za-z_][A-Za-z0-9_]{{0,127}}, got {value!r}")
    return value


def quoted(column: str) -> str:
    """A validated column name in backticks, for SQL expression text."""
    return f"`{column}`"


# ---- reserved names (product contract: names that would collide are refused at definition) ----
# Spark and Delta resolve column names case-insensitively, and a warehouse may live on a store
# that folds case, so every comparison below ignores case.

#: The folder where a job leaves the validation outcome its DAG's quality gate reads.
GATE = "_gate"

#: Entries the framework keeps beside the sink under ``<warehouse>/<pipeline>/``, with what they are.
RESERVED_TABLES: dict[str, str] = {
    "_state": "state table (window state, the batch ledger, metrics and late records: one commit per batch)",
    "_ledger": "batch ledger table (kept by earlier versions)",
    "window_state": "window state table (kept by earlier versions)",
    "records": "sliding-window records table (kept by earlier versions)",
    "late_records": "late records table (kept by earlier versions)",
    "rejected_records": "rejected records (a name kept for them)",
    "metrics": "metrics table (kept by earlier versions)",
    "_staging": "staging folder",
    GATE: "quality-gate outcomes folder",
    "_versions": "versions folder (the tables of the pipeline's later versions, and its switches)",
}

#: Prefix of the suppression buffer tables, ``buffer_<suppression name>`` (``buffer_suppress``
#: when the suppression has no name).
BUFFER_PREFIX = "buffer_"

#: Entries the framework keeps at the warehouse root, beside the pipelines' folders.
RESERVED_ROOT_ENTRIES: dict[str, str] = {
    "quality_results": "quality results table",
    "data_docs": "Great Expectations Data Docs folder",
    "gx": "Great Expectations store folder",
}

#: Columns the framework adds to results: window bounds (windowed pipelines) and the emission stamp.
WINDOW_COLUMNS = ("window_start", "window_end")
EMITTED_COLUMNS = ("emitted_batch_id", "emitted_stream_time")
#: In rate-limited session results: the row says its session no longer exists (merged or extended).
TOMBSTONE = "tombstone"


def reserved_table(name: str) -> str | None:
    """What ``name`` collides with among a pipeline's own tables (ignoring case), or None."""
    folded = name.lower()
    for table, what in RESERVED_TABLES.items():
        if folded == table:
            return f"the name of the pipeline's own {what} ({table!r})"
    if folded.startswith(BUFFER_PREFIX):
        return f"in the namespace of the pipeline's suppression buffer tables ({BUFFER_PREFIX}<suppression name>)"
    return None


def reserved_root_entry(name: str) -> str | None:
    """What ``name`` collides with at the warehouse root (ignoring case), or None."""
    folded = name.lower()
    for entry, what in RESERVED_ROOT_ENTRIES.items():
        if folded == entry:
            return f"the name of the framework's {what} at the warehouse root (<warehouse>/{entry})"
    return None


def same_up_to_case(names) -> list[list[str]]:
    """Groups of two or more of ``names`` that are equal ignoring case (exact repeats included),
    in order of first appearance."""
    groups: dict[str, list[str]] = {}
    for n in names:
        groups.setdefault(n.lower(), []).append(n)
    return [g for g in groups.values() if len(g) > 1]


def find_up_to_case(name: str, names) -> str | None:
    """The first of ``names`` equal to ``name`` ignoring case, or None."""
    folded = name.lower()
    return next((n for n in names if n.lower() == folded), None)
