"""Entry points: the ``spark-submit`` job runner, the ``finalresults`` CLI and the Airflow DAG
factories."""
