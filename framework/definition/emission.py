"""What a pipeline's results table receives: one of three kinds, named once.

KIP-328's suppression decides what leaves a windowed aggregation, and so what its sink holds:

* ``FINAL_RESULTS`` (``Suppressed.until_window_closes``): one row per key and window, appended
  once its window closed and never changed. The quality gate audits the rows before they land.
* ``UPDATE_LOG`` (``Suppressed.until_time_limit``): a log of rate-limited updates, appended. Its
  entries wait in a buffer table of their own; a key and window repeat by design.
* ``UPDATES`` (no suppression): a table kept current in place by MERGE, a row per window the
  batch changed; a window merged away (a session) is deleted.

Each layer asks the kind what it needs to know (which rows a plan emits, whether rows are
appended or MERGEd, whether the gate audits them, whether a buffer table exists) rather than
testing the suppression's mode itself, so the three stay consistent everywhere.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar

from .suppress import Suppressed

T = TypeVar("T")


@dataclass(frozen=True)
class Emission:
    """One kind of results table; see the module docstring for the three there are."""

    name: str
    """As the quality template's ``meta.applies_to`` names it."""
    sink: str
    """How ``Pipeline.describe`` names the sink's writes."""
    final: bool
    """Rows are closed windows, each emitted once (and carry a close time)."""
    appended: bool
    """Rows are appended, batch by batch, and audited by the quality gate before they land; a
    MERGEd table is updated in place instead (no gate: a row may change in the next batch)."""
    buffered: bool
    """Updates wait in a buffer table of their own and leave as a rate limit allows."""

    def pick(self, closed: T, changed: T) -> T:
        """A plan's rows for the sink: the windows the batch closed, or every window it changed."""
        return closed if self.final else changed


FINAL_RESULTS = Emission("final_results", "append, final results", final=True, appended=True, buffered=False)
UPDATE_LOG = Emission("rate_limited", "append, rate-limited updates", final=False, appended=True, buffered=True)
UPDATES = Emission("updates", "merge, emit on update", final=False, appended=False, buffered=False)


def of(suppression: Suppressed | None) -> Emission:
    """The kind of results table a pipeline with ``suppression`` has."""
    if suppression is None:
        return UPDATES
    return FINAL_RESULTS if suppression.mode == "until_window_closes" else UPDATE_LOG
