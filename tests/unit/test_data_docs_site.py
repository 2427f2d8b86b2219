"""A warehouse's Data Docs read as files (``datadocs.Site``, no GX, no Spark): a pipeline's
validation pages found by suite, and which files a reader of one pipeline may see, when one
folder holds every pipeline's pages. The same code reads an object store (tests/test_airflow_plugin.py)."""

import pytest

from framework.operations.datadocs import Page, Site, of_suite

HOUR = "2026-01-01T01:00:00"
FILES = [
    f"validations/p/{HOUR}/20260101T010500.000000Z/pandas-p.html",
    "validations/p/results-table/20260101T011000.000000Z/pandas-p.html",
    f"validations/q/{HOUR}/20260101T010700.000000Z/pandas-q.html",
    "validations/p/stray.html",  # not where GX puts a page
    "expectations/p.html",
    "index.html",
    "static/vendor/jquery-3.7.1.min.js",
]


@pytest.fixture
def warehouse(tmp_path):
    for name in FILES:
        (tmp_path / "data_docs" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "data_docs" / name).write_text(name)
    return str(tmp_path)


def test_a_suites_pages_are_found_oldest_first(warehouse):
    site = Site(warehouse)
    assert site.pages("p") == [
        Page("p", HOUR, "20260101T010500.000000Z", FILES[0]),
        Page("p", "results-table", "20260101T011000.000000Z", FILES[1]),
    ]
    assert [p.suite for p in site.pages()] == ["p", "q", "p"]
    assert site.pages("r") == [] and Site(warehouse + "/nowhere").pages() == []
    assert site.read(FILES[2]) == FILES[2].encode() and site.read("validations/p") is None
    assert site.read("validations/p/none.html") is None


@pytest.mark.parametrize(
    "path, shown",
    [
        (FILES[0], True),
        (FILES[1], True),
        ("expectations/p.html", True),
        ("static/vendor/jquery-3.7.1.min.js", True),
        (FILES[2], False),  # another pipeline's page
        ("expectations/q.html", False),
        ("index.html", False),  # GX's index lists every pipeline's runs
        ("static/../validations/q/x.html", False),
        ("validations/p/../q/x.html", False),
        ("static//x.css", False),
        ("static/..\\index.html", False),
        ("", False),
    ],
)
def test_a_reader_of_one_pipeline_sees_its_own_files_only(path, shown):
    assert of_suite(path, "p") is shown
