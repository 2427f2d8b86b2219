"""Public: the Airflow DAG factories (``pipeline_dag``, ``replay_dag``) and the results assets a
downstream DAG schedules on. Implemented in ``framework.orchestration.airflow``."""

from .orchestration.airflow import pipeline_dag, published_batches, replay_dag, results_asset

__all__ = ["pipeline_dag", "published_batches", "replay_dag", "results_asset"]
