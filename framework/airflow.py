"""Public: the Airflow DAG factories (``pipeline_dag``, ``backfill_dag``, ``replay_dag``), their quality-gate task
and the results assets a downstream DAG schedules on. Implemented in
``framework.orchestration.airflow``."""

from .orchestration.airflow import (
    DELTA_PACKAGE,
    backfill_dag,
    pipeline_dag,
    published_batches,
    quality_gate,
    replay_dag,
    results_asset,
)

__all__ = [
    "DELTA_PACKAGE",
    "backfill_dag",
    "pipeline_dag",
    "published_batches",
    "quality_gate",
    "replay_dag",
    "results_asset",
]
