"""The status text and page from given pipeline states, without a warehouse (no Spark): escaping
and the page's Content-Security-Policy, units that agree between text and charts, axes scaled to
the data, gate outcomes per batch, Data Docs links per pipeline."""

import base64
import datetime as dt
import hashlib
import xml.etree.ElementTree as ET

import pytest

from framework.operations.datadocs import Page
from framework.operations.status import PipelineStatus, shown, text
from framework.operations.statuspage import POLICY, Links, docs_index, docs_pages, page
from framework.storage.metrics import KIP_NAMES


def batch(seq, **values):
    """A metrics row as ``status.read`` keeps it: every metric 1 unless given, stream time seq hours in."""
    return {
        "seq": seq,
        "batch_id": f"2026-01-01T{seq:02}:00:00",
        **{c: 1 for c in KIP_NAMES},
        "stream_time": f"2026-01-01 {seq:02}:59:00.000",
        "gate": None,
        **values,
    }


def status(*batches, name="p", **fields):
    last = batches[-1] if batches else None
    return PipelineStatus(
        name,
        "/lake/p",
        started=True,
        last_batch={"batch_id": last["batch_id"], "seq": last["seq"], "committed_at": "2026-01-02 00:00:00.000"}
        | {"stream_time": last["stream_time"]}
        if last
        else None,
        batches=list(batches),
        batch_count=len(batches),
        **fields,
    )


def chart(html, title):
    return next(f for f in ET.fromstring(html).iter("figure") if f.get("data-chart") == title)


def test_text_is_escaped():
    name = '<script>alert("x")</script> & co'
    tree = ET.fromstring(page("/lake/<&>", [status(batch(1, batch_id=name))]))  # well formed
    assert not list(tree.iter("script")) and not list(tree.find(".//pre"))
    assert name in [c.find("title").text.split(" · ")[1] for c in tree.iter("circle")]
    assert name in [r.get("data-batch") for r in tree.iter("tr")]
    assert "/lake/<&>" in tree.find(".//title").text


def test_values_from_a_status_file_are_text():
    """What a status file holds (a job wrote it, anyone with access to the warehouse could) is
    shown as text wherever the page writes it: table, charts' tooltips, the gate's verdict."""
    tag = "<img src=x onerror=alert(1)>"
    gate = {"checked": 1, "failed": [f"expect_column_values_to_be_in_set: {tag}"], "warnings": []}
    tree = ET.fromstring(page("/lake", [status(batch(1) | {"seq": tag, "gate": gate}, batch(2, batch_id=tag))]))
    assert not list(tree.iter("img")) and not list(tree.iter("script"))
    assert any((c.find("title").text or "").startswith(f"seq {tag} · ") for c in tree.iter("circle"))
    cells = [r.findall("td") for r in tree.iter("tr") if r.get("data-batch")]
    assert [c[0].text for c in cells] == ["2", tag] and cells[1][-1].text.endswith(tag)


def test_the_page_applies_its_own_style_and_runs_nothing():
    """Its policy, in the page (opened from disk or mail) as the plugin sends it: the style block
    by its hash, no script, no style attribute (a policy without 'unsafe-inline' refuses them)."""
    html = page("/lake", [status(batch(1), batch(2))])
    tree = ET.fromstring(html)
    [meta] = [m for m in tree.iter("meta") if m.get("http-equiv") == "Content-Security-Policy"]
    assert meta.get("content") == POLICY
    style = tree.find(".//style").text
    digest = base64.b64encode(hashlib.sha256(style.encode()).digest()).decode()
    assert f"style-src 'sha256-{digest}'" in POLICY and "script-src" not in POLICY and "default-src 'none'" in POLICY
    assert [e.tag for e in tree.iter() if e.get("style") is not None] == []
    assert {s.get("class") for s in tree.iter("span")} == {"series-0", "series-1"}


def test_each_pipeline_links_its_own_data_docs_pages():
    """Two pipelines of one warehouse, one batch id: each batch links its own suite's newest page."""
    hour = "2026-01-01T01:00:00"
    pages = [
        Page("p", hour, "20260101T020000.000000Z", f"validations/p/{hour}/20260101T020000.000000Z/b.html"),
        Page("p", hour, "20260101T010500.000000Z", f"validations/p/{hour}/20260101T010500.000000Z/b.html"),
        Page("q", hour, "20260101T030000.000000Z", f"validations/q/{hour}/20260101T030000.000000Z/b.html"),
    ]
    links = Links(docs="/docs/", docs_pages=docs_pages(pages))
    html = page("/lake", [status(batch(1)), status(batch(1), name="q")], links)
    for section in ET.fromstring(html).iter("section"):
        [link] = [a.get("href") for a in section.iter("a") if "validations" in a.get("href")]
        newest = next(
            p for p in sorted(pages, key=lambda p: p.run_time, reverse=True) if p.suite == section.get("data-pipeline")
        )
        assert link == "/docs/" + newest.path.replace(":", "%3A")


def test_a_data_docs_index_lists_the_pages_it_is_given_newest_first():
    older = Page("p", "<b>", "20260101T010000.000000Z", "validations/p/<b>/20260101T010000.000000Z/b.html")
    newer = Page(
        "p", "2026-01-01T02:00:00", "20260101T020000.000000Z", "validations/p/x/20260101T020000.000000Z/b.html"
    )
    tree = ET.fromstring(docs_index("p", [older, newer]))
    assert [a.get("href") for a in tree.iter("a")] == [
        newer.path,
        "validations/p/%3Cb%3E/20260101T010000.000000Z/b.html",
    ]
    assert [a.text for a in tree.iter("a")] == ["2026-01-01T02:00:00", "<b>"]


@pytest.mark.parametrize(
    "column, value, expected",
    [
        ("batch_duration_ms", 69369, "69.4 s"),
        ("batch_duration_ms", 1500, "1,500 ms"),
        ("record_lateness_avg", 117435.69565217392, "117.4 s"),
        ("record_lateness_max", 2403771.0, "40.1 min"),
        ("suppression_buffer_size_max", 3 << 20, "3.0 MiB"),
        ("suppression_buffer_size_current", None, "not recorded"),
        ("records_in", 1204, "1,204"),
        ("stream_time", dt.datetime(2026, 1, 1, 2, 57, 52, 374000), "2026-01-01 02:57:52.374"),
    ],
)
def test_metrics_are_shown_with_their_unit(column, value, expected):
    assert shown(column, value) == expected


def test_text_and_chart_caption_say_the_same_value():
    s = status(batch(1, batch_duration_ms=5000), batch(2, batch_duration_ms=69369))
    assert "69.4 s" in text(s)
    figure = chart(page("/lake", [s]), "batch duration")
    assert "batch-duration-ms 69.4 s" in "".join(figure.find("figcaption").itertext())


def test_y_axis_is_scaled_to_the_data():
    """Lateness near 2 min: the axis is in min or s and ends just above the highest value."""
    s = status(batch(1, record_lateness_max=100_000.0), batch(2, record_lateness_max=117_000.0))
    figure = chart(page("/lake", [s]), "lateness")
    labels = [t.text for t in figure.iter("text")]
    assert "s" in labels  # the unit
    numbers = [float(t) for t in labels if t.replace(".", "").isdigit()]
    assert 117 <= max(numbers) <= 117 * 1.5


def test_counts_step_by_whole_numbers():
    s = status(batch(1, late_records=0), batch(2, late_records=1))
    labels = [t.text for t in chart(page("/lake", [s]), "late").iter("text")]
    assert [label for label in labels if label.replace(".", "").isdigit()] == ["0", "1"]


def test_x_axis_is_event_time():
    s = status(batch(1), batch(3))
    figure = next(iter(ET.fromstring(page("/lake", [s])).iter("figure")))
    labels = [t.text for t in figure.iter("text")]
    assert "01-01 01:59" in labels and "01-01 03:59" in labels and "stream time (UTC)" in labels
    xs = [float(c.get("cx")) for c in figure.iter("circle")]
    assert xs[0] < xs[1]


def test_gate_outcome_per_batch_in_text_and_page():
    null_key = "expect_column_values_to_not_be_null(column=user_id): 1 of 4 rows unexpected"
    failed = {"checked": 9, "failed": [null_key], "warnings": []}
    s = status(
        batch(1),
        batch(2, gate={"checked": 9, "failed": [], "warnings": ["expect_max(column=events): observed 5"]}),
        blocked={"batch_id": "2026-01-01T03:00:00", "gate": failed},
    )
    lines = text(s).splitlines()
    assert lines[-2].endswith("no rows to audit") and lines[-1].endswith("passed 8/9 (1 warning)")
    assert f"  BLOCKED        batch 2026-01-01T03:00:00: quality gate FAILED: {null_key}; nothing committed" in lines
    assert len(text(s, last=1).splitlines()) == len(lines) - 1
    links = Links(
        docs="/docs/p/", docs_pages={("p", "2026-01-01T02:00:00"): "validations/p/2026-01-01T02:00:00/t/b.html"}
    )
    rows = {r.get("data-batch"): r for r in ET.fromstring(page("/lake", [s], links)).iter("tr") if r.get("data-batch")}
    verdict = rows["2026-01-01T02:00:00"].findall("td")[-1]
    assert verdict.get("class") == "text passed"
    assert verdict.find("a").get("href") == "/docs/p/validations/p/2026-01-01T02%3A00%3A00/t/b.html"
    assert rows["2026-01-01T01:00:00"].findall("td")[-1].text == "no rows to audit"
