"""Public: what a job module calls to run as a ``spark-submit`` application (``main``), and how
a job module is loaded. Implemented in ``framework.orchestration.jobs``."""

from .orchestration.jobs import load_job, main

__all__ = ["load_job", "main"]
