"""The pipelines' status inside Airflow's UI: an Airflow 3.1+ plugin (a FastAPI app and external views).

Airflow loads it from the ``airflow.plugins`` entry point of ``pip install 'finalresults[airflow]'``.
It adds a "Final results" page beside each pipeline DAG (and one for all of them under Browse):
the status page of ``finalresults status --html`` (``operations.statuspage``), with each batch
linked to its DAG run and to its Data Docs page, which the plugin serves too.

Which DAG is a pipeline, and where its warehouse is, come from Airflow's own records: a pipeline
DAG's quality gate updates its results table's asset (group ``finalresults``, name
``finalresults.<pipeline>.<table>``, URI ``<warehouse>/<pipeline>/<table>``;
``orchestration.airflow.results_asset``). An asset of the group that is not such is skipped with
a log line. The status itself is the one the pipeline's last job left beside its gate outcome
(``operations.status.save``), and Data Docs are files: both are read as the quality-gate task
reads its outcome, from local disk or an object store (``s3a://`` too) through ``pyarrow.fs``
with the api-server's own credentials (``outcome.filesystem``): the api-server starts no Spark.

Airflow mounts a plugin's FastAPI app beside its own API, on Airflow's origin, and its login
reaches none of the app's routes: every route here depends on ``get_user``, Airflow's own check
of the session cookie or bearer token (401 without one), and shows a pipeline, its Data Docs
pages and its links only to users who may read its DAG. One ``data_docs`` folder holds every
pipeline of a warehouse, so a DAG's Data Docs route serves its own suite's pages only
(``datadocs.of_suite``) and an index of them, not GX's index of every pipeline. A page on this
origin could call Airflow's API with the reader's cookie: every value is escaped
(``statuspage``), and each response carries a Content-Security-Policy (``POLICY``, ``DOCS_POLICY``).
"""

from __future__ import annotations

import datetime as dt
import logging
import mimetypes
import re
from dataclasses import dataclass
from html import escape
from pathlib import PurePosixPath
from typing import Annotated
from urllib.parse import quote, unquote, urlparse

from airflow.api_fastapi.app import get_auth_manager
from airflow.api_fastapi.auth.managers.models.resource_details import DagDetails
from airflow.api_fastapi.common.db.common import SessionDep
from airflow.api_fastapi.core_api.security import get_user
from airflow.models.asset import AssetModel, TaskOutletAssetReference
from airflow.models.dagrun import DagRun
from airflow.plugins_manager import AirflowPlugin
from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.responses import HTMLResponse, Response
from sqlalchemy import select

from ..operations import datadocs, status, statuspage
from .jobs import batch_id

PREFIX = "/finalresults"
GROUP = "finalresults"  # the results assets' group (orchestration.airflow._results_asset)
#: A results asset's name: finalresults.<pipeline>.<table>, both identifiers (definition.names)
RESULTS_ASSET = re.compile(r"finalresults\.([A-Za-z_][A-Za-z0-9_]{0,127})\.([A-Za-z_][A-Za-z0-9_]{0,127})")
#: The plugin's own pages: the status page's policy (its style block, no script), framed by Airflow's UI only.
POLICY = statuspage.POLICY + "; frame-ancestors 'self'"
#: Data Docs pages as GX wrote them: their inline scripts and handlers, and the scripts, styles,
#: fonts and images of their folder (``datadocs.make_offline``); no fetch or XHR (Airflow's API
#: answers this origin's requests with the reader's cookie), no plugin, no form, no other origin.
DOCS_POLICY = (
    "default-src 'self'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; connect-src 'none'; object-src 'none'; base-uri 'none'; form-action 'none'; "
    "frame-ancestors 'self'"
)

log = logging.getLogger(__name__)
app = FastAPI(title="finalresults", dependencies=[Depends(get_user)], docs_url=None, redoc_url=None, openapi_url=None)


@dataclass(frozen=True)
class PipelineView:
    """A pipeline as Airflow knows it: its DAG, its name and its warehouse (a path or a URI)."""

    dag_id: str
    name: str
    warehouse: str


def _pipeline(dag_id: str, name: str, uri: str) -> PipelineView | None:
    """The pipeline whose results asset is ``name`` at ``uri``; None, with a log line, for an
    asset of the group that is no results asset (its warehouse could not be told)."""
    found = RESULTS_ASSET.fullmatch(name)
    parsed = urlparse(uri)
    path = PurePosixPath(unquote(parsed.path))
    if not found or path.parts[-2:] != found.groups():
        log.warning(
            "finalresults plugin: skipped asset %r (URI %r) of DAG %r in group %r: a results asset is named "
            "finalresults.<pipeline>.<table> and located at <warehouse>/<pipeline>/<table>",
            name,
            uri,
            dag_id,
            GROUP,
        )
        return None
    warehouse = str(path.parent.parent) if parsed.scheme == "file" else uri.rsplit("/", 2)[0]
    return PipelineView(dag_id, found[1], warehouse)


def _pipelines(session, user, dag_id: str | None = None) -> list[PipelineView]:
    """The pipelines (of DAG ``dag_id``, or all) whose results asset a DAG updates and whose DAG
    ``user`` may read."""
    query = (
        select(TaskOutletAssetReference.dag_id, AssetModel.name, AssetModel.uri)
        .join(AssetModel, AssetModel.id == TaskOutletAssetReference.asset_id)
        .where(AssetModel.group == GROUP)
        .order_by(TaskOutletAssetReference.dag_id)
    )
    if dag_id is not None:
        query = query.where(TaskOutletAssetReference.dag_id == dag_id)
    auth = get_auth_manager()
    allowed = [
        row
        for row in session.execute(query)
        if auth.is_authorized_dag(method="GET", user=user, details=DagDetails(id=row.dag_id))
    ]
    return [p for p in (_pipeline(*row) for row in allowed) if p is not None]


def _runs(session, ui: str, dag_id: str, batch_ids: list[str]) -> dict[str, str]:
    """The UI address of each batch's DAG run: the run whose data interval starts at the batch's start."""
    runs = session.scalars(select(DagRun).where(DagRun.dag_id == dag_id, DagRun.data_interval_start.is_not(None)))
    by_start = {batch_id(r.data_interval_start.astimezone(dt.timezone.utc).replace(tzinfo=None)): r for r in runs}
    return {b: f"{ui}/dags/{quote(dag_id)}/runs/{quote(by_start[b].run_id)}" for b in batch_ids if b in by_start}


def _section(request: Request, session, p: PipelineView, anchor: str) -> str:
    """A pipeline's section, linking to pages by absolute path: the plugin's own (its mount point is
    the request's root path) and the UI's (the root path without the mount point). A status or
    Data Docs folder that cannot be read gives a section saying so, and a log line: one
    pipeline's warehouse does not break the page of every pipeline."""
    here = request.scope.get("root_path", PREFIX)
    try:
        found = status.load(p.warehouse, p.name) or status.PipelineStatus(p.name, f"{p.warehouse}/{p.name}")
        pages = datadocs.Site(p.warehouse).pages(p.name)
        links = statuspage.Links(
            docs=f"{here}/docs/{quote(p.dag_id)}/" if pages else None,
            docs_pages=statuspage.docs_pages(pages),
            runs=_runs(session, here.removesuffix(PREFIX), p.dag_id, [b["batch_id"] for b in found.batches]),
        )
        return statuspage.section(found, anchor, links)
    except Exception as e:  # anything in a warehouse's files: unreachable, unreadable, not what a job writes
        log.exception("finalresults plugin: cannot show pipeline %r of DAG %r (%s)", p.name, p.dag_id, p.warehouse)
        unknown = status.PipelineStatus(p.name, f"{p.warehouse}/{p.name}")
        return statuspage.section(unknown, anchor, statuspage.Links(), f"Cannot read its status: {e}")


def _html(body: str, code: int = 200) -> HTMLResponse:
    return HTMLResponse(body, code, headers={"Content-Security-Policy": POLICY})


User = Annotated[object, Depends(get_user)]


@app.get("/", response_class=HTMLResponse)
def every_pipeline(request: Request, session: SessionDep, user: User) -> HTMLResponse:
    """The status of every pipeline the user may see."""
    pipelines = _pipelines(session, user)
    if not pipelines:
        body = ['<p class="note">No pipeline DAG has registered its results asset yet.</p>']
    else:
        body = [_section(request, session, p, f"pipeline-{i}") for i, p in enumerate(pipelines, 1)]
    return _html(statuspage.document("finalresults", ["<h1>Final results</h1>", *body]))


@app.get("/dags/{dag_id}", response_class=HTMLResponse)
def one_pipeline(request: Request, dag_id: str, session: SessionDep, user: User) -> HTMLResponse:
    """The status of the pipeline of DAG ``dag_id``; 404 with a short note for a DAG that is no
    pipeline or that the user may not read (the same answer: it tells nothing of a DAG's existence)."""
    found = _pipelines(session, user, dag_id)
    if not found:
        note = f"DAG <code>{escape(dag_id)}</code> runs no finalresults pipeline (or you may not read it)."
        return _html(statuspage.document(f"finalresults: {dag_id}", [f'<p class="note">{note}</p>']), 404)
    return _html(statuspage.document(f"finalresults: {dag_id}", [_section(request, session, found[0], "pipeline")]))


@app.get("/docs/{dag_id}/{path:path}")
def data_docs(dag_id: str, path: str, session: SessionDep, user: User) -> Response:
    """A file of the pipeline's Data Docs (its warehouse's ``data_docs`` folder): the pages of its
    own suite and the shared static files, nothing else (400 for a NUL, 404 otherwise); at the
    folder's root, an index of the pipeline's validations."""
    if "\0" in path:
        raise HTTPException(400, "a Data Docs path cannot hold a NUL character")
    found = _pipelines(session, user, dag_id)
    if not found:
        raise HTTPException(404, f"no pipeline DAG {dag_id!r}")
    p, site = found[0], datadocs.Site(found[0].warehouse)
    if path in ("", "index.html"):
        return _html(statuspage.docs_index(p.name, site.pages(p.name)))
    content = site.read(path) if datadocs.of_suite(path, p.name) else None
    if content is None:
        raise HTTPException(404, f"no Data Docs file {path!r} of pipeline {p.name!r}")
    kind = mimetypes.guess_type(path)[0] or "application/octet-stream"
    headers = {"Content-Security-Policy": DOCS_POLICY, "X-Content-Type-Options": "nosniff"}
    return Response(content, media_type=kind, headers=headers)


class FinalResultsPlugin(AirflowPlugin):
    """The plugin Airflow loads: the app under ``/finalresults``, a view beside each DAG, one in Browse."""

    name = "finalresults"
    fastapi_apps = [{"app": app, "url_prefix": PREFIX, "name": "finalresults status"}]
    external_views = [
        {
            "name": "Final results",
            "href": f"{PREFIX.lstrip('/')}/dags/{{DAG_ID}}",
            "destination": "dag",
            "url_route": "finalresults-dag",
        },
        {
            "name": "Final results",
            "href": f"{PREFIX.lstrip('/')}/",
            "destination": "nav",
            "category": "browse",
            "url_route": "finalresults",
        },
    ]
