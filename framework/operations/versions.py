"""A pipeline's versions: how far each has run, how two compare, and the switch that makes one
of them the pipeline (docs/operations.md#changing-a-pipeline).

A changed definition is the pipeline's next version (``Pipeline(..., version=k)``, said, never
guessed) with tables of its own (``storage.versions``). It is built beside the running version
by the chunked backfill (``orchestration.jobs.build_version``) until it has committed every
interval the running version has; then ``switch`` makes it the pipeline, in steps that are each
safe to repeat, so that the same command run again after a crash finishes the switch:

1. the new version must have committed the running version's last interval (refused while behind);
2. the running version's ledger gets a ``switched`` row, made as a commit point
   (``ledger.commit_point``): an attempt of the running version that read its ledger before
   this is fenced out when it commits, one that reads it after refuses to run
   (``VersionSwitchedError``), so no interval commits in the old version once the switch began;
3. the switches table gets the switch's row: from then on jobs run the new version, and
   ``Runtime.read_output``, ``status`` and the Airflow asset's readers read it;
4. a version switched back to gets a ``switched`` row naming itself, which lifts step 2's fence;
5. the catalog's names of the pipeline's tables point to the new version's.

Readers see the old rows until step 3 and the new ones after: each reads one table, never a mix.
"""

from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Mapping

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from ..definition.names import EMITTED_COLUMNS, quoted
from ..definition.pipeline import Pipeline
from ..errors import VersionError
from ..execution.streamtime import to_datetime
from ..storage import catalog, ledger, tables, versions, writes

if TYPE_CHECKING:
    from .runtime import Runtime

SAMPLE = 10  # rows of differences a comparison shows
SHOWN = 24  # intervals with differences a comparison lists


@dataclass(frozen=True)
class Standing:
    """How far a version has run: its ledger as read, and its last committed batch."""

    p: Pipeline
    head: ledger.Head
    rows: list[ledger.LedgerRow]

    @property
    def last(self) -> ledger.LedgerRow | None:
        committed = ledger.committed_rows(self.rows)
        return committed[-1] if committed else None

    @property
    def through(self) -> str:
        """Where it has run to, for messages."""
        last = self.last
        if last is None:
            return "no batch yet"
        end = f", interval ending {to_datetime(last.interval_end)}" if last.interval_end is not None else ""
        return f"batch {last.batch_id!r}{end}"


def standing(rt: Runtime, p: Pipeline) -> Standing:
    head, rows = rt.ledgers.read(rt.tables(p).state)
    return Standing(p, head, rows)


def check_caught_up(new: Standing, old: Standing) -> None:
    """Refuse unless ``new`` has committed the last batch ``old`` committed."""
    mine, theirs = new.last, old.last
    if (mine.batch_id if mine else None) != (theirs.batch_id if theirs else None):
        raise VersionError(
            f"pipeline {new.p.name!r}: version {new.p.version} has run through {new.through}, version "
            f"{old.p.version} (the pipeline's) through {old.through}: version {new.p.version} is behind. Nothing "
            f"was changed; run `finalresults versions build` until it has caught up, then switch."
        )


def check_columns(rt: Runtime, old: Pipeline, new: Pipeline, breaking: bool) -> None:
    """Refuse a switch whose results table would lose a column of the old one, or change its
    type, unless ``breaking``: the table's readers (queries, downstream DAGs) would break."""
    if old.sink != new.sink:
        raise VersionError(
            f"pipeline {old.name!r}: version {new.version} writes to {new.sink!r}, version {old.version} to "
            f"{old.sink!r}: the catalog name and the Airflow asset follow the sink's name, so versions keep it"
        )
    before, after = (_schema(rt, p) for p in (old, new))
    if before is None or after is None or breaking:
        return
    lost = [f"{n} {t}" for n, t in before.items() if after.get(n) != t]
    if lost:
        raise VersionError(
            f"pipeline {old.name!r}: switching to version {new.version} would break the results table's readers: "
            f"columns {lost} of version {old.version} are missing or of another type in version {new.version} "
            f"({', '.join(f'{n} {t}' for n, t in after.items())}). Nothing was changed; switch with "
            "--breaking-columns if the readers are ready for it."
        )


def _schema(rt: Runtime, p: Pipeline) -> dict[str, str] | None:
    path = rt.tables(p).output
    if not tables.exists(rt.spark, path):
        return None
    return {f.name: f.dataType.simpleString() for f in tables.read(rt.spark, path).schema.fields}


def switch(
    rt: Runtime,
    defined: Mapping[int, Pipeline],
    to: int,
    breaking_columns: bool = False,
    before: Callable[[str], None] = lambda step: None,
) -> versions.Switch:
    """Make version ``to`` of the pipeline whose versions are ``defined`` the pipeline (the
    module docstring's steps); the switch recorded. Results columns the switch would lose are
    refused unless ``breaking_columns``, or it switches back to the version switched from.
    ``before(step)`` is called before each step (``seal``, ``record``, ``open``, ``catalog``):
    tests crash there."""
    name = next(iter(defined.values())).name
    done = versions.switches(rt.spark, rt.warehouse, name)
    at = done[-1].version if done else 1
    target = _defined(defined, to, name)
    if at == to:  # switched already, perhaps by a run that crashed after recording it: finish it
        _open(rt, target, before)
        _point_catalog(rt, target, before)
        return done[-1] if done else versions.Switch(0, to, to, None, target.sink or "output", dt.datetime.now())
    old, new = standing(rt, _defined(defined, at, name)), standing(rt, target)
    back = bool(done) and done[-1].previous == to  # switching back restores the columns readers had
    check_columns(rt, old.p, new.p, breaking_columns or back)
    sealed = ledger.switched_away(old.rows, at)
    if sealed is not None and sealed.switched_to != to:
        raise VersionError(
            f"pipeline {name!r}: a switch from version {at} to version {sealed.switched_to} began and has not "
            f"finished: run `finalresults versions switch --to {sealed.switched_to}` to finish it first"
        )
    check_caught_up(new, old)
    if sealed is None:
        before("seal")
        _seal(rt, old, to)
    last = old.last
    since = last.interval_end if last is not None else None
    before("record")
    wanted = versions.Switch(len(done) + 1, to, at, since, target.sink or "output", dt.datetime.now())
    recorded = versions.record(rt.spark, rt.warehouse, name, wanted)
    if (recorded.version, recorded.previous) != (to, at) or recorded.at != wanted.at:
        raise VersionError(
            f"pipeline {name!r}: another switch landed first ({recorded.describe()}); this one changed nothing more"
        )
    _open(rt, target, before)
    _point_catalog(rt, target, before)
    return recorded


def _defined(defined: Mapping[int, Pipeline], version: int, name: str) -> Pipeline:
    if version not in defined:
        raise VersionError(
            f"pipeline {name!r}: version {version} is not defined here (versions defined: {sorted(defined)}); "
            "keep every version's definition in the job (VERSIONS) until its tables are no longer needed"
        )
    return defined[version]


def _seal(rt: Runtime, old: Standing, to: int) -> None:
    """Step 2: the ``switched`` row in ``old``'s ledger, as a commit point."""
    if not old.head.exists:
        return  # no batch ever ran: none can be under way to fence out
    _switched_row(rt, old, to, f"pipeline {old.p.name!r}: a batch of version {old.p.version} committed meanwhile")


def _open(rt: Runtime, p: Pipeline, before: Callable[[str], None]) -> None:
    """Step 4: lift the fence of an earlier switch away from ``p``."""
    now = standing(rt, p)
    if ledger.switched_away(now.rows, p.version) is None:
        return
    before("open")
    _switched_row(rt, now, p.version, f"pipeline {p.name!r}: version {p.version} changed meanwhile")


def _switched_row(rt: Runtime, at: Standing, to: int, moved: str) -> None:
    last, attempt = at.last, uuid.uuid4().hex
    row = ledger.LedgerRow(
        seq=last.seq if last else 0,
        batch_id=last.batch_id if last else "",
        status=ledger.Status.SWITCHED.value,
        attempt=attempt,
        at=dt.datetime.now(),
        interval_end=last.interval_end if last else None,
        fence=at.head.next_fence,
        switched_to=to,
    )
    path, spark = rt.tables(at.p).state, rt.spark
    tag = f"{writes.TAG}{at.p.name}.switch:{attempt}"
    commit = ledger.to_frame(spark, [row])
    made = ledger.commit_point(
        spark, path, at.head, tag, lambda txn: writes.save(commit, path, tag, mergeSchema="true", **writes.once(txn))
    )
    if made is None:
        raise VersionError(f"{moved}: nothing was switched; run the switch again")


def _point_catalog(rt: Runtime, p: Pipeline, before: Callable[[str], None]) -> None:
    """Step 5: the catalog's names of the pipeline's tables, pointed at ``p``'s."""
    if rt.catalog is None:
        return
    before("catalog")
    catalog.point(rt.spark, rt.catalog, p, rt.tables(p))
    rt.register(p)


@dataclass(frozen=True)
class Comparison:
    """How version ``new``'s final rows differ from version ``old``'s over ``intervals``, the
    batches both committed: windows only in one, windows whose values differ, per interval
    (batch id: only old, only new, differing) and a sample of the differences."""

    old: int
    new: int
    intervals: int
    same: int
    only_old: int
    only_new: int
    differing: int
    added_columns: list[str]
    removed_columns: list[str]
    per_interval: list[tuple[str, int, int, int]] = field(default_factory=list)
    sample: list[dict] = field(default_factory=list)

    def describe(self) -> str:
        lines = [
            f"version {self.new} against version {self.old}, over the {self.intervals} intervals both committed:",
            f"  windows equal {self.same}, only in version {self.old} {self.only_old}, only in version "
            f"{self.new} {self.only_new}, values differ {self.differing}",
        ]
        if self.added_columns or self.removed_columns:
            lines.append(f"  columns added {self.added_columns}, removed {self.removed_columns}")
        lines += [f"  {b}: only old {o}, only new {n}, differ {d}" for b, o, n, d in self.per_interval[:SHOWN]]
        if len(self.per_interval) > SHOWN:
            lines.append(f"  ... and {len(self.per_interval) - SHOWN} more intervals with differences")
        lines += [f"  e.g. {row}" for row in self.sample]
        return "\n".join(lines)


def compare(rt: Runtime, old: Pipeline, new: Pipeline) -> Comparison:
    """Compare the results of ``new`` with those of ``old`` over the batches both committed (two
    Spark jobs): rows are matched on the key, the window and, in a log of updates, the batch
    that emitted them; values on the columns both have."""
    ids = _common_batches(standing(rt, old), standing(rt, new))
    a, b = (_results(rt, p, ids) for p in (old, new))
    if a is None or b is None:  # a version that published nothing yet: an empty table of the other's columns
        a, b = a if a is not None else (b.limit(0) if b is not None else None), b if b is not None else a
    if a is None or b is None:
        return Comparison(old.version, new.version, len(ids), 0, 0, 0, 0, [], [])
    key = [*new.keys_and_bounds, *(["emitted_batch_id"] if new.emission.appended and not new.emission.final else [])]
    values = [c for c in a.columns if c in b.columns and c not in key and c not in (*EMITTED_COLUMNS, "_in")]
    on = [F.col(f"a.{quoted(k)}").eqNullSafe(F.col(f"b.{quoted(k)}")) for k in key]
    same = F.expr(" AND ".join(f"a.{quoted(c)} <=> b.{quoted(c)}" for c in values)) if values else F.lit(True)
    kind = (
        F.when(F.col("a._in").isNull(), "only_new")
        .when(F.col("b._in").isNull(), "only_old")
        .when(same, "same")
        .otherwise("differing")
    )
    classified = (
        a.alias("a")
        .join(b.alias("b"), on, "full")
        .select(
            F.coalesce(F.col("a.emitted_batch_id"), F.col("b.emitted_batch_id")).alias("batch"),
            kind.alias("kind"),
            *[F.coalesce(F.col(f"a.{quoted(k)}"), F.col(f"b.{quoted(k)}")).alias(k) for k in new.keys_and_bounds],
            *[F.col(f"a.{quoted(c)}").alias(f"{c}_old") for c in values],
            *[F.col(f"b.{quoted(c)}").alias(f"{c}_new") for c in values],
        )
    )
    per: dict[str, dict[str, int]] = {}
    for r in classified.groupBy("batch", "kind").count().collect():
        per.setdefault(r["batch"], {})[r["kind"]] = r["count"]
    total = {k: sum(n.get(k, 0) for n in per.values()) for k in ("same", "only_old", "only_new", "differing")}
    return Comparison(
        old=old.version,
        new=new.version,
        intervals=len(ids),
        same=total["same"],
        only_old=total["only_old"],
        only_new=total["only_new"],
        differing=total["differing"],
        added_columns=[c for c in b.columns if c not in a.columns],
        removed_columns=[c for c in a.columns if c not in b.columns],
        per_interval=[
            (batch, n.get("only_old", 0), n.get("only_new", 0), n.get("differing", 0))
            for batch, n in sorted(per.items())
            if set(n) - {"same"}
        ],
        sample=[r.asDict() for r in classified.filter("kind != 'same'").orderBy("batch").limit(SAMPLE).collect()],
    )


def _common_batches(a: Standing, b: Standing) -> list[str]:
    theirs = {r.batch_id for r in ledger.committed_rows(b.rows)}
    return [r.batch_id for r in ledger.committed_rows(a.rows) if r.batch_id in theirs]


def _results(rt: Runtime, p: Pipeline, ids: list[str]) -> DataFrame | None:
    """``p``'s results emitted by the batches ``ids``, marked present (``_in``); None before any."""
    path = rt.tables(p).output
    if not tables.exists(rt.spark, path):
        return None
    return tables.read(rt.spark, path).filter(F.col("emitted_batch_id").isin(ids)).withColumn("_in", F.lit(True))
