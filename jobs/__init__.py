"""Pipelines as batch jobs: one module per pipeline, runnable with ``spark-submit jobs/<name>.py``
and importable for its ``PIPELINE``, ``LANDING`` table and ``SCHEDULE`` (docs/design.md#jobs)."""
