"""Data Docs render offline: two validations (one passes, one fails) written to a warehouse's Data
Docs, then opened from disk in headless chromium with every network request refused."""

import datetime as dt
from pathlib import Path

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeout
from playwright.sync_api import sync_playwright

from framework.errors import QualityGateError
from framework.operations import quality
from framework.orchestration.jobs import load_job

ROOT = Path(__file__).resolve().parents[1]
PIPELINE = load_job(str(ROOT / "jobs" / "user_alerts.py")).PIPELINE
CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking"]
ARGS += ["--disable-component-update", "--disable-sync"]
ICONS = """() => [...document.querySelectorAll("i.ge-success-icon, i.ge-failed-icon, i.fas")]
    .map(e => getComputedStyle(e, "::before").content)"""
ICONS_DRAWN = f"""() => {{ const drawn = ({ICONS})(); return drawn.includes('"✔"') && drawn.includes('"✖"'); }}"""


def rows(spark, user):
    """One final row of user_alerts' results table, for ``user`` (None breaks the not-null expectation)."""
    hour = dt.datetime(2026, 1, 1)
    return spark.createDataFrame(
        [(user, hour, hour + dt.timedelta(hours=1), 1, "b", hour + dt.timedelta(hours=1, minutes=11))],
        "user_id string, window_start timestamp, window_end timestamp, events long, emitted_batch_id string, "
        "emitted_stream_time timestamp",
    )


@pytest.fixture(scope="module")
def data_docs(spark, tmp_path_factory):
    warehouse = tmp_path_factory.mktemp("data_docs") / "warehouse"
    quality.validate(spark, PIPELINE, rows(spark, "u1"), "2026-01-01T01:00:00", warehouse_root=str(warehouse))
    with pytest.raises(QualityGateError):
        quality.validate(
            spark, PIPELINE, rows(spark, None), "2026-01-01T02:00:00", warehouse_root=str(warehouse)
        ).raise_for_failures()
    assert not (warehouse / "data_docs" / "index.html").exists()  # audits write their own pages only
    assert quality.document_index(str(warehouse)) == warehouse / "data_docs" / "index.html"
    return warehouse / "data_docs"


@pytest.fixture(scope="module")
def offline_browser():
    """A chromium page that may load files only: any other request is refused and recorded."""
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        context = browser.new_context()
        refused = []

        def file_only(route):
            if route.request.url.startswith("file:"):
                return route.continue_()
            refused.append(route.request.url)
            return route.abort()

        context.route("**/*", file_only)
        yield context.new_page(), refused
        browser.close()


def test_the_index_lists_the_validations_styled_without_network(data_docs, offline_browser):
    page, refused = offline_browser
    page.goto((data_docs / "index.html").as_uri())
    listed = page.locator("#Validation-Results table tbody tr")
    listed.first.wait_for(timeout=30_000)  # bootstrap-table builds the rows
    assert listed.count() == 2
    assert {listed.nth(i).locator("td").nth(2).inner_text() for i in range(2)} == {
        "2026-01-01T01:00:00",
        "2026-01-01T02:00:00",
    }
    # GX names a validated DataFrame no asset; the framework names the results table
    assert {listed.nth(i).locator("td").nth(3).inner_text() for i in range(2)} == {"user_alerts/user_alert_windows"}
    # bootstrap-table may rebuild the rows after the first one shows (a detached icon has no style), so the
    # icons are read in one pass inside the page, once both statuses are drawn or 30 s have passed
    try:
        page.wait_for_function(ICONS_DRAWN, timeout=30_000)
    except PlaywrightTimeout:
        pass  # the assert below says which icons were drawn
    icons = page.evaluate(ICONS)
    assert set(icons) >= {'"✔"', '"✖"'}, icons
    assert "Segoe UI" in page.evaluate("getComputedStyle(document.body).fontFamily")  # Bootstrap's
    assert page.locator("#Validation-Results table").first.evaluate("t => getComputedStyle(t).borderCollapse") == (
        "collapse"
    )
    assert refused == []


def test_a_validation_page_shows_what_failed_without_network(data_docs, offline_browser):
    page, refused = offline_browser
    [failed] = (data_docs / "validations").glob("*/2026-01-01T02:00:00/*/*.html")
    page.goto(failed.as_uri())
    assert "Failed" in page.locator(".alert-secondary").first.inner_text()
    text = page.inner_text("body")
    assert "Data asset: user_alerts/user_alert_windows" in text and "2026-01-01T02:00:00" in text
    assert "<DATAFRAME>" not in text and "Data asset: None" not in text
    assert "expect_column_values_to_not_be_null" in page.content() or "values must never be null" in page.content()
    assert page.locator("nav.navbar").first.evaluate("n => getComputedStyle(n).display") == "flex"  # Bootstrap 4
    assert refused == []
