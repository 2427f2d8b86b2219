"""The status text and page from given pipeline states, without a warehouse (no Spark): escaping,
units that agree between text and charts, axes scaled to the data, gate outcomes per batch."""

import datetime as dt
import xml.etree.ElementTree as ET

import pytest

from framework.operations.status import PipelineStatus, shown, text
from framework.operations.statuspage import Links, page
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


def status(*batches, **fields):
    last = batches[-1] if batches else None
    return PipelineStatus(
        "p",
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
    links = Links(docs="/docs/p/", docs_pages={"2026-01-01T02:00:00": "validations/p/2026-01-01T02:00:00/t/b.html"})
    rows = {r.get("data-batch"): r for r in ET.fromstring(page("/lake", [s], links)).iter("tr") if r.get("data-batch")}
    verdict = rows["2026-01-01T02:00:00"].findall("td")[-1]
    assert verdict.get("class") == "text passed"
    assert verdict.find("a").get("href") == "/docs/p/validations/p/2026-01-01T02%3A00%3A00/t/b.html"
    assert rows["2026-01-01T01:00:00"].findall("td")[-1].text == "no rows to audit"
