"""The Airflow plugin (framework/orchestration/plugin.py) in a real api-server, seen in headless chromium.

Two hourly batches of ``user_alerts`` run in this process's Spark and leave what a job leaves
(``validation.after_run``: gate outcome, status, Data Docs); the pipeline DAG is registered with
``airflow dags reserialize``, one of its runs is made through the REST API, and the api-server
serves the plugin on 127.0.0.1. Without a token the plugin refuses; logged in, the DAG's "Final
results" view shows the batches, their gate outcomes, charts that have a size, links to the run
and to Data Docs, which the plugin serves. ``FINALRESULTS_SCREENSHOTS=docs`` keeps the screenshot
as docs/airflow-plugin.png.

Beside it, what an attacker or an unlucky deployment brings: ``other_alerts``, validated in the
same warehouse under the same batch id (one Data Docs folder holds both); ``s3_alerts``, whose
warehouse is on an S3 server on 127.0.0.1 (conftest's ``s3``); a DAG with odd assets of the
group (a name without dots, a status file that is no JSON); a user ``viewer`` whom the auth
manager (tests/airflow_one_dag_auth.py) allows ``user_alerts`` only; and script in the URL.
"""

import dataclasses
import datetime as dt
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from importlib.metadata import entry_points
from pathlib import Path
from types import SimpleNamespace
from urllib.parse import quote

import pytest
from test_airflow_scheduler import AIRFLOW, _environment
from test_data_docs import rows

from framework.operations import quality, validation
from framework.operations.status import load, snapshot_location
from framework.orchestration.jobs import load_job, run_interval
from framework.orchestration.plugin import DOCS_POLICY, POLICY

ROOT = Path(__file__).resolve().parents[1]
JOB = str(ROOT / "jobs" / "user_alerts.py")
START = dt.datetime(2026, 1, 1)
USER, PASSWORD = "operator", "a password for the test"
VIEWER = "viewer"  # may read DAG user_alerts only (airflow_one_dag_auth.ONE_DAG)
CHROMIUM = "/usr/bin/chromium"
XSS = "<img src=x onerror=alert(document.domain)>"
#: user_alerts under another name: a second pipeline of the same shape (``rows`` fits its results)
ALERTS_JOB = """
from datetime import timedelta as td
from framework import BufferConfig, Pipeline, Suppressed, TimeWindows, agg
LANDING = "user_events"
SCHEDULE = td(hours=1)
PIPELINE = (
    Pipeline({name!r}, timestamp="ts")
    .group_by("user_id")
    .windowed_by(TimeWindows.of_size_and_grace(td(hours=1), td(minutes=10)))
    .aggregate(agg.count("events"))
    .suppress(Suppressed.until_window_closes(BufferConfig.unbounded()))
    .to("user_alert_windows")
)
"""
DAGS = f"""
from datetime import datetime, timezone
from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG, Asset
from framework.airflow import pipeline_dag
start = datetime(2026, 1, 1, tzinfo=timezone.utc)
user_alerts = pipeline_dag({JOB!r}, None, start, warehouse={{warehouse!r}}, landing={{landing!r}})
other_alerts = pipeline_dag({{other!r}}, None, start, warehouse={{warehouse!r}}, landing={{landing!r}})
s3_alerts = pipeline_dag({{on_s3!r}}, None, start, warehouse={{s3_warehouse!r}}, landing={{landing!r}})
odd = [Asset(name="nodot", uri="file:///nowhere/nodot", group="finalresults"),  # no results asset: skipped
       Asset(name="finalresults.broken.out", uri={{broken!r}}, group="finalresults")]  # its status is no JSON
with DAG("odd_assets", schedule=None, start_date=start):
    EmptyOperator(task_id="publish", outlets=odd)
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


def _call(url: str, token: str | None = None, body: dict | None = None) -> tuple[int, str, dict[str, str]]:
    """Status, text and headers (names in lower case) of a request to ``url`` (a POST of ``body`` as JSON, if given)."""
    request = urllib.request.Request(url, data=json.dumps(body).encode() if body is not None else None)
    request.add_header("Content-Type", "application/json")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, response.read().decode(), {k.lower(): v for k, v in response.headers.items()}
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(), {k.lower(): v for k, v in e.headers.items()}


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
def others(spark, lake, s3):
    """The other pipelines' files: ``other_alerts`` and ``s3_alerts`` validated in user_alerts'
    warehouse under user_alerts' second batch id (after it: the newest page of that id); then
    ``s3_alerts``' warehouse on S3, with the status a job leaves and the Data Docs folder copied
    there (GX writes Data Docs to local disk only: a site synced to the bucket); and the status
    file of the ``broken`` asset, which is no JSON."""
    root, warehouse, _ = lake
    jobs = {}
    for name in ("other_alerts", "s3_alerts"):
        jobs[name] = root / f"{name}.py"
        jobs[name].write_text(ALERTS_JOB.format(name=name))
        quality.validate(
            spark,
            load_job(str(jobs[name])).PIPELINE,
            rows(spark, "u1"),
            "2026-01-01T01:00:00",
            warehouse_root=warehouse,
        )
    client = s3.client()
    for file in Path(warehouse, "data_docs").rglob("*"):
        if file.is_file():
            client.upload_file(str(file), s3.bucket, f"warehouse/{file.relative_to(warehouse).as_posix()}")
    moved = dataclasses.replace(load(warehouse, "user_alerts"), name="s3_alerts", root=s3.url("warehouse", "s3_alerts"))
    client.put_object(
        Bucket=s3.bucket, Key=snapshot_location("warehouse", "s3_alerts"), Body=json.dumps(moved.to_json(), default=str)
    )
    broken = root / "broken" / "broken"
    (broken / "_gate").mkdir(parents=True)
    (broken / "_gate" / "status.json").write_text("{not json")
    return SimpleNamespace(jobs=jobs, s3_warehouse=s3.url("warehouse"), broken=(broken / "out").as_uri())


@pytest.fixture(scope="module")
def api_server(lake, others, s3):
    """A real api-server on 127.0.0.1 with the pipeline DAGs registered, reaching the S3 server;
    yields its URL, log, and a token of the operator (an admin) and of the viewer."""
    root, warehouse, landing = lake
    env = _environment(root)
    (root / "dags").mkdir()
    (root / "dags" / "pipelines.py").write_text(
        DAGS.format(
            warehouse=warehouse,
            landing=landing,
            other=str(others.jobs["other_alerts"]),
            on_s3=str(others.jobs["s3_alerts"]),
            s3_warehouse=others.s3_warehouse,
            broken=others.broken,
        )
    )
    (root / "passwords.json").write_text(json.dumps({USER: PASSWORD, VIEWER: PASSWORD}))
    env.update(
        {
            "AIRFLOW__CORE__DAGS_FOLDER": str(root / "dags"),
            "AIRFLOW__CORE__AUTH_MANAGER": "airflow_one_dag_auth.OneDagAuthManager",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{USER}:admin,{VIEWER}:viewer",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(root / "passwords.json"),
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "False",
            "AIRFLOW__CORE__LAZY_LOAD_PLUGINS": "False",
            **s3.env(),  # the api-server reads s3_alerts' warehouse with its own credentials
        }
    )
    shim = _entry_point_shim(root / "shim")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), str(ROOT / "tests"), shim, env.get("PYTHONPATH")]))
    subprocess.run([AIRFLOW, "db", "migrate"], env=env, check=True, capture_output=True, timeout=600)
    subprocess.run([AIRFLOW, "dags", "reserialize"], env=env, check=True, capture_output=True, timeout=600)
    log_file = root / "api-server.log"
    log = open(log_file, "w")
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
            assert server.poll() is None, log_file.read_text()[-3000:]
            assert time.monotonic() < deadline, "the api-server did not answer in 10 min"
            time.sleep(2)
        tokens = {}
        for user in (USER, VIEWER):
            code, body, _ = _call(f"{url}/auth/token", body={"username": user, "password": PASSWORD})
            assert code == 201, body
            tokens[user] = json.loads(body)["access_token"]
        yield SimpleNamespace(url=url, token=tokens[USER], viewer=tokens[VIEWER], log=log_file)
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=60)
        log.close()


def _health(url: str) -> int | None:
    try:
        return _call(f"{url}/api/v2/monitor/health")[0]
    except OSError:
        return None


def _docs_links(html: str) -> set[str]:
    """The Data Docs pages a page links (under the plugin's /docs/)."""
    return set(re.findall(r'href="(/finalresults/docs/[^"]+)"', html))


def test_the_plugin_refuses_who_is_not_logged_in(api_server):
    url = api_server.url
    for path in ("/finalresults/", "/finalresults/dags/user_alerts", "/finalresults/docs/user_alerts/index.html"):
        assert _call(url + path)[0] == 401, path
    assert _call(url + "/finalresults/dags/user_alerts", token="not a token")[0] == 403


def test_a_user_allowed_one_dag_sees_that_pipeline_only(api_server, lake):
    """The viewer may read DAG user_alerts only: other_alerts' page, its Data Docs files and the
    links to them are refused it, and through user_alerts' Data Docs nobody reads other_alerts' pages."""
    url, viewer, operator = api_server.url, api_server.viewer, api_server.token
    _, warehouse, _ = lake
    code, overview, _ = _call(url + "/finalresults/", viewer)
    assert code == 200 and re.findall(r'data-pipeline="(\w+)"', overview) == ["user_alerts"]
    assert "other_alerts" not in overview and "s3_alerts" not in overview
    assert _call(url + "/finalresults/dags/other_alerts", viewer)[0] == 404
    assert _call(url + "/finalresults/dags/other_alerts", operator)[0] == 200
    [other_page] = Path(warehouse, "data_docs").glob("validations/other_alerts/*/*/*.html")
    other = other_page.relative_to(Path(warehouse, "data_docs")).as_posix()
    assert _call(f"{url}/finalresults/docs/other_alerts/{quote(other)}", operator)[0] == 200
    assert _call(f"{url}/finalresults/docs/other_alerts/{quote(other)}", viewer)[0] == 404
    for token in (viewer, operator):  # one data_docs folder holds both: user_alerts' route serves its own pages
        assert _call(f"{url}/finalresults/docs/user_alerts/{quote(other)}", token)[0] == 404
    code, index, headers = _call(url + "/finalresults/docs/user_alerts/", viewer)  # not GX's index of every pipeline
    assert code == 200 and headers["content-security-policy"] == POLICY
    listed = re.findall(r'<a href="([^"]+)"', index)
    own = Path(warehouse, "data_docs").glob("validations/user_alerts/*/*/*.html")
    assert sorted(listed) == sorted(quote(p.relative_to(Path(warehouse, "data_docs")).as_posix()) for p in own)
    assert _call(url + "/finalresults/docs/user_alerts/index.html", viewer)[1] == index


def test_each_batch_links_its_own_pipelines_data_docs_page(api_server):
    """other_alerts was validated after user_alerts under the same batch id: user_alerts' batch
    still links user_alerts' page, which is served."""
    url, token = api_server.url, api_server.token
    code, html, _ = _call(url + "/finalresults/dags/user_alerts", token)
    assert code == 200
    [page] = [link for link in _docs_links(html) if "/validations/" in link]
    assert page.startswith("/finalresults/docs/user_alerts/validations/user_alerts/2026-01-01T01%3A00%3A00/")
    assert _call(url + page, token)[0] == 200


def test_script_in_the_url_comes_back_as_text(api_server):
    url, token = api_server.url, api_server.token
    code, html, headers = _call(f"{url}/finalresults/dags/{quote(XSS)}", token)
    assert code == 404 and headers["content-security-policy"] == POLICY
    assert "<img" not in html and "&lt;img src=x onerror=alert(document.domain)&gt;" in html
    code, body, headers = _call(f"{url}/finalresults/docs/user_alerts/{quote(XSS)}.html", token)
    assert code == 404 and headers["content-type"] == "application/json"
    docs = sorted(link for link in _docs_links(_call(url + "/finalresults/", token)[1]) if "/validations/" in link)
    headers = _call(url + docs[0], token)[2]
    assert headers["content-security-policy"] == DOCS_POLICY and headers["x-content-type-options"] == "nosniff"


def test_odd_assets_and_paths_give_a_4xx_or_a_note_not_a_500(api_server):
    """A results-group asset named without dots is skipped with a log line; one whose status file
    is no JSON gets a section saying so; a NUL in a Data Docs path is a 400."""
    url, token = api_server.url, api_server.token
    code, html, _ = _call(url + "/finalresults/", token)
    assert code == 200
    assert re.findall(r'data-pipeline="(\w+)"', html) == ["broken", "other_alerts", "s3_alerts", "user_alerts"]
    assert "Cannot read its status: " in html
    log = api_server.log.read_text()
    assert "skipped asset 'nodot'" in log and "cannot show pipeline 'broken'" in log
    assert _call(url + "/finalresults/dags/user_alerts", token)[0] == 200
    assert _call(url + "/finalresults/docs/user_alerts/%00", token)[0] == 400
    assert _call(url + "/finalresults/docs/user_alerts/validations/user_alerts/%00.html", token)[0] == 400


def test_a_warehouse_on_s3_shows_its_status_and_data_docs(api_server):
    """Read without Spark, with the api-server's own credentials, as the quality gate reads its outcome."""
    url, token = api_server.url, api_server.token
    code, html, _ = _call(url + "/finalresults/dags/s3_alerts", token)
    assert code == 200 and 'data-pipeline="s3_alerts"' in html
    assert re.findall(r'<tr data-batch="([^"]+)"', html) == ["2026-01-01T01:00:00", "2026-01-01T00:00:00"]
    [page] = [link for link in _docs_links(html) if "/validations/" in link]
    assert page.startswith("/finalresults/docs/s3_alerts/validations/s3_alerts/2026-01-01T01%3A00%3A00/")
    code, served, _ = _call(url + page, token)
    assert code == 200 and "2026-01-01T01:00:00" in served
    assert (
        _call(url + page.replace("s3_alerts/validations/s3_alerts", "s3_alerts/validations/user_alerts"), token)[0]
        == 404
    )


def test_the_dag_view_shows_the_pipeline_in_chromium(api_server, tmp_path):
    """The view draws with its Content-Security-Policy on (its style applies, nothing is refused),
    so does a Data Docs page with its own; script in the URL shows as text and runs nowhere."""
    from playwright.sync_api import sync_playwright

    url, token = api_server.url, api_server.token
    code, body, _ = _call(
        f"{url}/api/v2/dags/user_alerts/dagRuns",
        token,
        {
            "dag_run_id": "the-second-hour",
            "logical_date": "2026-01-01T01:00:00Z",
            "data_interval_start": "2026-01-01T01:00:00Z",
            "data_interval_end": "2026-01-01T02:00:00Z",
        },
    )
    assert code == 200, body
    args = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking"]
    args += ["--disable-component-update", "--disable-sync"]
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=args)
        try:
            context = browser.new_context(viewport={"width": 1400, "height": 1000})
            context.add_cookies([{"name": "_token", "value": token, "url": url}])
            page = context.new_page()
            refused, dialogs = [], []
            page.on("console", lambda m: refused.append(m.text) if "Content Security Policy" in m.text else None)
            page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
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
            table = section.locator("table.batches")
            assert table.evaluate("t => getComputedStyle(t).borderCollapse") == "collapse"  # the style block applies
            page.screenshot(path=str(tmp_path / "airflow-plugin.png"))
            if os.environ.get("FINALRESULTS_SCREENSHOTS"):
                page.screenshot(path=str(Path(os.environ["FINALRESULTS_SCREENSHOTS"]) / "airflow-plugin.png"))
            page.goto(url + docs)  # the batch's Data Docs page, served by the plugin
            assert "2026-01-01T01:00:00" in page.content()
            assert page.locator("nav.navbar").first.evaluate("n => getComputedStyle(n).display") == "flex"  # Bootstrap
            page.goto(f"{url}/finalresults/dags/{quote(XSS)}")
            assert page.locator("p.note code").inner_text() == XSS and page.locator("img").count() == 0
            assert refused == [] and dialogs == []
        finally:
            browser.close()
