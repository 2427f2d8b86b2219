"""Public: what a job module calls to run as a ``spark-submit`` application (``main``), and the
helpers jobs and scripts share (loading a job, parsing times, one interval's batch).
Implemented in ``framework.orchestration.jobs`` and (``main``, the job's command line)
``framework.orchestration.cli``."""

from .orchestration.cli import job_main as main
from .orchestration.jobs import (
    INGEST_TIME,
    JobError,
    batch_id,
    intervals,
    load_job,
    parse_duration,
    parse_time,
    read_landing,
    run_interval,
)

__all__ = [
    "INGEST_TIME",
    "JobError",
    "batch_id",
    "intervals",
    "load_job",
    "main",
    "parse_duration",
    "parse_time",
    "read_landing",
    "run_interval",
]
