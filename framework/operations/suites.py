"""Expectation suites: the default template for results tables, filled in for a pipeline, plus
the pipeline's own file.

A pipeline's suite is the template (``framework/operations/final_results.template.json``,
package data, filled in for the pipeline's keys and windows) plus ``expectations/<pipeline>.json``
if present: a GX suite whose expectations each say ``"meta": {"severity": "critical" | "warning"}``
(default critical).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path

import great_expectations as gx
from great_expectations.expectations.expectation import (
    ColumnMapExpectation,
    ColumnPairMapExpectation,
    MulticolumnMapExpectation,
)
from great_expectations.expectations.expectation_configuration import ExpectationConfiguration

from ..definition.pipeline import Pipeline
from ..errors import DefinitionError

log = logging.getLogger("framework.quality")

# The template ships inside the package, so an installed wheel gates batches anywhere; the
# pipelines' own suites are the user's files: in a checkout its expectations/ folder, where the
# package is installed from a wheel ./expectations (or $FINALRESULTS_EXPECTATIONS).
TEMPLATE = Path(__file__).resolve().parent / "final_results.template.json"
_CHECKOUT_DIR = Path(__file__).resolve().parents[2] / "expectations"
DEFAULT_DIR = _CHECKOUT_DIR if _CHECKOUT_DIR.is_dir() else Path("expectations")
SEVERITIES = ("critical", "warning")


def _output_columns(p: Pipeline) -> set[str]:
    """Columns of the pipeline's results table, after its stateless steps."""
    columns = [*p.keys_and_bounds, *[a.name for a in p.aggregates]]
    for step in p.steps:
        if step.op == "with_column":
            columns.append(step.args[0])
        elif step.op == "select":
            columns = list(step.args)
    extra = ["close_time"] if p.emission.final and "window_end" in columns else []
    return set(columns + extra + ["emitted_batch_id", "emitted_stream_time"])


def _fill(value, facts: dict):
    """Replace the template's placeholders; a list placeholder inside a list is spliced in."""
    if isinstance(value, list):
        out = []
        for item in value:
            filled = _fill(item, facts)
            out.extend(filled) if isinstance(item, str) and isinstance(facts.get(item), list) else out.append(filled)
        return out
    if isinstance(value, dict):
        return {k: _fill(v, facts) for k, v in value.items()}
    if isinstance(value, str) and value.startswith("$"):
        if value not in facts:
            raise DefinitionError(f"{TEMPLATE}: unknown placeholder {value!r}")
        return facts[value]
    return value


def _columns_of(kwargs: dict) -> list[str]:
    named = [kwargs.get(k) for k in ("column", "column_A", "column_B")]
    return [c for c in named if c] + list(kwargs.get("column_list") or [])


def _sink(p: Pipeline) -> str:
    """The kind of results table, as the template's ``meta.applies_to`` names it."""
    return p.emission.name


def _template(p: Pipeline) -> list[dict]:
    """The default expectations, filled in for ``p`` and kept to its kind of sink and the columns
    its table has."""
    facts = {
        "$identity": p.identity,
        "$keys_and_bounds": p.keys_and_bounds,
        "$counts": [a.name for a in p.aggregates if a.function == "count"],
        "$end_may_equal_start": p.windows is not None and p.windows.end_inclusive,
    }
    have, sink = _output_columns(p), _sink(p)
    out = []
    for e in json.loads(TEMPLATE.read_text())["expectations"]:
        meta = dict(e.get("meta") or {})
        if sink not in meta.pop("applies_to", [sink]):
            continue
        columns = _fill(meta.pop("for_each", [None]), facts)
        for column in columns:
            filled = dict(_fill(e, dict(facts, **{"$column": column})), meta=dict(meta, source="template"))
            if set(_columns_of(filled["kwargs"])) <= have:
                out.append(_one_column_unique(filled))
    return out


def _one_column_unique(entry: dict) -> dict:
    """A compound uniqueness over one column (a table without windows and one key) as that
    column's uniqueness: GX refuses a compound of fewer than two columns."""
    columns = entry["kwargs"].get("column_list") if entry["type"] == "expect_compound_columns_to_be_unique" else None
    if columns is None or len(columns) != 1:
        return entry
    kwargs = {k: v for k, v in entry["kwargs"].items() if k != "column_list"}
    return dict(entry, type="expect_column_values_to_be_unique", kwargs=dict(kwargs, column=columns[0]))


def _expectation(entry: dict, source: Path):
    meta = dict(entry.get("meta") or {})
    severity = meta.setdefault("severity", "critical")
    if severity not in SEVERITIES:
        raise DefinitionError(
            f"{source}: expectation {entry.get('type')!r} has severity {severity!r}; "
            f"use one of {SEVERITIES} in its meta"
        )
    try:
        return ExpectationConfiguration(
            type=entry["type"], kwargs=entry.get("kwargs", {}), meta=meta, notes=entry.get("notes"), severity=severity
        ).to_domain_obj()
    except Exception as e:  # GX raises several types for a bad type name or kwargs
        raise DefinitionError(f"{source}: invalid expectation {entry.get('type')!r}: {e}") from e


def suite_file(p: Pipeline, directory: str | Path | None) -> Path:
    return Path(directory or os.environ.get("FINALRESULTS_EXPECTATIONS") or DEFAULT_DIR) / f"{p.name}.json"


def load_suite(pipeline: Pipeline, directory: str | Path | None = None) -> gx.ExpectationSuite:
    """The pipeline's suite: the default template plus ``<directory>/<pipeline>.json`` if present.

    ``directory`` defaults to ``$FINALRESULTS_EXPECTATIONS``, else ``DEFAULT_DIR``. Files are
    read on every call, so an edited suite applies to the next batch.
    """
    expectations = [_expectation(e, TEMPLATE) for e in _template(pipeline)]
    own = suite_file(pipeline, directory)
    if not own.is_file():
        log.info("pipeline %r: no suite file %s: the template's expectations only", pipeline.name, own.resolve())
    else:
        try:
            entries = json.loads(own.read_text())["expectations"]
        except (ValueError, KeyError, TypeError) as e:
            raise DefinitionError(f"{own}: not a suite file with an 'expectations' list ({e})") from e
        expectations += [_expectation(dict(e, meta=dict(e.get("meta") or {}, source=own.name)), own) for e in entries]
    return gx.ExpectationSuite(name=pipeline.name, expectations=expectations)


def digest(suite: gx.ExpectationSuite) -> str:
    """A fingerprint of ``suite``'s expectations: a table that passed one suite has not passed an edited one."""
    configs = sorted(  # without the id a GX context gives an expectation when the suite is added to it
        json.dumps({k: v for k, v in e.configuration.to_json_dict().items() if k != "id"}, sort_keys=True, default=str)
        for e in suite.expectations
    )
    return hashlib.sha256("\n".join(configs).encode()).hexdigest()[:16]


def row_by_row(p: Pipeline, suite: gx.ExpectationSuite) -> bool:
    """Whether ``suite`` can be checked on a table's new rows alone, with the rows that share
    their key and window: every expectation judges each row (or pair of columns, or record) on
    its own, except uniqueness over columns that include the key and window, which rows with
    another key or window cannot break. Aggregate expectations (row counts, means) and
    uniqueness of other columns need the whole table, as does ``mostly`` below 1 (a share of the
    rows: a few bad rows among many pass where they alone would fail)."""
    ident = set(p.identity)
    for e in suite.expectations:
        if not isinstance(e, (ColumnMapExpectation, ColumnPairMapExpectation, MulticolumnMapExpectation)):
            return False
        if (getattr(e, "mostly", None) or 1) < 1:
            return False
        kind = e.expectation_type
        if kind == "expect_column_values_to_be_unique" and ident != {e.column}:
            return False
        if kind == "expect_compound_columns_to_be_unique" and not ident <= set(e.column_list):
            return False
    return True
