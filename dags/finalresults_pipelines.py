"""The example pipelines of jobs/ as Airflow DAGs, one factory call each, and their backfill
and replay DAGs.

Paths come from the environment, with defaults under the repository's ``var/`` folder:
FINALRESULTS_WAREHOUSE (pipeline tables), FINALRESULTS_LANDING (input tables), FINALRESULTS_JOBS
(job modules), FINALRESULTS_START (first data interval, ISO, UTC if naive) and, optionally,
FINALRESULTS_END (the start of the last interval to run) and FINALRESULTS_SPARK_CONNECT (a Spark
Connect connection's id: the jobs then run on the workers as thin clients of that server, not
through spark-submit).
"""

import os
from datetime import datetime, timezone
from pathlib import Path

from framework.airflow import backfill_dag, pipeline_dag, replay_dag

REPO = Path(__file__).resolve().parents[1]
WAREHOUSE = os.environ.get("FINALRESULTS_WAREHOUSE", str(REPO / "var" / "warehouse"))
LANDING = os.environ.get("FINALRESULTS_LANDING", str(REPO / "var" / "landing"))
JOBS = Path(os.environ.get("FINALRESULTS_JOBS", REPO / "jobs"))
START = datetime.fromisoformat(os.environ.get("FINALRESULTS_START", "2026-01-01T00:00:00"))
START = START if START.tzinfo else START.replace(tzinfo=timezone.utc)
END = datetime.fromisoformat(os.environ["FINALRESULTS_END"]) if os.environ.get("FINALRESULTS_END") else None
END = END.replace(tzinfo=timezone.utc) if END and not END.tzinfo else END
CONNECT = os.environ.get("FINALRESULTS_SPARK_CONNECT") or None
SPARK = {"warehouse": WAREHOUSE, "landing": LANDING, "connect_conn_id": CONNECT}
PATHS = {**SPARK, "end_date": END}

# Cron schedules (the jobs' SCHEDULEs, on the clock), so the UI shows each the same way.
user_alerts = pipeline_dag(str(JOBS / "user_alerts.py"), "0 * * * *", START, **PATHS)
page_sessions = pipeline_dag(str(JOBS / "page_sessions.py"), "*/30 * * * *", START, **PATHS)
sliding_metric = pipeline_dag(str(JOBS / "sliding_metric.py"), "*/15 * * * *", START, **PATHS)

# Manually triggered catch-ups of a range in one run, in chunks (params: start, end, optional chunk_records).
user_alerts_backfill = backfill_dag(str(JOBS / "user_alerts.py"), **SPARK)
page_sessions_backfill = backfill_dag(str(JOBS / "page_sessions.py"), **SPARK)
sliding_metric_backfill = backfill_dag(str(JOBS / "sliding_metric.py"), **SPARK)

# Manually triggered replays of a committed range (params: start, optional end).
user_alerts_replay = replay_dag(str(JOBS / "user_alerts.py"), **SPARK)
page_sessions_replay = replay_dag(str(JOBS / "page_sessions.py"), **SPARK)
sliding_metric_replay = replay_dag(str(JOBS / "sliding_metric.py"), **SPARK)
