"""A pipeline changed while Airflow runs it (docs/operations.md#changing-a-pipeline), for
tests/test_versions.py: ``python tests/airflow_versions.py ROOT``.

The DAGs of ``dags/`` on a jobs folder whose ``user_alerts.py`` keeps two versions
(tests/fixtures/user_alerts_versions.py): Airflow runs hours 0 and 1 (``dag.test`` with the
executor, as the demo does: spark-submit, then the quality gate and its asset event); what a
downstream reader reads then is kept in ``ROOT/before.json``. Version 2 is built and switched to
with the command line (processes of their own: this one starts no JVM, so Airflow's forked
workers inherit none); Airflow runs hour 2, and what a reader reads then goes to ``ROOT/after.json``.
"""

import datetime as dt
import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "scripts"), str(REPO)]

import demo  # noqa: E402

READ = """
import json, sys
from framework import Runtime, spark_session
from framework.orchestration.jobs import load_job
pipeline = load_job(sys.argv[1]).PIPELINE
rows = Runtime(spark_session("read"), sys.argv[2]).read_output(pipeline)
out = {"columns": rows.columns, "rows": [r.asDict() for r in rows.collect()]}
open(sys.argv[3], "w").write(json.dumps(out, default=str))
"""


def _framework(*args: str) -> None:
    done = subprocess.run([sys.executable, "-m", "framework", *args], cwd=REPO, capture_output=True, text=True)
    if done.returncode:
        sys.exit(f"finalresults {' '.join(args)} failed:\n{done.stdout}{done.stderr}")
    print(done.stdout, flush=True)


def _read(job: str, warehouse: str, out: Path) -> None:
    """What a downstream reader (``rt.read_output``) reads now, as JSON in ``out``."""
    subprocess.run([sys.executable, "-c", READ, job, warehouse, str(out)], cwd=REPO, check=True, capture_output=True)


def main(root: Path) -> int:
    jobs = root / "jobs"
    jobs.mkdir(parents=True)
    for name in ("page_sessions.py", "sliding_metric.py"):
        shutil.copy(REPO / "jobs" / name, jobs / name)
    shutil.copy(REPO / "tests" / "fixtures" / "user_alerts_versions.py", jobs / "user_alerts.py")
    demo._configure(root)
    os.environ["FINALRESULTS_JOBS"] = str(jobs)
    demo._airflow("db", "migrate")
    demo._airflow("connections", "add", "spark_default", "--conn-type", "spark", "--conn-host", "local[*]")
    demo._sample_data(root, demo.START + dt.timedelta(hours=3))

    from framework.orchestration.jobs import load_job

    job, warehouse = str(jobs / "user_alerts.py"), str(root / "warehouse")
    paths = ["--warehouse", warehouse, "--landing", str(root / "landing")]
    pipeline = load_job(job).PIPELINE
    with demo._api_server(root / "airflow" / "api-server.log"):
        dag = demo._load_dags().user_alerts
        if not demo._run_intervals(dag, pipeline, root, 2, "spark-submit"):
            return 1
        _read(job, warehouse, root / "before.json")
        _framework("versions", "build", job, "--version", "2", "--from", demo.START.isoformat(), *paths)
        _framework("versions", "switch", job, "--to", "2", "--warehouse", warehouse)
        if not demo._run_intervals(dag, pipeline, root, 1, "spark-submit", first=2):
            return 1
        _read(job, warehouse, root / "after.json")
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
