"""The pipelines' status inside Airflow's UI: an Airflow 3.1+ plugin (a FastAPI app and external views).

Airflow loads it from the ``airflow.plugins`` entry point of ``pip install 'finalresults[airflow]'``.
It adds a "Final results" page beside each pipeline DAG (and one for all of them under Browse):
the status page of ``finalresults status --html`` (``operations.statuspage``), with each batch
linked to its DAG run and to its Data Docs page, which the plugin serves too.

Which DAG is a pipeline, and where its warehouse is, come from Airflow's own records: a pipeline
DAG's quality gate updates its results table's asset (group ``finalresults``, URI
``<warehouse>/<pipeline>/<table>``; ``orchestration.airflow.results_asset``). The status itself
is the one the pipeline's last job left beside its gate outcome (``operations.status.save``): the
api-server starts no Spark.

Airflow mounts a plugin's FastAPI app beside its own API, and its login reaches none of the
app's routes: every route here depends on ``get_user``, Airflow's own check of the session
cookie or bearer token (401 without one), and shows a pipeline only to users who may read its DAG.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated
from urllib.parse import quote, urlparse

from airflow.api_fastapi.app import get_auth_manager
from airflow.api_fastapi.auth.managers.models.resource_details import DagDetails
from airflow.api_fastapi.common.db.common import SessionDep
from airflow.api_fastapi.core_api.security import get_user
from airflow.models.asset import AssetModel, TaskOutletAssetReference
from airflow.models.dagrun import DagRun
from airflow.plugins_manager import AirflowPlugin
from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.responses import FileResponse, HTMLResponse
from sqlalchemy import select

from ..operations import status, statuspage
from .jobs import batch_id

PREFIX = "/finalresults"
GROUP = "finalresults"  # the results assets' group (orchestration.airflow._results_asset)

app = FastAPI(title="finalresults", dependencies=[Depends(get_user)], docs_url=None, redoc_url=None, openapi_url=None)


@dataclass(frozen=True)
class Pipeline:
    """A pipeline as Airflow knows it: its DAG, its name and its warehouse (on local disk)."""

    dag_id: str
    name: str
    warehouse: Path


def _pipelines(session, user) -> list[Pipeline]:
    """The pipelines whose results asset a DAG updates and whose DAG ``user`` may read."""
    rows = session.execute(
        select(TaskOutletAssetReference.dag_id, AssetModel.name, AssetModel.uri)
        .join(AssetModel, AssetModel.id == TaskOutletAssetReference.asset_id)
        .where(AssetModel.group == GROUP)
        .order_by(TaskOutletAssetReference.dag_id)
    )
    auth = get_auth_manager()
    return [
        Pipeline(dag_id, name.split(".")[1], Path(urlparse(uri).path).parent.parent)
        for dag_id, name, uri in rows
        if urlparse(uri).scheme in ("", "file")
        and auth.is_authorized_dag(method="GET", user=user, details=DagDetails(id=dag_id))
    ]


def _runs(session, ui: str, dag_id: str, batch_ids: list[str]) -> dict[str, str]:
    """The UI address of each batch's DAG run: the run whose data interval starts at the batch's start."""
    runs = session.scalars(select(DagRun).where(DagRun.dag_id == dag_id, DagRun.data_interval_start.is_not(None)))
    by_start = {batch_id(r.data_interval_start.astimezone(dt.timezone.utc).replace(tzinfo=None)): r for r in runs}
    return {b: f"{ui}/dags/{quote(dag_id)}/runs/{quote(by_start[b].run_id)}" for b in batch_ids if b in by_start}


def _section(request: Request, session, p: Pipeline, anchor: str) -> str:
    """A pipeline's section, linking to pages by absolute path: the plugin's own (its mount point is
    the request's root path) and the UI's (the root path without the mount point)."""
    here = request.scope.get("root_path", PREFIX)
    found = status.load(str(p.warehouse), p.name) or status.PipelineStatus(p.name, str(p.warehouse / p.name))
    data_docs = p.warehouse / "data_docs"
    links = statuspage.Links(
        docs=f"{here}/docs/{quote(p.dag_id)}/" if (data_docs / "index.html").is_file() else None,
        docs_pages=statuspage.docs_pages(data_docs),
        runs=_runs(session, here.removesuffix(PREFIX), p.dag_id, [b["batch_id"] for b in found.batches]),
    )
    return statuspage.section(found, anchor, links)


User = Annotated[object, Depends(get_user)]


@app.get("/", response_class=HTMLResponse)
def every_pipeline(request: Request, session: SessionDep, user: User) -> str:
    """The status of every pipeline the user may see."""
    pipelines = _pipelines(session, user)
    if not pipelines:
        body = ['<p class="note">No pipeline DAG has registered its results asset yet.</p>']
    else:
        body = [_section(request, session, p, f"pipeline-{i}") for i, p in enumerate(pipelines, 1)]
    return statuspage.document("finalresults", ["<h1>Final results</h1>", *body])


@app.get("/dags/{dag_id}", response_class=HTMLResponse)
def one_pipeline(request: Request, dag_id: str, session: SessionDep, user: User) -> str:
    """The status of the pipeline of DAG ``dag_id`` (a short note for a DAG that is no pipeline)."""
    found = [p for p in _pipelines(session, user) if p.dag_id == dag_id]
    body = (
        [_section(request, session, found[0], "pipeline")]
        if found
        else [f'<p class="note">DAG {dag_id!r} runs no finalresults pipeline (or you may not read it).</p>']
    )
    return statuspage.document(f"finalresults: {dag_id}", body)


@app.get("/docs/{dag_id}/{path:path}")
def data_docs(dag_id: str, path: str, session: SessionDep, user: User) -> FileResponse:
    """A file of the pipeline's Data Docs (its warehouse's ``data_docs`` folder), nothing outside it."""
    found = [p for p in _pipelines(session, user) if p.dag_id == dag_id]
    if not found:
        raise HTTPException(404, f"no pipeline DAG {dag_id!r}")
    root = (found[0].warehouse / "data_docs").resolve()
    file = (root / (path or "index.html")).resolve()
    if not file.is_relative_to(root) or not file.is_file():
        raise HTTPException(404, f"no Data Docs file {path!r}")
    return FileResponse(file)


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
