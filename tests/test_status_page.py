"""``status`` (text, ``--json``, ``--html``) shows what the metrics table and the quality gate
recorded, the page stands alone, and long commands report progress and end with a summary.

One warehouse for the module: ``user_alerts`` backfilled over three hours then replayed over its last
two, and ``quiet``, whose only batch was refused: it wrote nothing, so only ``status`` naming its
job reports it.
"""

import contextlib
import datetime as dt
import io
import json
import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from types import SimpleNamespace

import pytest
from pyspark.sql import functions as F

from framework import InputError, Runtime
from framework.operations.statuspage import CHARTS
from framework.orchestration.cli import main
from framework.orchestration.jobs import load_job
from framework.storage.metrics import KIP_NAMES

ROOT = Path(__file__).resolve().parents[1]
ALERTS = str(ROOT / "jobs" / "user_alerts.py")
START, END = dt.datetime(2026, 1, 1), dt.datetime(2026, 1, 1, 3)
QUIET_JOB = """
from datetime import timedelta as td
from framework import BufferConfig, Pipeline, Suppressed, TimeWindows, agg

LANDING = "quiet_events"
PIPELINE = (
    Pipeline("quiet", timestamp="ts")
    .group_by("k")
    .windowed_by(TimeWindows.of_size_and_grace(td(hours=1), td(0)))
    .aggregate(agg.count("n"))
    .suppress(Suppressed.until_window_closes(BufferConfig.unbounded()))
    .to("quiet_out")
)
"""
PROGRESS = re.compile(
    r"finalresults: (backfill|replay) user_alerts: (\d+)/(\d+) intervals, (?:\d+ min )?\d+ s elapsed"
    r"(?: \(([^)]+)\))?(, about (?:\d+ min )?\d+ s left)?"
)


def _run(argv):
    """``main(argv)``'s exit status, stdout and stderr lines."""
    with contextlib.redirect_stdout(io.StringIO()) as out, contextlib.redirect_stderr(io.StringIO()) as err:
        code = main(argv)
    return code, out.getvalue().splitlines(), err.getvalue().splitlines()


@pytest.fixture(scope="module")
def lake(spark, tmp_path_factory):
    sys.path.insert(0, str(ROOT))
    from jobs import sample_data

    root = tmp_path_factory.mktemp("status_page")
    landing, warehouse = str(root / "landing"), str(root / "warehouse")
    sample_data.generate(spark, landing, START, END, tables=("user_events",))
    paths = ["--warehouse", warehouse, "--landing", landing]
    backfill = _run(["backfill", ALERTS, "--from", START.isoformat(), "--to", END.isoformat(), *paths])
    replay = _run(["replay", ALERTS, "--from", "2026-01-01T01:00", *paths])
    quiet = root / "quiet.py"
    quiet.write_text(QUIET_JOB, encoding="utf-8")
    with pytest.raises(InputError):
        Runtime(spark, warehouse).run_batch(
            load_job(str(quiet)).PIPELINE, "b0", spark.createDataFrame([("a",)], "k string")
        )
    assert not (Path(warehouse) / "quiet").exists()  # refused before anything was written
    html = root / "status.html"
    assert not (Path(warehouse) / "data_docs" / "index.html").exists()  # no audit builds GX's index
    status = _run(["status", ALERTS, str(quiet), "--warehouse", warehouse, "--html", str(html)])
    metrics = Runtime(spark, warehouse).read_metrics(load_job(ALERTS).PIPELINE).orderBy("seq").collect()
    audits = spark.read.format("delta").load(f"{warehouse}/quality_results").filter("batch_id is not null")
    return SimpleNamespace(
        backfill=backfill,
        replay=replay,
        status=status,
        text=_run(["status", "--warehouse", warehouse, "--last", "2"]),
        json=_run(["status", "--warehouse", warehouse, "--json", "--last", "3"]),
        audited={r.batch_id for r in audits.collect()},
        # a chunk's audit is each of its intervals' and has one Data Docs page, named after the first
        documented={r[1] for r in audits.groupBy("validated_at").agg(F.min("batch_id")).collect()},
        page=html.read_text(encoding="utf-8"),
        docs_index=Path(warehouse, "data_docs", "index.html"),
        metrics=[r.asDict() for r in metrics],
    )


def _sections(text):
    return {s.get("data-pipeline"): s for s in ET.fromstring(text).iter("section")}


def _points(series):
    """(seq, value, how precise) of each point of a chart series, from its tooltips (``12.5 s``)."""
    points = []
    for circle in series.iter("circle"):
        seq, _, _, shown = circle.find("title").text.split(" · ")
        number, *unit = shown.replace(",", "").split()
        per = {"s": 1000, "min": 60_000, "KiB": 1024, "MiB": 1 << 20}.get(unit[0] if unit else "", 1)
        points.append((int(seq.split()[1]), float(number) * per, 0.05 * per))
    return points


def test_backfill_and_replay_report_progress_on_stderr_and_backfill_ends_with_a_summary(lake):
    code, out, _ = lake.backfill
    assert re.fullmatch(
        r"backfill user_alerts: 3 interval\(s\) in (\d+ min )?\d+ s: 3 committed, 0 already committed; "
        r"records in [\d,]+, rows published [\d,]+",
        out[-1],
    )
    for (code, out, err), command, done in ((lake.backfill, "backfill", [3]), (lake.replay, "replay", [3])):
        assert code == 0 and out, err
        matches = [PROGRESS.fullmatch(line) for line in err]
        assert all(matches), err
        assert [(m[1], int(m[2]), int(m[3])) for m in matches] == [(command, n, done[-1]) for n in done]
        assert all(m[5] for m in matches[:-1]) and not matches[-1][5]  # time left, until the last
    # the backfill's three hours ran as one chunk: one line, naming them
    assert PROGRESS.fullmatch(lake.backfill[2][0])[4] == "2026-01-01T00:00:00..2026-01-01T02:00:00: one chunk"


def test_page_has_a_section_per_pipeline_and_says_when_there_is_nothing_to_chart(lake):
    assert lake.status[0] == 0 and "status of 2 pipeline(s)" in lake.status[1][0]
    sections = _sections(lake.page)
    assert set(sections) == {"quiet", "user_alerts"}
    quiet = sections["quiet"]
    assert "no batch has run yet" in quiet.find("pre").text
    assert "nothing to chart" in " ".join("".join(p.itertext()) for p in quiet.iter("p"))
    assert not list(quiet.iter("svg"))
    alerts = sections["user_alerts"]
    assert "last batch     2026-01-01T02:00:00 (seq 3)" in alerts.find("pre").text


def test_charts_plot_the_metrics_table_one_point_per_batch(lake):
    alerts, rows = _sections(lake.page)["user_alerts"], lake.metrics
    assert [r["seq"] for r in rows] == [1, 2, 3] and sum(r["records_in"] for r in rows) > 0
    series = {g.get("data-metric"): g for g in alerts.iter("g") if g.get("class") == "series"}
    recorded = {c for c in KIP_NAMES if any(r[c] is not None for r in rows)}
    drawn = {c for _, columns in CHARTS for c in columns if c in recorded}
    assert {KIP_NAMES[c] for c in drawn} == set(series)
    assert {"records_in", "late_records", "record_lateness_max", "windows_open", "batch_duration_ms"} <= drawn
    for column in drawn:
        g = series[KIP_NAMES[column]]
        points = _points(g)
        assert [seq for seq, _, _ in points] == [1, 2, 3], column
        assert all(abs(value - r[column]) <= error for (_, value, error), r in zip(points, rows)), column
        assert len(g.find("polyline").get("points").split()) == len(rows)
        ys = [float(c.get("cy")) for c in g.iter("circle")]  # higher values are drawn higher
        assert all(
            (ys[i] - ys[j]) * (rows[i][column] - rows[j][column]) <= 1e-9
            for i in range(len(rows))
            for j in range(len(rows))
        )
    captions = {f.get("data-chart"): "".join(f.find("figcaption").itertext()) for f in alerts.iter("figure")}
    assert f" records-in {rows[-1]['records_in']:,}" in captions["records in"]
    assert "suppression-buffer-size-current" in " ".join(p.text or "" for p in alerts.iter("p"))  # not recorded


def test_page_links_gx_data_docs_index_which_status_html_builds(lake):
    links = {a.get("href") for a in ET.fromstring(lake.page).iter("a") if a.text == "Data Docs"}
    assert links == {lake.docs_index.resolve().as_uri()}
    assert lake.documented and all(batch in lake.docs_index.read_text() for batch in lake.documented)


def test_page_fetches_nothing(lake):
    assert not re.search(r"https?:|<script|<link|<img|<iframe|@import|url\(|src=", lake.page, re.I)


def test_status_lists_the_last_batches_with_their_quality_gate(lake):
    code, out, err = lake.text
    assert code == 0 and not err, err  # nothing from the JVM
    lines = [line for line in out if re.match(r"\s+\d+\s+2026-", line)]
    assert [line.split()[0] for line in lines] == ["2", "3"]
    for line in lines:  # a batch with rows was audited, and passed; one without had nothing to audit
        if line.split()[1] in lake.audited:
            assert re.search(r"passed (\d+)/\1$", line), line
        else:
            assert line.endswith("no rows to audit"), line


def test_status_json_has_the_metrics_as_recorded_and_the_units(lake):
    code, out, _ = lake.json
    alerts = {p["name"]: p for p in json.loads("\n".join(out))["pipelines"]}["user_alerts"]
    assert alerts["last_batch"]["seq"] == 3 and alerts["batch_count"] == 3
    assert [b["seq"] for b in alerts["batches"]] == [1, 2, 3]
    for got, row in zip(alerts["batches"], lake.metrics):
        assert got["records_in"] == row["records_in"] and got["batch_duration_ms"] == row["batch_duration_ms"]
        assert (got["gate"] is not None) == (row["batch_id"] in lake.audited)
    assert alerts["units"]["batch_duration_ms"] == "ms"
