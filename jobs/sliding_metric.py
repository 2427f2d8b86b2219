"""A sensor's readings over every 10-minute span (KIP-450 sliding windows): count, sum and mean,
rate-limited downstream (KIP-328 ``until_time_limit``).

Sliding windows suit "any 10 minutes" alerts that hopping windows would miss between hops, but
every reading updates several windows, so readers (dashboards, alerting) would get a stream of
small revisions. The rate limit gives them at most one update per window per 5 minutes: an
update waits until stream time is 5 minutes past the window's newest reading, later readings
replace the waiting value, and the window's last value is emitted too. (As in Kafka the clock is
the window's newest reading, so an out-of-order reading into a window emitted before can leave
at once.) The sink is an append-only log, one row per emission with its ``emitted_stream_time``.

The buffer is unbounded: it holds only windows updated within the last 5 minutes of stream time
(a few per sensor), and an eager bound would emit early, breaking the 5-minute promise.

    spark-submit jobs/sliding_metric.py --batch-start ... --batch-end ... --warehouse ... --landing ...
"""

import sys
from datetime import timedelta as td

from framework import BufferConfig, Pipeline, SlidingWindows, Suppressed, agg
from framework.batchjob import main as run

LANDING = "sensor_readings"
SCHEDULE = td(minutes=15)
PIPELINE = (
    Pipeline("sliding_metric", timestamp="ts", arrival="seq")
    .group_by("sensor")
    .windowed_by(SlidingWindows.of_time_difference_and_grace(td(minutes=10), td(minutes=2)))
    .aggregate(agg.count("readings"), agg.sum("value", "total"), agg.avg("value", "mean"))
    .suppress(Suppressed.until_time_limit(td(minutes=5), BufferConfig.unbounded()).with_name("every_5_min"))
    .to("sensor_window_updates")
)


def main(argv: list[str] | None = None) -> int:
    """Run one batch (see ``--help``)."""
    return run(PIPELINE, LANDING, argv)


if __name__ == "__main__":
    sys.exit(main())
