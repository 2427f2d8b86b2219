"""A sensor's readings over every 10-minute span (KIP-450 sliding windows): sum and mean.

One final row per distinct set of readings within 10 minutes of each other, written once the
window can no longer change (2 minutes of grace). Sliding windows suit "any 10 minutes" alerts
that hopping windows would miss between hops.

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
    .suppress(Suppressed.until_window_closes(BufferConfig.unbounded()).with_name("sensor_windows"))
    .to("sensor_windows")
)


def main(argv: list[str] | None = None) -> int:
    """Run one batch (see ``--help``)."""
    return run(PIPELINE, LANDING, argv)


if __name__ == "__main__":
    sys.exit(main())
