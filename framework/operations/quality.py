"""Data quality with Great Expectations: validation against a pipeline's suite (``suites``)
and write-audit-publish.

``gate`` audits a batch's rows before they are published: a failed critical expectation raises
``QualityGateError`` and the batch writes nothing; warnings are only recorded. Every run given a
warehouse appends its results to the Delta table ``<warehouse>/quality_results`` and, for a
warehouse on local disk, writes its GX Data Docs page under ``<warehouse>/data_docs/``, which
render offline (``datadocs``; GX keeps suites and raw results in ``<warehouse>/gx/``; its file
stores reach local disks only). GX's index of them is built on demand (``document_index``).

GX is imported here and in ``suites`` only: importing it takes seconds, and DAG files must stay light.
"""

from __future__ import annotations

import datetime as dt
import functools
import hashlib
import json
import logging
import math
import os
import threading
from dataclasses import astuple, dataclass
from pathlib import Path
from urllib.parse import urlparse
from urllib.request import url2pathname

import great_expectations as gx
import pandas as pd
from great_expectations.core.run_identifier import RunIdentifier
from great_expectations.data_context.types.base import (
    DataContextConfig,
    InMemoryStoreBackendDefaults,
    ProgressBarsConfig,
)
from great_expectations.data_context.types.resource_identifiers import ExpectationSuiteIdentifier
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import DoubleType, FloatType

from ..definition.pipeline import Pipeline
from ..errors import QualityGateError
from ..storage import locks, tables
from . import datadocs
from .suites import digest, load_suite, row_by_row, suite_file

log = logging.getLogger("framework.quality")

EXAMPLES = 3
SITE = "warehouse"
#: The newest validations GX's Data Docs index lists (``document_index``). Building it loads each
#: result it lists, so no audit does (it made an audit several times slower:
#: bench/README.md#figures-behind-the-codes-choices); an operator's command does.
INDEXED = 500
#: Frames of at most this many rows are validated in memory (GX's pandas engine): a batch's
#: audit usually checks a few hundred rows, and GX's Spark engine runs a Spark job per metric
#: (seconds in a fresh process); larger frames stay in Spark (``_in_memory``).
IN_MEMORY_ROWS = 100_000
#: Expectations whose verdict depends on the engine (type names, regex dialects): a suite with
#: any of them is always validated in Spark, as ``finalresults validate`` does on large tables.
SPARK_ONLY = (
    "expect_column_values_to_be_of_type",
    "expect_column_values_to_be_in_type_list",
    "expect_column_values_to_match_regex",
    "expect_column_values_to_not_match_regex",
    "expect_column_values_to_match_regex_list",
    "expect_column_values_to_not_match_regex_list",
)
RESULT_FORMAT = {"result_format": "SUMMARY", "partial_unexpected_count": EXAMPLES, "include_unexpected_rows": True}
RESULTS_SCHEMA = (
    "suite string, pipeline string, batch_id string, expectation string, severity string, "
    "success boolean, observed string, examples string, validated_at timestamp"
)
WHOLE_TABLE = "results-table"  # the Data Docs run name of a validation of the whole table (no batch)
ORIGIN = "_origin"  # gate only: whether a validated row is staged or already published
NAN = "_finalresults_nan"  # _in_memory only: whether a row holds a NaN
_GX_LOCK = threading.Lock()  # a GX context is not thread-safe; pipelines may run in threads


@dataclass(frozen=True)
class Check:
    """The outcome of one expectation."""

    expectation: str  # type and arguments, e.g. expect_column_values_to_not_be_null(column=user_id)
    severity: str  # "critical" | "warning"
    success: bool
    observed: str  # e.g. "2 of 40 rows unexpected", an observed value, or the error
    examples: tuple[dict, ...]  # a few offending rows

    def describe(self) -> str:
        rows = "; ".join(json.dumps(r, default=str) for r in self.examples)
        return f"{self.expectation}: {self.observed}" + (f", e.g. {rows}" if rows else "")


@dataclass(frozen=True)
class Report:
    """What a validation found; ``success`` is False iff a critical expectation failed."""

    suite: str
    batch_id: str | None
    checks: tuple[Check, ...]
    validated_at: dt.datetime
    docs: str | None = None  # URL of the Data Docs page of this validation
    digest: str | None = None  # the suite's fingerprint (``suites.digest``)
    run_name: str = WHOLE_TABLE  # a validation of the results table (no batch): which rows, as Data Docs names it
    batches: tuple[str, ...] = ()  # the batches whose audit this is, where not batch_id alone (a chunk's)

    @property
    def success(self) -> bool:
        return not self.failed_critical

    @property
    def failed_critical(self) -> tuple[Check, ...]:
        return tuple(c for c in self.checks if not c.success and c.severity == "critical")

    @property
    def failed_warnings(self) -> tuple[Check, ...]:
        return tuple(c for c in self.checks if not c.success and c.severity == "warning")

    def summary(self) -> str:
        failed = [c for c in self.checks if not c.success]
        if self.batch_id:
            what = f"batch {self.batch_id!r}"
        elif self.run_name == WHOLE_TABLE:
            what = "the whole results table"
        else:  # ``validate_added``'s rows
            what = f"the results table's new rows ({self.run_name})"
        head = (
            f"suite {self.suite!r}, {what}: {len(self.checks) - len(failed)} of {len(self.checks)} expectations passed"
        )
        return "\n".join([head] + [f"  [{c.severity}] {c.describe()}" for c in failed])

    def raise_for_failures(self, what_now: str = "Fix the table before anyone downstream reads it.") -> None:
        """Raise ``QualityGateError`` listing each failed critical expectation, with ``what_now`` advice."""
        if self.success:
            return
        batch = f", batch {self.batch_id!r}" if self.batch_id else ""
        error = QualityGateError.listing(
            f"pipeline {self.suite!r}{batch}", [c.describe() for c in self.failed_critical], what_now, self.docs
        )
        error.report = self
        raise error


# ---- validation --------------------------------------------------------------------------
def _with_close_time(p: Pipeline, df: DataFrame) -> DataFrame:
    """Final results with their window's close time, by the window type's rule (docs/design.md#windows)."""
    if not p.emission.final or "window_end" not in df.columns:
        return df
    return df.withColumn("close_time", F.timestamp_millis(p.windows.close(F.unix_millis("window_end"))))


@functools.cache
def _context(root: str | None):
    """One GX context per warehouse and process (creating one takes seconds).

    Ephemeral, so that concurrent runners share no GX config file to rewrite: datasources,
    validation definitions and checkpoints live in memory, while suites and validation results
    go to files under ``<root>/gx/`` and Data Docs to ``<root>/data_docs/``, from which every
    runner's results are listed. Without a warehouse nothing is kept.
    """
    logging.getLogger("great_expectations").setLevel(logging.ERROR)
    stores = InMemoryStoreBackendDefaults()
    sites = {}
    if root is not None:
        for name, folder in (
            (stores.expectations_store_name, "expectations"),
            (stores.validation_results_store_name, "validations"),
        ):
            stores.stores[name]["store_backend"] = {
                "class_name": "TupleFilesystemStoreBackend",
                "base_directory": os.path.join(root, "gx", folder),
            }
        sites[SITE] = {
            "class_name": "SiteBuilder",
            "show_how_to_buttons": False,
            "store_backend": {
                "class_name": "TupleFilesystemStoreBackend",
                "base_directory": os.path.join(root, "data_docs"),
            },
            "site_index_builder": {"class_name": "DefaultSiteIndexBuilder", "validation_results_limit": INDEXED},
        }
    config = DataContextConfig(
        store_backend_defaults=stores,
        data_docs_sites=sites,
        analytics_enabled=False,
        progress_bars=ProgressBarsConfig(globally=False),
    )
    return gx.get_context(mode="ephemeral", project_config=config)


def _checkpoint(context, suite: gx.ExpectationSuite, engine: str):
    """A checkpoint validating a whole DataFrame of ``engine`` (``spark`` or ``pandas``) against
    ``suite``, saved in ``context``. It builds no Data Docs: ``_document`` does, once the result
    names what was validated."""
    source = context.data_sources.all().get(engine) or getattr(context.data_sources, f"add_{engine}")(engine)
    try:
        asset = source.get_asset(suite.name)
    except LookupError:
        asset = source.add_dataframe_asset(suite.name)
    try:
        batches = asset.get_batch_definition("whole")
    except KeyError:
        batches = asset.add_batch_definition_whole_dataframe("whole")
    suite = context.suites.add_or_update(suite)
    definition = context.validation_definitions.add_or_update(
        gx.ValidationDefinition(name=f"{suite.name}.{engine}", data=batches, suite=suite)
    )
    return context.checkpoints.add_or_update(
        gx.Checkpoint(name=f"{suite.name}.{engine}", validation_definitions=[definition], result_format=RESULT_FORMAT)
    )


def _document(context, identifier, result, p: Pipeline, batch: str, data_docs: Path) -> str | None:
    """Data Docs for one stored validation result, its page and its suite's, made offline in
    ``data_docs``; the URL of its page.

    GX describes a DataFrame it validated as ``<DATAFRAME>`` of no asset (its page read "Data
    asset: None"), so the stored result first gets the names a reader knows: the results table
    (``<pipeline>/<table>``) and the batch (or the rows of the table validated).
    """
    result.meta["batch_spec"] = {"data_asset_name": f"{p.name}/{p.sink}", "batch": batch}
    result.meta["batch_parameters"] = {"batch": batch}
    context.validation_results_store.set(identifier, result)
    written = [identifier, ExpectationSuiteIdentifier(name=result.suite_name)]
    context.build_data_docs(
        site_names=[SITE],
        resource_identifiers=written,
        build_index=False,  # its cost grows with the results it lists: ``document_index`` builds it
    )
    page, suite_page = (
        [u["site_url"] for u in context.get_docs_sites_urls(resource_identifier=r, site_name=SITE)] for r in written
    )
    # GX's URLs escape a run name's special characters (the ``:`` of a time)
    datadocs.make_offline(data_docs, [Path(url2pathname(urlparse(u).path)) for u in page + suite_page])
    return page[0] if page else None


def document_index(warehouse_root: str) -> Path | None:
    """Build GX's Data Docs index of a warehouse on local disk (``<root>/data_docs/index.html``,
    the newest ``INDEXED`` validations of every pipeline) and return its path; None if the
    warehouse has no Data Docs (none yet, or it is not on local disk). Audits write their own
    pages only, so the index is built where a person opens it: ``finalresults status --html``
    links it, the demo prints it."""
    root = locks.local_path(warehouse_root)
    data_docs = Path(root or "", "data_docs")
    if root is None or not data_docs.is_dir():
        return None
    with _GX_LOCK:
        context = _context(root)
        # GX builds the pages of the resources named (none here: no suite has an empty name) and the index
        context.build_data_docs(site_names=[SITE], resource_identifiers=[ExpectationSuiteIdentifier(name="")])
    index = data_docs / "index.html"
    datadocs.make_offline(data_docs, [index])
    return index


def _number(value):
    """GX stores bounds as floats; show ``10`` as it was written, not ``10.0``."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def _plain(value):
    """An example row's value as JSON shows it, whichever engine found it."""
    if value is pd.NaT or (isinstance(value, float) and math.isnan(value)):  # the pandas engine's nulls
        return None
    if hasattr(value, "tolist"):  # the pandas engine's numpy arrays and scalars
        return value.tolist()
    if isinstance(value, dt.datetime):
        return value.isoformat(sep=" ")
    return value.isoformat() if isinstance(value, dt.date) else value


def _error(info: dict) -> str | None:
    """GX reports an error as one exception info, or as one per metric that failed to compute."""
    infos = [info] if "raised_exception" in info else list(info.values())
    messages = {i.get("exception_message") for i in infos if isinstance(i, dict) and i.get("raised_exception")}
    return "; ".join(sorted(m for m in messages if m)) or None


def _check(r) -> Check:
    config, result = r.expectation_config, r.result or {}
    arguments = {k: v for k, v in config.kwargs.items() if k not in ("batch_id", "result_format") and v is not None}
    label = f"{config.type}({', '.join(f'{k}={_number(v)}' for k, v in arguments.items())})"
    error = _error(r.exception_info or {})
    if error:
        observed = f"error: {error}"
    elif "observed_value" in result:
        observed = f"observed {result['observed_value']}"
    else:
        observed = f"{result.get('unexpected_count', 0)} of {result.get('element_count', 0)} rows unexpected"
    rows = result.get("unexpected_rows")
    if hasattr(rows, "to_dict"):  # the pandas engine's: a DataFrame
        rows = rows.to_dict("records")
    rows = rows or [{"value": v} for v in result.get("partial_unexpected_list") or []]
    examples = tuple({k: _plain(v) for k, v in dict(row).items()} for row in rows[:EXAMPLES])
    return Check(label, (config.meta or {}).get("severity", "critical"), bool(r.success), observed, examples)


def _persist(spark: SparkSession, pipeline: Pipeline, report: Report, root: str) -> None:
    """Append one row per expectation and batch (``report.batches``, else its batch) to
    ``<root>/quality_results``, once: the append carries a Delta transaction id of its own
    (``_append_id``), which Delta skips when that id committed already. So a retried gate, or a
    retry after a commit that landed although its answer said it failed (an S3 PUT's late
    landing), does not append the same findings twice."""
    rows = [
        (
            report.suite,
            pipeline.name,
            batch_id,
            c.expectation,
            c.severity,
            c.success,
            c.observed,
            json.dumps(list(c.examples), default=str),
            report.validated_at,
        )
        for batch_id in report.batches or (report.batch_id,)
        for c in report.checks
    ]
    path = os.path.join(root, "quality_results")
    with locks.committing(path):  # every pipeline of the warehouse appends here
        frame = spark.createDataFrame(rows, RESULTS_SCHEMA)
        once = {"txnAppId": _append_id(pipeline, report), "txnVersion": "0"}
        frame.write.format("delta").mode("append").options(**tables.properties(path), **once).save(path)


def _append_id(pipeline: Pipeline, report: Report) -> str:
    """The Delta transaction id of ``report``'s rows in ``quality_results``: a batch's audit is
    named by its pipeline, batch, suite and findings (a retry that finds the same is the same
    audit); a validation of the whole table also by its time (an operator's each counts)."""
    when = None if report.batch_id else report.validated_at.isoformat()
    checks = [astuple(c) for c in report.checks]
    audit = [pipeline.name, report.batch_id, report.run_name, report.digest, checks, when, *report.batches]
    return "finalresults.quality." + hashlib.sha256(json.dumps(audit, default=str).encode()).hexdigest()[:32]


def _run(
    spark: SparkSession,
    p: Pipeline,
    df: DataFrame,
    batch_id: str | None,
    warehouse_root: str | None,
    expectations_dir: str | Path | None,
    suite: gx.ExpectationSuite | None = None,
    run_name: str = WHOLE_TABLE,
    batches: tuple[str, ...] = (),
) -> Report:
    """Validate ``df``: the rows of batch ``batch_id`` (or of ``batches``, a chunk's intervals
    that emitted rows, each kept as its audit if it passed), or (None) the results table's rows
    that ``run_name`` names; the results are kept under ``warehouse_root`` when given."""
    suite = suite or load_suite(p, expectations_dir)
    run_name = batch_id or run_name
    root = locks.local_path(warehouse_root) if warehouse_root else None  # GX's file stores reach local disks only
    now = dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)
    frame = _with_close_time(p, df)
    rows = _in_memory(frame, suite)
    data = frame.persist() if rows is None else rows  # GX's Spark engine runs a few dozen small jobs over it
    try:
        with _GX_LOCK:
            context = _context(root)
            run = _checkpoint(context, suite, "spark" if rows is None else "pandas").run(
                batch_parameters={"dataframe": data},
                run_id=RunIdentifier(run_name=run_name, run_time=now),
            )
            [(identifier, result)] = run.run_results.items()
            checks = tuple(_check(r) for r in result.results)
            # a chunk's audit that failed an expectation is not its intervals': they run again one
            # at a time (``chunk.run_chunks``), each audited and kept alone
            kept = warehouse_root is not None and (len(batches) < 2 or all(c.success for c in checks))
            docs = None
            if root and kept:
                docs = _document(context, identifier, result, p, run_name, Path(root) / "data_docs")
    finally:
        if rows is None:
            frame.unpersist()
    report = Report(suite.name, batch_id, checks, now, docs, digest(suite), run_name, batches)
    if warehouse_root and kept:
        _persist(spark, p, report, root or warehouse_root)
    log.info("%s", report.summary())
    return report


def _in_memory(frame: DataFrame, suite: gx.ExpectationSuite) -> pd.DataFrame | None:
    """The rows of a frame that GX validates alike in memory (its pandas engine), else None (its
    Spark engine): at most ``IN_MEMORY_ROWS`` rows, no NaN (pandas reads it as null, Spark as a
    number above all others) and no ``SPARK_ONLY`` expectation. One Spark job fetches at most one
    row more than that, each with whether it holds a NaN: a batch's few hundred rows are not
    cached first (over Spark Connect caching a frame plans its query in an RPC of its own)."""
    if any(e.expectation_type in SPARK_ONLY for e in suite.expectations):
        return None
    floats = [F.isnan(F.col(f.name)) for f in frame.schema.fields if isinstance(f.dataType, (DoubleType, FloatType))]
    nan = functools.reduce(lambda a, b: a | b, floats, F.lit(False))
    rows: pd.DataFrame = frame.withColumn(NAN, nan).limit(IN_MEMORY_ROWS + 1).toPandas()
    if len(rows) > IN_MEMORY_ROWS or rows[NAN].any():
        return None
    return rows.drop(columns=NAN)


def validate(
    spark: SparkSession,
    pipeline: Pipeline,
    df: DataFrame,
    batch_id: str | None = None,
    *,
    warehouse_root: str | None = None,
    expectations_dir: str | Path | None = None,
) -> Report:
    """Validate ``df`` (shaped like the pipeline's results table) against the pipeline's suite.

    With ``warehouse_root`` the results are also appended to ``<warehouse_root>/quality_results``
    and rendered to Data Docs; without, nothing is kept.
    """
    return _run(spark, pipeline.check_complete(), df, batch_id, warehouse_root, expectations_dir)


def validate_table(
    spark: SparkSession,
    pipeline: Pipeline,
    df: DataFrame,
    *,
    warehouse_root: str | None = None,
    expectations_dir: str | Path | None = None,
) -> Report:
    """Validate a whole results table on demand (``python -m framework validate``).

    Every row is checked, so duplicates anywhere in the table are found; cost is a few scans of it.
    """
    return validate(spark, pipeline, df, None, warehouse_root=warehouse_root, expectations_dir=expectations_dir)


def validate_added(
    spark: SparkSession,
    pipeline: Pipeline,
    table: DataFrame,
    added: set[str] | None,
    passed: str | None,
    run_name: str,
    *,
    warehouse_root: str | None = None,
    expectations_dir: str | Path | None = None,
) -> tuple[Report, bool]:
    """Validate the rows of results table ``table`` that sit in the data files named ``added``
    (what commits added since the table last passed the suite whose digest is ``passed``), with
    the older rows that share a key and window with them, so a duplicate the new rows make is
    found; and whether only those were validated. The whole table is validated when ``added``
    is None, the suite is not the one it passed, or it has an expectation that needs every row
    (``suites.row_by_row``). A table's validation then costs what its new rows cost, not what
    its history does."""
    p = pipeline.check_complete()
    suite = load_suite(p, expectations_dir)
    if added is None or passed != digest(suite) or not row_by_row(p, suite):
        return _run(spark, p, table, None, warehouse_root, expectations_dir, suite), False
    new = F.col("_metadata.file_name").isin(sorted(added))
    frame = table.where(new).withColumn(ORIGIN, F.lit("added"))
    frame = frame.unionByName(_published_twins(p, table.where(new), table.where(~new)), allowMissingColumns=True)
    return _run(spark, p, frame, None, warehouse_root, expectations_dir, suite, run_name), True


def _published_twins(p: Pipeline, staged: DataFrame, published: DataFrame) -> DataFrame:
    """Published rows with the key and window of a staged row. Reading only the staged rows'
    window_start range lets Delta skip the files of older windows (a table without windows
    has no such range: its rows are joined by key alone)."""
    ident = p.identity
    nearby = published
    if p.windows is not None:
        bounds = staged.agg(F.min("window_start"), F.max("window_start")).first()
        assert bounds is not None  # an aggregate without grouping has one row
        low, high = bounds
        nearby = published.filter(F.col("window_start").between(low, high))
    twins = nearby.join(staged.select(*ident).distinct(), ident, "left_semi")
    return twins.withColumn(ORIGIN, F.lit("published"))


def gate(
    spark: SparkSession,
    pipeline: Pipeline,
    staged_rows: DataFrame,
    published_table_df: DataFrame | None,
    batch_id: str,
    warehouse_root: str,
    *,
    expectations_dir: str | Path | None = None,
    batches: tuple[str, ...] = (),
) -> Report:
    """Write-audit-publish: audit a batch's rows before they are appended to the results table
    (a chunk's rows: the audit of each of ``batches``, its intervals that emitted rows).

    For a final-results table the validated rows are the staged rows plus the published rows that
    share a key and window with them, so a window emitted by an earlier batch and again now fails
    uniqueness. Since the gate kept the published table unique, this finds every duplicate the
    append would create, while reading only the published rows it could collide with. A
    rate-limited log repeats keys by design, and other tables are updated by MERGE, where a
    repeated key is an update: only the staged rows are validated.

    Raises ``QualityGateError`` listing each failed critical expectation with offending rows;
    failed warnings are only recorded. A batch with no rows has nothing to audit.
    """
    p = pipeline.check_complete()
    if staged_rows.isEmpty():
        return Report(p.name, batch_id, (), dt.datetime.now(dt.timezone.utc).replace(tzinfo=None))
    frame = staged_rows.withColumn(ORIGIN, F.lit("staged"))
    if p.emission.final and published_table_df is not None and set(p.identity) <= set(staged_rows.columns):
        frame = frame.unionByName(_published_twins(p, staged_rows, published_table_df), allowMissingColumns=True)
    report = _run(spark, p, frame, batch_id, warehouse_root, expectations_dir, batches=batches)
    report.raise_for_failures(
        f"Nothing was published or committed. Fix the input or the suite ({suite_file(p, expectations_dir)}), "
        f"then re-run the batch. Results: {os.path.join(warehouse_root, 'quality_results')}."
    )
    return report
