"""The blog post's alert: users with fewer than 3 events in an hour, one final verdict per hour.

Hourly tumbling windows with 10 minutes of grace, suppressed until they close: a window is
judged once, after every record that may still count for it had its chance, so an alert is never
sent for an hour that later fills up. Records more than 10 minutes late are dropped and counted.

    spark-submit jobs/user_alerts.py --batch-start 2026-01-01T00:00 --batch-end 2026-01-01T01:00 \\
        --warehouse var/warehouse --landing var/landing
"""

import sys
from datetime import timedelta as td

from framework import BufferConfig, Pipeline, Suppressed, TimeWindows, agg
from framework.batchjob import main as run

LANDING = "user_events"
SCHEDULE = td(hours=1)
PIPELINE = (
    Pipeline("user_alerts", timestamp="ts", arrival="seq")
    .group_by("user_id")
    .windowed_by(TimeWindows.of_size_and_grace(td(hours=1), td(minutes=10)))
    .aggregate(agg.count("events"))
    .suppress(Suppressed.until_window_closes(BufferConfig.unbounded()).with_name("alerts"))
    .filter("events < 3")
    .to("user_alert_windows")
)


def main(argv: list[str] | None = None) -> int:
    """Run one batch (see ``--help``)."""
    return run(PIPELINE, LANDING, argv)


if __name__ == "__main__":
    sys.exit(main())
