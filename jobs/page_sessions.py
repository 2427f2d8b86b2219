"""Browsing sessions: per user, page views separated by less than 30 minutes form one session.

A session's final result (its page count and the pages in arrival order) is written once, after
no record can extend it any more: 30 minutes of inactivity plus 5 minutes of grace in stream time.

    spark-submit jobs/page_sessions.py --batch-start ... --batch-end ... --warehouse ... --landing ...
"""

import sys
from datetime import timedelta as td

from framework import BufferConfig, Pipeline, SessionWindows, Suppressed, agg
from framework.batchjob import main as run

LANDING = "page_views"
SCHEDULE = td(minutes=30)
PIPELINE = (
    Pipeline("page_sessions", timestamp="ts", arrival="seq")
    .group_by("user_id")
    .windowed_by(SessionWindows.of_inactivity_gap_and_grace(td(minutes=30), td(minutes=5)))
    .aggregate(agg.count("views"), agg.collect_list("page", "pages"))
    .suppress(Suppressed.until_window_closes(BufferConfig.unbounded()).with_name("sessions"))
    .to("page_session_windows")
)


def main(argv: list[str] | None = None) -> int:
    """Run one batch (see ``--help``)."""
    return run(PIPELINE, LANDING, argv)


if __name__ == "__main__":
    sys.exit(main())
