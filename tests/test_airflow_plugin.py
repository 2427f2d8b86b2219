"""The Airflow plugin (framework/orchestration/plugin.py) in a real api-server, seen in headless chromium.

Two hourly batches of ``user_alerts`` run in this process's Spark and leave what a job leaves
(``validation.after_run``: gate outcome, status, Data Docs); the pipeline DAG is registered with
``airflow dags reserialize``, one of its runs is made through the REST API, and the api-server
serves the plugin on 127.0.0.1. Without a token the plugin refuses; logged in, the DAG's "Final
results" view shows the batches, their gate outcomes, charts that have a size, links to the run
and to Data Docs, which the plugin serves. ``FINALRESULTS_SCREENSHOTS=docs`` keeps the screenshot
as docs/airflow-plugin.png.
"""

import datetime as dt
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from importlib.metadata import entry_points
from pathlib import Path

import pytest
from test_airflow_scheduler import AIRFLOW, _environment

from framework.operations import validation
from framework.orchestration.jobs import load_job, run_interval

ROOT = Path(__file__).resolve().parents[1]
JOB = str(ROOT / "jobs" / "user_alerts.py")
START = dt.datetime(2026, 1, 1)
USER, PASSWORD = "operator", "a password for the test"
CHROMIUM = "/usr/bin/chromium"
DAG = f"""
from datetime import datetime, timezone
from framework.airflow import pipeline_dag
user_alerts = pipeline_dag({JOB!r}, None, datetime(2026, 1, 1, tzinfo=timezone.utc), warehouse={{warehouse!r}},
                           landing={{landing!r}})
"""


def _entry_point_shim(folder: Path) -> str | None:
    """A PYTHONPATH entry declaring the plugin's ``airflow.plugins`` entry point, as pyproject.toml
    does, for an environment installed before it was added; None when the install declares it."""
    if any(e.name == "finalresults" for e in entry_points(group="airflow.plugins")):
        return None
    info = folder / "finalresults_plugin_shim-0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: finalresults-plugin-shim\nVersion: 0\n")
    (info / "entry_points.txt").write_text(
        "[airflow.plugins]\nfinalresults = framework.orchestration.plugin:FinalResultsPlugin\n"
    )
    return str(folder)


def _call(url: str, token: str | None = None, body: dict | None = None) -> tuple[int, str]:
    request = urllib.request.Request(url, data=json.dumps(body).encode() if body is not None else None)
    request.add_header("Content-Type", "application/json")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


@pytest.fixture(scope="module")
def lake(spark, tmp_path_factory):
    """Two committed batches of user_alerts, each followed by what its job leaves for Airflow."""
    sys.path.insert(0, str(ROOT))
    from jobs import sample_data

    root = tmp_path_factory.mktemp("plugin")
    landing, warehouse = str(root / "landing"), str(root / "warehouse")
    sample_data.generate(spark, landing, START, START + dt.timedelta(hours=2), tables=("user_events",))
    pipeline = load_job(JOB).PIPELINE
    for hour in range(2):
        begin = START + dt.timedelta(hours=hour)
        ran = run_interval(spark, pipeline, "user_events", begin, begin + dt.timedelta(hours=1), warehouse, landing)
        validation.after_run(spark, pipeline, warehouse, ran, run_id=f"manual__{begin.isoformat()}")
    return root, warehouse, landing


@pytest.fixture(scope="module")
def api_server(lake):
    """A real api-server on 127.0.0.1 with the pipeline DAG registered; yields its URL and a token."""
    root, warehouse, landing = lake
    env = _environment(root)
    home = Path(env["AIRFLOW_HOME"])
    (root / "dags").mkdir()
    (root / "dags" / "pipelines.py").write_text(DAG.format(warehouse=warehouse, landing=landing))
    (root / "passwords.json").write_text(json.dumps({USER: PASSWORD}))
    env.update(
        {
            "AIRFLOW__CORE__DAGS_FOLDER": str(root / "dags"),
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{USER}:admin",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(root / "passwords.json"),
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "False",
            "AIRFLOW__CORE__LAZY_LOAD_PLUGINS": "False",
        }
    )
    shim = _entry_point_shim(root / "shim")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), shim, env.get("PYTHONPATH")]))
    subprocess.run([AIRFLOW, "db", "migrate"], env=env, check=True, capture_output=True, timeout=600)
    subprocess.run([AIRFLOW, "dags", "reserialize"], env=env, check=True, capture_output=True, timeout=600)
    log = open(root / "api-server.log", "w")
    port = env["AIRFLOW__API__PORT"]
    server = subprocess.Popen(
        [AIRFLOW, "api-server", "-H", "127.0.0.1", "-p", port],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 600
        while _health(url) != 200:
            assert server.poll() is None, (root / "api-server.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "the api-server did not answer in 10 min"
            time.sleep(2)
        status, body = _call(f"{url}/auth/token", body={"username": USER, "password": PASSWORD})
        assert status == 201, body
        yield url, json.loads(body)["access_token"], home
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=60)
        log.close()


def _health(url: str) -> int | None:
    try:
        return _call(f"{url}/api/v2/monitor/health")[0]
    except OSError:
        return None


def test_the_plugin_refuses_who_is_not_logged_in(api_server):
    url, _, _ = api_server
    for path in ("/finalresults/", "/finalresults/dags/user_alerts", "/finalresults/docs/user_alerts/index.html"):
        status, _ = _call(url + path)
        assert status == 401, path
    assert _call(url + "/finalresults/dags/user_alerts", token="not a token")[0] == 403


def test_the_dag_view_shows_the_pipeline_in_chromium(api_server, lake, tmp_path):
    from playwright.sync_api import sync_playwright

    url, token, _ = api_server
    status, body = _call(
        f"{url}/api/v2/dags/user_alerts/dagRuns",
        token,
        {
            "dag_run_id": "the-second-hour",
            "logical_date": "2026-01-01T01:00:00Z",
            "data_interval_start": "2026-01-01T01:00:00Z",
            "data_interval_end": "2026-01-01T02:00:00Z",
        },
    )
    assert status == 200, body
    args = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking"]
    args += ["--disable-component-update", "--disable-sync"]
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=args)
        try:
            context = browser.new_context(viewport={"width": 1400, "height": 1000})
            context.add_cookies([{"name": "_token", "value": token, "url": url}])
            page = context.new_page()
            page.goto(f"{url}/dags/user_alerts/plugin/finalresults-dag")
            frame = page.frame_locator("iframe[title='Final results']")
            section = frame.locator("section[data-pipeline='user_alerts']")
            section.wait_for(timeout=120_000)
            rows = section.locator("table.batches tbody tr")
            assert rows.count() == 2
            second, first = rows.nth(0), rows.nth(1)  # newest first
            assert first.locator("td").last.inner_text() == "no rows to audit"
            verdict = second.locator("td").last
            assert verdict.inner_text().startswith("passed ") and "passed" in verdict.get_attribute("class")
            assert second.locator("a").first.get_attribute("href").endswith("/dags/user_alerts/runs/the-second-hour")
            docs = verdict.locator("a").get_attribute("href")
            charts = section.locator("figure.chart > svg")
            assert charts.count() >= 5
            assert all(charts.nth(i).bounding_box()["height"] > 100 for i in range(charts.count()))
            page.screenshot(path=str(tmp_path / "airflow-plugin.png"))
            if os.environ.get("FINALRESULTS_SCREENSHOTS"):
                page.screenshot(path=str(Path(os.environ["FINALRESULTS_SCREENSHOTS"]) / "airflow-plugin.png"))
            page.goto(url + docs)  # the batch's Data Docs page, served by the plugin
            assert "2026-01-01T01:00:00" in page.content()
        finally:
            browser.close()
