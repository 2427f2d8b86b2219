"""An Airflow auth manager for tests/test_airflow_plugin.py, loaded by its api-server
(``AIRFLOW__CORE__AUTH_MANAGER``): Airflow's simple auth manager, except that each user of
``ONE_DAG`` may read that one DAG only, as a deployment's auth manager restricts a team to its
DAGs. The simple manager's roles reach every DAG alike, which could not show a pipeline's page,
Data Docs and links being refused to a user who may read another pipeline's.
"""

from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager

ONE_DAG = {"viewer": "user_alerts"}  # user -> the only DAG it may read


class OneDagAuthManager(SimpleAuthManager):
    def is_authorized_dag(self, *, method, user, access_entity=None, details=None) -> bool:
        only = ONE_DAG.get(user.get_name())
        if only is not None and details is not None and details.id not in (None, only):
            return False
        return super().is_authorized_dag(method=method, user=user, access_entity=access_entity, details=details)
