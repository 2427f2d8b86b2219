"""``finalresults status --html``: the status of a warehouse's pipelines as one HTML page with charts.

The page stands alone (inline CSS and SVG drawn here: no script, no font, no fetch), so it can be
mailed, archived or served as a static file. It reads what ``status`` reads, by path: the ledger
and the metrics table (``framework.storage.metrics``), one chart point per batch.
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass
from html import escape
from typing import TYPE_CHECKING

from ..storage import bookkeeping
from ..storage.metrics import KIP_NAMES
from .status import pipeline_status

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

LAST = 500  # batches charted per pipeline: the most recent ones
#: (chart, metrics columns drawn in it, their unit: none for counts)
CHARTS: list[tuple[str, tuple[str, ...], str]] = [
    ("records in", ("records_in", "rejected_records_total"), ""),
    ("emitted", ("suppression_emit_total",), ""),
    ("late", ("late_record_drop_total", "late_records"), ""),
    ("lateness", ("record_lateness_avg", "record_lateness_max"), "ms"),
    ("windows", ("windows_open", "windows_closed"), ""),
    ("buffer entries", ("suppression_buffer_count_current", "suppression_buffer_count_max"), ""),
    ("buffer bytes", ("suppression_buffer_size_current", "suppression_buffer_size_max"), "bytes"),
    ("batch duration", ("batch_duration_ms",), "ms"),
]
SERIES = (("#2563eb", "none"), ("#ea580c", "5 3"))  # colour and dashes of a chart's first and second line
W, H, LEFT, RIGHT, TOP, BOTTOM = 360, 150, 44, 14, 12, 30  # chart size and margins, px
STYLE = """
body { font: 14px/1.4 system-ui, sans-serif; color: #222; margin: 24px auto; max-width: 1160px; padding: 0 16px; }
h1 { font-size: 22px; margin: 0 0 4px; } h2 { font-size: 18px; margin: 28px 0 6px; }
.meta, .note { color: #666; margin: 4px 0; }
pre.status { background: #f6f6f4; border: 1px solid #e2e2dc; border-radius: 6px; padding: 8px 12px;
             font-size: 12.5px; overflow-x: auto; margin: 6px 0 10px; }
.charts { display: grid; grid-template-columns: repeat(auto-fill, minmax(370px, 1fr)); gap: 10px; }
figure.chart { margin: 0; border: 1px solid #e2e2dc; border-radius: 6px; padding: 6px 6px 0; }
figcaption { font-size: 12.5px; } figcaption span { white-space: nowrap; }
figcaption b { font-variant-numeric: tabular-nums; }
svg text { font: 10px system-ui, sans-serif; fill: #666; }
"""


@dataclass(frozen=True)
class PipelineState:
    """What the page shows of one pipeline: ``status``'s text and its metrics rows by seq."""

    name: str
    status: str
    metrics: list[dict]


def read(spark: SparkSession, name: str, root: str) -> PipelineState:
    """Pipeline ``name`` stored at ``root``: its status text and metrics rows (oldest first)."""
    metrics = bookkeeping.read_metrics(spark, root)
    rows = metrics.orderBy("seq").collect() if metrics is not None else []
    return PipelineState(name, pipeline_status(spark, name, root), [r.asDict() for r in rows])


def page(warehouse: str, pipelines: list[PipelineState], now: dt.datetime | None = None) -> str:
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
    return "\n".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en"><head><meta charset="utf-8"/>',
            f"<title>finalresults status: {escape(warehouse)}</title><style>{STYLE}</style></head><body>",
            "<h1>finalresults status</h1>",
            f'<p class="meta">Warehouse <code>{escape(warehouse)}</code>, {count}, '
            f"generated {now:%Y-%m-%d %H:%M:%S} UTC.</p>",
            contents,
            *(section(p, f"pipeline-{i}") for i, p in enumerate(pipelines, 1)),
            "</body></html>",
            "",
        ]
    )


def section(p: PipelineState, anchor: str) -> str:
    """One pipeline: its status text and a chart per metric group (of its last ``LAST`` batches)."""
    head = (
        f'<section class="pipeline" id="{anchor}" data-pipeline="{escape(p.name)}">'
        f'<h2>{escape(p.name)}</h2>\n<pre class="status">{escape(p.status)}</pre>'
    )
    if not p.metrics:
        return f'{head}\n<p class="note">No batch has published metrics yet: nothing to chart.</p></section>'
    rows = p.metrics[-LAST:]
    recorded = [c for c in KIP_NAMES if any(r.get(c) is not None for r in rows)]
    missing = [KIP_NAMES[c] for _, columns, _ in CHARTS for c in columns if c not in recorded]
    charts = [
        chart(title, [c for c in columns if c in recorded], unit, rows)
        for title, columns, unit in CHARTS
        if any(c in recorded for c in columns)
    ]
    return "\n".join(
        filter(
            None,
            [
                head,
                f'<p class="note">Charts: the last {len(rows):,} of {len(p.metrics):,} batches.</p>'
                if len(rows) < len(p.metrics)
                else "",
                f'<p class="note">Not recorded by this pipeline: {", ".join(missing)}.</p>' if missing else "",
                '<div class="charts">',
                *charts,
                "</div></section>",
            ],
        )
    )


def chart(title: str, columns: list[str], unit: str, rows: list[dict]) -> str:
    """An SVG line chart of ``columns`` over batches (x = seq), captioned with each metric's last value.

    Every point is a circle whose tooltip names its batch and value; null values are not drawn.
    Durations over a few seconds are shown in s or min, on the whole chart."""
    seqs = [r["seq"] for r in rows]
    highest = max((r[c] for r in rows for c in columns if r[c] is not None), default=0)
    per, unit = _scale(unit, highest)
    top = _nice(highest / per)
    span = max(seqs[-1] - seqs[0], 1)

    def x(seq: int) -> float:
        return LEFT + (W - LEFT - RIGHT) * ((seq - seqs[0]) / span if len(seqs) > 1 else 0.5)

    def y(value: float) -> float:
        return TOP + (H - TOP - BOTTOM) * (1 - value / per / top)

    def shown(value: int | float | None) -> str:
        return "–" if value is None else f"{_number(value if per == 1 else value / per)} {unit}".rstrip()

    caption, series = [], []
    for (color, dashes), c in zip(SERIES, columns):
        line = f'stroke="{color}" stroke-width="1.5" stroke-dasharray="{dashes}"'
        caption.append(
            f'<span style="color:{color}"><svg width="18" height="8"><line x1="0" y1="4" x2="18" y2="4" '
            f"{line}/></svg> {KIP_NAMES[c]} <b>{shown(rows[-1][c])}</b></span>"
        )
        points = [(x(r["seq"]), y(r[c]), r) for r in rows if r[c] is not None]
        dots = "".join(
            f'<circle cx="{px:.1f}" cy="{py:.1f}" r="2.5"><title>seq {r["seq"]} · '
            f"{escape(str(r['batch_id']))} · {shown(r[c])}</title></circle>"
            for px, py, r in points
        )
        series.append(
            f'<g class="series" data-metric="{KIP_NAMES[c]}" fill="{color}"><polyline fill="none" {line} '
            f'points="{" ".join(f"{px:.1f},{py:.1f}" for px, py, _ in points)}"/>{dots}</g>'
        )
    bottom = H - BOTTOM
    ticks = [(x(seqs[0]), seqs[0])] + ([(x(seqs[-1]), seqs[-1])] if len(seqs) > 1 else [])
    axes = (
        f'<line x1="{LEFT}" y1="{TOP}" x2="{W - RIGHT}" y2="{TOP}" stroke="#eee"/>'
        f'<line x1="{LEFT}" y1="{bottom}" x2="{W - RIGHT}" y2="{bottom}" stroke="#bbb"/>'
        f'<text x="{LEFT - 4}" y="{TOP + 3}" text-anchor="end">{_short(top)}</text>'
        + (f'<text x="{LEFT - 4}" y="{TOP + 14}" text-anchor="end">{unit}</text>' if unit else "")
        + f'<text x="{LEFT - 4}" y="{bottom + 3}" text-anchor="end">0</text>'
        + "".join(f'<text x="{tx:.1f}" y="{bottom + 13}" text-anchor="middle">{seq}</text>' for tx, seq in ticks)
        + f'<text x="{(LEFT + W - RIGHT) / 2:.1f}" y="{H - 4}" text-anchor="middle">batch seq</text>'
    )
    return (
        f'<figure class="chart" data-chart="{title}"><figcaption>{" · ".join(caption)}</figcaption>'
        f'<svg width="{W}" height="{H}" viewBox="0 0 {W} {H}" role="img" aria-label="{title}">'
        f"{axes}{''.join(series)}</svg></figure>"
    )


def _scale(unit: str, highest: float) -> tuple[int, str]:
    """How many ``unit`` make one of the unit the chart shows: long durations in s or min."""
    if unit == "ms":
        for per, name in ((60_000, "min"), (1000, "s")):
            if highest >= 2 * per:
                return per, name
    return 1, unit


def _nice(value: float) -> float:
    """The smallest 1, 2 or 5 times a power of ten at or above ``value`` (1 for nothing to draw)."""
    if value <= 0:
        return 1
    power = 10 ** math.floor(math.log10(value))
    return next(m * power for m in (1, 2, 5, 10) if value <= m * power)


def _short(value: float) -> str:
    for size, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if value >= size:
            return f"{value / size:g}{suffix}"
    return f"{value:g}"


def _number(value: int | float | None) -> str:
    return "–" if value is None else f"{value:,}" if isinstance(value, int) else f"{value:,.1f}"
