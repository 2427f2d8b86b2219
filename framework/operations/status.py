"""What an operator asks first: where is this pipeline, is it healthy, and what did its last batches do?

``read`` gathers one pipeline's status (``PipelineStatus``) from what the framework keeps: the
ledger and metrics through ``storage.bookkeeping``, each batch's quality-gate audit from
``<warehouse>/quality_results``, and the last validation of the results table from the outcome
the job left for Airflow (``outcome``). ``finalresults status`` prints it (``text``) or writes it
as JSON (``PipelineStatus.to_json``); the status page draws it (``statuspage``); and each job
leaves it beside its gate outcome (``save``), where the Airflow plugin reads it without Spark.

Metric values are formatted once, here (``shown``), so the text, the JSON's units and the
charts' captions agree.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import asdict, dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any

from ..definition.names import GATE
from ..definition.pipeline import Pipeline
from ..execution.streamtime import to_datetime
from ..storage import versions
from ..storage.tables import Tables
from . import outcome

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from .attempt import BatchResult

#: The unit of each metric that has one; the others are counts.
UNITS = {
    "record_lateness_avg": "ms",
    "record_lateness_max": "ms",
    "batch_duration_ms": "ms",
    "suppression_buffer_size_current": "bytes",
    "suppression_buffer_size_max": "bytes",
}
KEPT = 500  # batches a status keeps: the most recent ones (what the status page charts)
QUALITY_RESULTS = "quality_results"  # the warehouse's table of expectation results (operations.quality)
SNAPSHOT = "status.json"  # a job's status, left beside its gate outcome for the Airflow plugin
# the metrics a status totals over all batches
SUMMED = ("records_in", "suppression_emit_total", "rows_published", "late_records")


def scale(unit: str, value: float) -> tuple[int, str]:
    """How many ``unit`` make one of the unit ``value`` reads best in: ms as s from 2 s and as
    min from 2 min, bytes as KiB and MiB likewise; (1, ``unit``) otherwise."""
    steps = {"ms": ((60_000, "min"), (1000, "s")), "bytes": ((1 << 20, "MiB"), (1 << 10, "KiB"))}
    for per, name in steps.get(unit, ()):
        if abs(value) >= 2 * per:
            return per, name
    return 1, unit


def shown(column: str, value: int | float | dt.datetime | None) -> str:
    """A metric's value as a person reads it, with its unit: ``69.4 s``, ``12 KiB``, ``1,204``
    (``stream-time``, a time, to the millisecond)."""
    if value is None:
        return "not recorded"
    if isinstance(value, dt.datetime):
        return _iso(value)
    unit = UNITS.get(column, "")
    per, name = scale(unit, value)
    number = f"{value:,}" if per == 1 and isinstance(value, int) else f"{value / per:,.1f}"
    return f"{number.removesuffix('.0') if per == 1 else number} {name}".rstrip()


@dataclass(frozen=True)
class Gate:
    """The quality-gate audit of one batch's rows: how many expectations passed, which failed."""

    checked: int
    failed: tuple[str, ...] = ()  # failed critical expectations, described
    warnings: tuple[str, ...] = ()  # failed warnings, described

    @property
    def passed(self) -> bool:
        return not self.failed

    def describe(self) -> str:
        """``passed 9/9``, ``passed 8/9 (1 warning)`` or ``FAILED: <expectation>: <observed>; ...``"""
        if self.failed:
            return "FAILED: " + "; ".join(self.failed)
        warned = f" ({len(self.warnings)} warning{'s' * (len(self.warnings) != 1)})" if self.warnings else ""
        return f"passed {self.checked - len(self.warnings)}/{self.checked}{warned}"


@dataclass(frozen=True)
class PipelineStatus:
    """One pipeline's status, as JSON-ready values (times in ISO, metrics as recorded).

    ``batches`` are the metrics rows of the last ``KEPT`` committed batches, oldest first, each
    with its audit under ``gate`` (None: the batch had no rows to audit). ``blocked`` is an audit
    that failed after the last commit: the batch it audited committed nothing.
    """

    name: str
    root: str
    started: bool = False  # a batch has been attempted (the pipeline has a ledger)
    last_batch: dict | None = None  # batch_id, seq, committed_at, stream_time
    unpublished: bool = False  # the last committed batch's rows are staged, not yet published
    batches: list[dict] = field(default_factory=list)
    batch_count: int = 0  # all committed batches, not only those kept
    totals: dict = field(default_factory=dict)  # records_in, suppression_emit_total, late_records over all batches
    blocked: dict | None = None  # {"batch_id": ..., "gate": Gate as a dict}
    validation: dict | None = None  # the last results-table validation (``outcome.Outcome`` as a dict)
    versions: list[str] = field(default_factory=list)  # its switches and the last comparison of versions

    def to_json(self) -> dict[str, Any]:
        """The status as ``status --json`` prints it (and the plugin reads it), units included."""
        return {**asdict(self), "units": UNITS}

    @classmethod
    def from_json(cls, values: dict[str, Any]) -> PipelineStatus:
        """A status as ``to_json`` wrote it, ignoring keys a newer version may add."""
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in values.items() if k in known})


def table_paths(p: Pipeline, warehouse: str) -> list[tuple[str, str]]:
    """(label, path) of each Delta table of ``p`` under ``warehouse``, as the runtime lays them out."""
    t = Tables(versions.root(warehouse, p.name, p.version), p.sink or "output")
    return [("results", t.output), ("window state, ledger, metrics, late records", t.state)]


def _iso(value: Any) -> Any:
    return value.isoformat(sep=" ", timespec="milliseconds") if isinstance(value, dt.datetime) else value


def read(spark: SparkSession, warehouse: str, name: str) -> PipelineStatus:
    """The status of pipeline ``name`` of ``warehouse`` (of the version that is the pipeline):
    a few Spark jobs over its bookkeeping, its last ``KEPT`` batches' metrics and audits."""
    from pyspark.sql import functions as F

    from ..storage import bookkeeping, files

    switches = versions.switches(spark, warehouse, name)
    root = versions.root(warehouse, name, switches[-1].version if switches else 1)
    compared = versions.last_comparison(spark, warehouse, name)
    changes = [s.describe() for s in switches] + (compared.splitlines() if compared else [])
    if not bookkeeping.has_batches(spark, root):
        return PipelineStatus(name, root, versions=changes)
    last = bookkeeping.last_committed(spark, root)
    metrics = bookkeeping.read_metrics(spark, root) if last else None
    rows, count, totals = [], 0, {}
    if metrics is not None:
        sums_of = [F.sum(c) if c in metrics.columns else F.lit(None) for c in SUMMED]  # a legacy table: fewer
        count, *sums = metrics.agg(F.count(F.lit(1)), *sums_of).first() or (0,)
        totals = dict(zip(SUMMED, sums))
        rows = [r.asDict() for r in metrics.orderBy(F.desc("seq")).limit(KEPT).collect()][::-1]
    committed = [r["batch_id"] for r in rows]
    gates = _audits(spark, warehouse, name, committed, last.at if last else None)
    failed = [(b, g) for b, g in gates.items() if b not in committed and not g.passed]
    validation = outcome.read_in_job(spark, warehouse, name, "batch")
    return PipelineStatus(
        name,
        root,
        started=True,
        last_batch=None
        if last is None
        else {
            "batch_id": last.batch_id,
            "seq": last.seq,
            "committed_at": _iso(last.at),
            "stream_time": _iso(to_datetime(last.stream_time)) if last.stream_time is not None else None,
        },
        unpublished=last is not None
        and any(n.endswith(f"-{last.attempt}") for n in files.list_names(spark, Tables(root, "output").staging)),
        batches=[{**{k: _iso(v) for k, v in r.items()}, "gate": _as_dict(gates.get(r["batch_id"]))} for r in rows],
        batch_count=count,
        totals=totals,
        blocked={"batch_id": failed[-1][0], "gate": asdict(failed[-1][1])} if failed else None,
        validation=asdict(validation) if validation else None,
        versions=changes,
    )


def _as_dict(gate: Gate | None) -> dict | None:
    return asdict(gate) if gate else None


def _audits(
    spark: SparkSession, warehouse: str, name: str, batch_ids: list[str], since: dt.datetime | None
) -> dict[str, Gate]:
    """The latest audit of each of ``batch_ids`` and of any batch audited after ``since`` (the
    last commit; None: any time), in audit order, from ``<warehouse>/quality_results``: one Spark job."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    from ..storage import tables

    path = f"{warehouse.rstrip('/')}/{QUALITY_RESULTS}"
    if not tables.exists(spark, path):
        return {}
    wanted = F.col("batch_id").isin(batch_ids) | (F.col("validated_at") > F.lit(since) if since else F.lit(True))
    results = tables.read(spark, path).filter((F.col("pipeline") == name) & F.col("batch_id").isNotNull() & wanted)
    latest = results.withColumn("latest", F.max("validated_at").over(Window.partitionBy("batch_id")))
    found: dict[str, list] = {}
    # a chunk's audit is kept under each of its intervals at one time, its first interval last: one
    # that failed (warehouses written before failed chunk audits were redone interval by interval
    # hold such rows) blocks on the first interval, the one to run next
    newest = latest.filter(F.col("validated_at") == F.col("latest"))
    for r in newest.orderBy("validated_at", F.desc("batch_id")).collect():
        found.setdefault(r.batch_id, []).append(r)
    return {batch: _gate(checks) for batch, checks in found.items()}


def _gate(checks: list) -> Gate:
    def failed(critical: bool) -> tuple[str, ...]:
        return tuple(
            f"{c.expectation}: {c.observed}" for c in checks if not c.success and (c.severity == "critical") == critical
        )

    return Gate(checked=len(checks), failed=failed(True), warnings=failed(False))


def gate_of(values: dict | None) -> Gate | None:
    """A ``Gate`` as ``PipelineStatus`` keeps it (a dict, from JSON), or None."""
    if not values:
        return None
    return Gate(values["checked"], tuple(values["failed"]), tuple(values["warnings"]))


def text(status: PipelineStatus, last: int = 5) -> str:
    """The status as ``finalresults status`` prints it: where, the last batch, the results table's
    validation, totals, then a line per batch for the last ``last`` batches with its audit."""
    head = f"{status.name}  ({status.root})"
    if status.last_batch is None:
        lines = [head, "  no batch committed yet" if status.started else "  no batch has run yet"]
        return "\n".join(lines + _blocked_lines(status))
    b, rows = status.last_batch, status.batches
    lines = [
        head,
        f"  last batch     {b['batch_id']} (seq {b['seq']}), committed at {b['committed_at'][:19]} UTC",
        f"  stream time    {b['stream_time'] or 'none yet'}",
    ]
    if rows:
        lines.append(f"  open windows   {shown('windows_open', rows[-1]['windows_open'])}")
    if status.totals:
        t = status.totals
        lines.append(
            f"  all batches    {status.batch_count:,} batches, records in {shown('records_in', t['records_in'])}, "
            f"windows emitted {shown('suppression_emit_total', t['suppression_emit_total'])}, "
            f"rows published {shown('rows_published', t.get('rows_published'))}, "
            f"late {shown('late_records', t['late_records'])}"
        )
    if status.validation:
        lines.append(f"  results table  {_validation(status.validation)}")
    lines += [f"  {'versions' if i == 0 else '':<14} {line}" for i, line in enumerate(status.versions)]
    lines += _blocked_lines(status)
    if status.unpublished:
        lines.append(
            f"  UNPUBLISHED    batch {b['batch_id']} (seq {b['seq']}) committed; its results are staged and "
            "are published by the next run of any batch of this pipeline"
        )
    if rows and last > 0:
        lines += ["", *_table(rows[-last:])]
    return "\n".join(lines)


def _validation(v: dict) -> str:
    verdict = (
        "unchanged since a validation that passed"
        if not v["validated"]
        else "passed"
        if not v["failures"]
        else f"FAILED: {'; '.join(v['failures'])}"
    )
    run = f", Airflow run {v['run_id']}" if v.get("run_id") else ""
    docs = f" (Data Docs: {v['docs']})" if v.get("docs") else ""
    return f"validated after {v['kind']} {v['batch_id']}{run}: {verdict}{docs}"


def _blocked_lines(status: PipelineStatus) -> list[str]:
    if not status.blocked:
        return []
    gate = gate_of(status.blocked["gate"])
    assert gate is not None
    return [f"  BLOCKED        batch {status.blocked['batch_id']}: quality gate {gate.describe()}; nothing committed"]


#: (heading, metrics column) of the per-batch lines of ``status``
COLUMNS = [
    ("records in", "records_in"),
    ("windows emitted", "suppression_emit_total"),
    ("rows published", "rows_published"),
    ("late", "late_records"),
    ("dropped", "late_record_drop_total"),
    ("lateness max", "record_lateness_max"),
    ("duration", "batch_duration_ms"),
]


def _table(rows: list[dict]) -> list[str]:
    """Aligned lines, one per batch: seq, batch id, stream time, a few metrics, the audit."""
    cells = [
        [
            str(r["seq"]),
            r["batch_id"],
            (r["stream_time"] or "")[:19],
            *(shown(c, r.get(c)) if r.get(c) is not None else "–" for _, c in COLUMNS),
            g.describe() if (g := gate_of(r["gate"])) else "no rows to audit",
        ]
        for r in rows
    ]
    heading = ["seq", "batch", "stream time", *(h for h, _ in COLUMNS), "quality gate"]
    widths = [max(len(row[i]) for row in [heading, *cells]) for i in range(len(heading))]
    left = {1, 2, len(heading) - 1}  # text columns; numbers align right

    def line(row: list[str]) -> str:
        return "  " + "  ".join(v.ljust(w) if i in left else v.rjust(w) for i, (v, w) in enumerate(zip(row, widths)))

    return [line(heading).rstrip(), *(line(row).rstrip() for row in cells)]


def snapshot_location(warehouse: str, name: str) -> str:
    """Where a job leaves its pipeline's status for the Airflow plugin: beside its gate outcome."""
    return f"{warehouse.rstrip('/')}/{name}/{GATE}/{SNAPSHOT}"


def _metrics_row(name: str, ran: BatchResult) -> dict:
    """The metrics row ``bookkeeping.read_metrics`` gives for the batch ``ran`` committed, from
    the values the run holds (each as its column's type reads it)."""
    from ..storage import metrics

    cast = {"long": int, "double": float}
    values = {**ran.metrics, "stream_time": ran.stream_time}
    row = {
        c: (values.get(c) if kind not in cast or values.get(c) is None else cast[kind](values[c]))
        for c, kind in metrics.COLUMNS
    }
    return {"pipeline": name, "batch_id": ran.batch_id, "seq": ran.seq, **row}


def _advanced(previous: PipelineStatus, validation: outcome.Outcome | None, ran: BatchResult) -> PipelineStatus | None:
    """The status after batch ``ran``, from the status the job before it left (``previous``)
    and what this run holds (its ledger row's values, its audit, the validation it left), with
    no table read: what ``read`` finds then, as long as ``previous`` ends at the batch before
    and nothing was blocked or left unpublished. None otherwise: then read it."""
    last = previous.last_batch
    if ran.status != "committed" or last is None or last["seq"] != ran.seq - 1 or previous.blocked:
        return None
    if previous.unpublished or ran.committed_at is None:
        return None
    row = _metrics_row(previous.name, ran)
    totals = {
        k: (previous.totals.get(k) or 0) + row[k] if row[k] is not None else previous.totals.get(k) for k in SUMMED
    }
    gate = _gate(list(ran.audit.report.checks)) if ran.audit is not None else None  # as read back
    return replace(
        previous,
        last_batch={
            "batch_id": ran.batch_id,
            "seq": ran.seq,
            "committed_at": _iso(ran.committed_at),
            "stream_time": _iso(ran.stream_time),
        },
        batches=[*previous.batches, {**{k: _iso(v) for k, v in row.items()}, "gate": _as_dict(gate)}][-KEPT:],
        batch_count=previous.batch_count + 1,
        totals=totals,
        validation=asdict(validation) if validation else None,
    )


def save(spark: SparkSession, warehouse: str, name: str, ran: BatchResult | None = None) -> PipelineStatus:
    """Leave the status of ``name`` at ``snapshot_location`` (through Hadoop, as jobs write); a
    pipeline that never attempted a batch (a run refused before writing) gets no file. After a
    batch this run committed (``ran``), the status is the one the last job left, advanced by
    what this run holds (``_advanced``: its cost does not grow with the pipeline's history);
    otherwise it is read."""
    from ..storage import files

    status = None
    if ran is not None and (left := files.get_text(spark, snapshot_location(warehouse, name))) is not None:
        previous = PipelineStatus.from_json(json.loads(left))
        status = _advanced(previous, outcome.read_in_job(spark, warehouse, name, "batch"), ran)
    status = status or read(spark, warehouse, name)
    if status.started:
        files.put_text(spark, snapshot_location(warehouse, name), json.dumps(status.to_json(), default=str))
    return status


def saved_at(warehouse: str, name: str) -> dt.datetime | None:
    """When the status at ``snapshot_location`` was left (UTC), read without Spark; None if none."""
    from pyarrow import fs

    files, path = outcome.filesystem(snapshot_location(warehouse, name))
    info = files.get_file_info(path)
    if info.type == fs.FileType.NotFound or info.mtime is None:
        return None
    return info.mtime.astimezone(dt.timezone.utc)


def load(warehouse: str, name: str) -> PipelineStatus | None:
    """The status the last job of ``name`` left, read without Spark (``outcome.read_text``); None if none."""
    found = outcome.read_text(snapshot_location(warehouse, name))
    return None if found is None else PipelineStatus.from_json(json.loads(found))
