"""The status of pipelines as HTML: ``finalresults status --html`` and the Airflow plugin's page.

A page stands alone (inline CSS and SVG drawn here: no script, no font, no fetch), so it can be
mailed, archived, served as a static file or embedded in Airflow's UI. Every value it writes is
escaped (pipeline and batch ids, gate and error text, paths come from warehouses and URLs), and
its ``POLICY`` (a Content-Security-Policy, in the page and sent by the plugin) lets it apply its
own style block and nothing else: no script runs in it, whatever a value held. It draws a
``status.PipelineStatus`` (no Spark here): the status lines, a row per recent batch with its
quality-gate audit, and a chart per metric group over event time (the batch's stream time).
Links (a batch's Airflow run, its Data Docs page) are given by the caller as ``Links``: the
static page links Data Docs on disk, the plugin links pages it serves.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from html import escape
from pathlib import Path
from urllib.parse import quote

from ..storage.metrics import KIP_NAMES
from .datadocs import Page, Site
from .status import COLUMNS, UNITS, PipelineStatus, gate_of, scale, shown, text

ROWS = 20  # batches listed in a pipeline's table: the most recent ones (the charts show all kept)
#: (chart, metrics columns drawn in it)
CHARTS: list[tuple[str, tuple[str, ...]]] = [
    ("records in", ("records_in", "rejected_records_total")),
    ("emitted and published", ("suppression_emit_total", "rows_published")),
    ("late", ("late_record_drop_total", "late_records")),
    ("lateness", ("record_lateness_avg", "record_lateness_max")),
    ("windows", ("windows_open", "windows_closed")),
    ("buffer entries", ("suppression_buffer_count_current", "suppression_buffer_count_max")),
    ("buffer bytes", ("suppression_buffer_size_current", "suppression_buffer_size_max")),
    ("batch duration", ("batch_duration_ms",)),
]
SERIES = (("#2563eb", "none"), ("#ea580c", "5 3"))  # colour and dashes of a chart's first and second line
W, H, LEFT, RIGHT, TOP, BOTTOM = 360, 166, 44, 14, 18, 34  # chart size and margins, px
STYLE = """
body { font: 14px/1.4 system-ui, sans-serif; color: #222; margin: 24px auto; max-width: 1160px; padding: 0 16px; }
h1 { font-size: 22px; margin: 0 0 4px; } h2 { font-size: 18px; margin: 28px 0 6px; }
.meta, .note { color: #666; margin: 4px 0; }
pre.status { background: #f6f6f4; border: 1px solid #e2e2dc; border-radius: 6px; padding: 8px 12px;
             font-size: 12.5px; overflow-x: auto; margin: 6px 0 10px; }
table.batches { border-collapse: collapse; font-size: 12.5px; margin: 6px 0 12px; }
table.batches th, table.batches td { padding: 2px 8px; border-bottom: 1px solid #eee; text-align: right; }
table.batches th { color: #666; font-weight: 600; }
table.batches td.text, table.batches th.text { text-align: left; }
td.passed { color: #15803d; } td.failed { color: #b91c1c; font-weight: 600; } td.none { color: #888; }
.charts { display: grid; grid-template-columns: repeat(auto-fill, minmax(370px, 1fr)); gap: 10px; }
figure.chart { margin: 0; border: 1px solid #e2e2dc; border-radius: 6px; padding: 6px 6px 0; }
figcaption { font-size: 12.5px; } figcaption span { white-space: nowrap; }
figcaption b { font-variant-numeric: tabular-nums; }
svg text { font: 10px system-ui, sans-serif; fill: #666; }
"""
# a caption's colour, as a class (the policy allows no style attribute)
STYLE += "".join(f".series-{i} {{ color: {color}; }}\n" for i, (color, _) in enumerate(SERIES))
#: The page's Content-Security-Policy: its own style block (by hash), no script, no other fetch.
POLICY = (
    "default-src 'none'; "
    f"style-src 'sha256-{base64.b64encode(hashlib.sha256(STYLE.encode()).digest()).decode()}'; "
    "base-uri 'none'; form-action 'none'"
)


@dataclass(frozen=True)
class Links:
    """Where a pipeline's section links: the Data Docs folder's URL (ending in ``/``; None: no
    Data Docs), its pages per suite (= pipeline) and batch id (paths under that folder;
    ``docs_pages``), and each batch's Airflow run."""

    docs: str | None = None
    docs_pages: dict[tuple[str, str], str] = field(default_factory=dict)
    runs: dict[str, str] = field(default_factory=dict)


def docs_pages(pages: Iterable[Page]) -> dict[tuple[str, str], str]:
    """The newest validation page of each suite and batch id (run name), as paths under the Data
    Docs folder. By suite too: pipelines of one warehouse share the folder and, scheduled alike,
    their batch ids."""
    newest: dict[tuple[str, str], Page] = {}
    for page in pages:
        key = (page.suite, page.run_name)
        if key not in newest or newest[key].run_time < page.run_time:
            newest[key] = page
    return {key: page.path for key, page in newest.items()}


def local_links(warehouse: str) -> Links:
    """The static page's links: Data Docs pages on disk (a warehouse on local disk only)."""
    data_docs = Path(warehouse) / "data_docs"
    if not (data_docs / "index.html").is_file():
        return Links()
    return Links(docs=data_docs.resolve().as_uri() + "/", docs_pages=docs_pages(Site(warehouse).pages()))


def docs_index(pipeline: str, pages: list[Page]) -> str:
    """A pipeline's Data Docs index: a row per validation page of its suite, newest first, linked
    relative to the Data Docs folder. GX's own index lists every pipeline of the warehouse."""
    rows = "".join(
        f'<tr><td class="text"><a href="{escape(quote(p.path))}">{escape(p.run_name)}</a></td>'
        f'<td class="text">{escape(p.run_time)}</td></tr>'
        for p in reversed(pages)
    )
    return document(
        f"Data Docs: {pipeline}",
        [
            f"<h1>Data Docs: {escape(pipeline)}</h1>",
            f'<p class="meta">Great Expectations validations of <code>{escape(pipeline)}</code>, newest first.</p>'
            if pages
            else '<p class="note">No validation yet.</p>',
            '<table class="batches"><thead><tr><th class="text">batch</th><th class="text">validated at (UTC)</th>'
            f"</tr></thead><tbody>{rows}</tbody></table>",
        ],
    )


def page(
    warehouse: str, pipelines: list[PipelineStatus], links: Links | None = None, now: dt.datetime | None = None
) -> str:
    """The whole page: a heading, then a section per pipeline."""
    now = now or dt.datetime.now(dt.timezone.utc)
    count = f"{len(pipelines)} pipeline{'s' * (len(pipelines) != 1)}"
    if not pipelines:
        contents = '<p class="note">No pipelines in this warehouse.</p>'
    else:  # links to the sections
        contents = (
            '<p class="meta">'
            + " · ".join(f'<a href="#pipeline-{i}">{escape(p.name)}</a>' for i, p in enumerate(pipelines, 1))
            + "</p>"
        )
    return document(
        f"finalresults status: {warehouse}",
        [
            "<h1>finalresults status</h1>",
            f'<p class="meta">Warehouse <code>{escape(warehouse)}</code>, {count}, '
            f"generated {now:%Y-%m-%d %H:%M:%S} UTC.</p>",
            contents,
            *(section(p, f"pipeline-{i}", links or Links()) for i, p in enumerate(pipelines, 1)),
        ],
    )


def document(title: str, body: list[str]) -> str:
    """A standalone HTML document with the page's style."""
    return "\n".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en"><head><meta charset="utf-8"/>',
            f'<meta http-equiv="Content-Security-Policy" content="{POLICY}"/>',
            f"<title>{escape(title)}</title><style>{STYLE}</style></head><body>",
            *body,
            "</body></html>",
            "",
        ]
    )


def section(p: PipelineStatus, anchor: str, links: Links, problem: str | None = None) -> str:
    """One pipeline: its status lines, its recent batches with their audits, a chart per metric
    group; ``problem``, if given, says why what is shown may be incomplete."""
    docs = (
        f'<p class="meta"><a href="{escape(links.docs)}index.html">Data Docs</a> · results table '
        f"<code>{escape(p.root)}</code></p>"
        if links.docs
        else ""
    )
    head = (
        f'<section class="pipeline" id="{anchor}" data-pipeline="{escape(p.name)}">'
        f"<h2>{escape(p.name)}</h2>\n{docs}"
        + (f'<p class="note">{escape(problem)}</p>' if problem else "")
        + f'<pre class="status">{escape(text(p, last=0))}</pre>'
    )
    rows = [r for r in p.batches if r.get("stream_time")]
    if not rows:
        return f'{head}\n<p class="note">No batch has published metrics yet: nothing to chart.</p></section>'
    recorded = [c for c in KIP_NAMES if any(r.get(c) is not None for r in rows)]
    missing = [KIP_NAMES[c] for _, columns in CHARTS for c in columns if c not in recorded]
    charts = [
        chart(title, [c for c in columns if c in recorded], rows)
        for title, columns in CHARTS
        if any(c in recorded for c in columns)
    ]
    return "\n".join(
        filter(
            None,
            [
                head,
                batch_table(p.batches[-ROWS:], links, p.name),
                f'<p class="note">Charts: the last {len(rows):,} of {p.batch_count:,} batches, '
                "over their stream time (event time, UTC).</p>",
                f'<p class="note">Not recorded by this pipeline: {", ".join(missing)}.</p>' if missing else "",
                '<div class="charts">',
                *charts,
                "</div></section>",
            ],
        )
    )


def batch_table(rows: list[dict], links: Links, suite: str) -> str:
    """A row per batch of pipeline ``suite``, newest first: its run, stream time, a few metrics
    and its quality-gate audit, linked to its Data Docs page."""

    def linked(label: str, url: str | None) -> str:
        return f'<a href="{escape(url)}">{escape(label)}</a>' if url else escape(label)

    body = []
    for r in reversed(rows):
        batch = r["batch_id"]
        gate = gate_of(r.get("gate"))
        verdict = gate.describe() if gate else "no rows to audit"
        kind = "none" if gate is None else "passed" if gate.passed else "failed"
        page = links.docs_pages.get((suite, batch))
        docs = links.docs + quote(page) if links.docs and page else None
        body.append(
            f'<tr data-batch="{escape(batch)}"><td>{escape(str(r["seq"]))}</td>'
            f'<td class="text">{linked(batch, links.runs.get(batch))}</td>'
            f'<td class="text">{escape((r.get("stream_time") or "")[:19])}</td>'
            + "".join(f"<td>{escape(shown(c, r.get(c)) if r.get(c) is not None else '–')}</td>" for _, c in COLUMNS)
            + f'<td class="text {kind}">{linked(verdict, docs)}</td></tr>'
        )
    heading = (
        '<tr><th>seq</th><th class="text">batch</th><th class="text">stream time</th>'
        + "".join(f"<th>{h}</th>" for h, _ in COLUMNS)
        + '<th class="text">quality gate</th></tr>'
    )
    return f'<table class="batches"><thead>{heading}</thead><tbody>{"".join(body)}</tbody></table>'


def _millis(iso: str) -> float:
    return dt.datetime.fromisoformat(iso).replace(tzinfo=dt.timezone.utc).timestamp() * 1000


def chart(title: str, columns: list[str], rows: list[dict]) -> str:
    """An SVG line chart of ``columns`` over event time (x = each batch's stream time), captioned
    with each metric's last value. Every point is a circle whose tooltip names its batch and
    value; null values are not drawn. The y axis runs from 0 to just above the highest value, in
    the unit that value reads best in (``status.scale``)."""
    unit = UNITS.get(columns[0], "")
    highest = max((r[c] for r in rows for c in columns if r.get(c) is not None), default=0)
    per, unit = scale(unit, highest)
    step = _step(highest / per, whole=not unit)  # counts step by whole numbers
    top = max(step * math.ceil(highest / per / step), step)
    times = [_millis(r["stream_time"]) for r in rows]
    first, span = times[0], max(times[-1] - times[0], 1)

    def x(t: float) -> float:
        return LEFT + (W - LEFT - RIGHT) * ((t - first) / span if len(set(times)) > 1 else 0.5)

    def y(value: float) -> float:
        return TOP + (H - TOP - BOTTOM) * (1 - value / per / top)

    caption, series = [], []
    for i, ((color, dashes), c) in enumerate(zip(SERIES, columns)):
        line = f'stroke="{color}" stroke-width="1.5" stroke-dasharray="{dashes}"'
        caption.append(
            f'<span class="series-{i}"><svg width="18" height="8"><line x1="0" y1="4" x2="18" y2="4" '
            f"{line}/></svg> {KIP_NAMES[c]} <b>{escape(shown(c, rows[-1].get(c)))}</b></span>"
        )
        points = [(x(t), y(r[c]), r) for t, r in zip(times, rows) if r.get(c) is not None]
        dots = "".join(
            f'<circle cx="{px:.1f}" cy="{py:.1f}" r="2.5"><title>'
            + escape(f"seq {r['seq']} · {r['batch_id']} · {r['stream_time'][:19]} · {shown(c, r[c])}")
            + "</title></circle>"
            for px, py, r in points
        )
        series.append(
            f'<g class="series" data-metric="{KIP_NAMES[c]}" fill="{color}"><polyline fill="none" {line} '
            f'points="{" ".join(f"{px:.1f},{py:.1f}" for px, py, _ in points)}"/>{dots}</g>'
        )
    bottom = H - BOTTOM
    levels = [i * step for i in range(round(top / step) + 1)]
    ends = sorted({x(t): r["stream_time"] for t, r in zip(times, rows)}.items())
    ticks = [(*ends[0], "start"), (*ends[-1], "end")] if len(ends) > 1 else [(*ends[0], "middle")]
    axes = (
        "".join(
            f'<line x1="{LEFT}" y1="{y(v * per):.1f}" x2="{W - RIGHT}" y2="{y(v * per):.1f}" '
            f'stroke="{"#bbb" if v == 0 else "#eee"}"/>'
            f'<text x="{LEFT - 4}" y="{y(v * per) + 3:.1f}" text-anchor="end">{_short(v)}</text>'
            for v in levels
        )
        + (f'<text x="{LEFT - 4}" y="{TOP - 8}" text-anchor="end">{unit}</text>' if unit else "")
        + "".join(
            f'<text x="{tx:.1f}" y="{bottom + 13}" text-anchor="{anchor}">{escape(when[5:16])}</text>'
            for tx, when, anchor in ticks
        )
        + f'<text x="{(LEFT + W - RIGHT) / 2:.1f}" y="{H - 4}" text-anchor="middle">stream time (UTC)</text>'
    )
    return (
        f'<figure class="chart" data-chart="{title}"><figcaption>{" · ".join(caption)}</figcaption>'
        f'<svg width="{W}" height="{H}" viewBox="0 0 {W} {H}" role="img" aria-label="{title}">'
        f"{axes}{''.join(series)}</svg></figure>"
    )


def _step(highest: float, whole: bool = False) -> float:
    """A gridline step for values up to ``highest``: 1, 2, 2.5 or 5 times a power of ten, so that
    3 to 5 steps cover it (1 for nothing to draw); at least 1 if ``whole``."""
    if highest <= 0:
        return 1
    power = 10 ** math.floor(math.log10(highest / 4))
    step = next(m * power for m in (1, 2, 2.5, 5, 10) if highest / (m * power) <= 5)
    return max(step, 1) if whole else step


def _short(value: float) -> str:
    for size, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if value >= size:
            return f"{value / size:g}{suffix}"
    return f"{value:g}"
