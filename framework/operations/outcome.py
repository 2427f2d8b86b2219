"""What a job leaves for its DAG's quality gate: the batch (or replay) it ran and what the
validation of the results table found, in ``<warehouse>/<pipeline>/_gate/<kind>.json``.

The job validates in the Spark session it already has (``validation.after_run``), so the
Airflow task that follows reads this small file and starts neither a JVM nor Great Expectations
(docs/design.md#dags). This module imports neither: the quality-gate task runs it. It reads a
local disk, or an object store through ``pyarrow.fs`` (``s3``/``s3a``, ``gs``, ``abfs``) with
the Airflow worker's own credentials.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlparse

from ..definition.names import GATE
from ..errors import FrameworkError
from ..storage.smallfile import text_of, visible

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

KINDS = ("batch", "replay", "backfill")


@dataclass(frozen=True)
class Outcome:
    """One run of a job: what it committed (or found committed) and what validation found."""

    kind: str  # "batch" | "replay" | "backfill"
    pipeline: str
    batch_id: str  # the batch's id; for a replay or a backfill "<first>..<last>"
    seq: int | None  # the batch's sequence number (a replay, a backfill: its last batch's)
    rows_published: int
    stream_time: str | None  # ISO
    validated: bool  # False: the table was validated before, as it is now (same version, passed)
    failures: tuple[str, ...] = ()  # the failed critical expectations, described
    summary: str = ""  # the validation report's summary (warnings included)
    docs: str | None = None  # Data Docs page of the validation
    table_version: int | None = None  # the results table's Delta version validated (None: no table)
    run_id: str | None = None  # the Airflow run whose Spark task left it (``--run-id``)
    # The rows validated: those that commits after this version added (with the rows they could
    # duplicate), the table having passed the same suite at it; None: the whole table.
    since_version: int | None = None
    suite_digest: str | None = None  # the suite validated with (``suites.digest``)
    batches: tuple[str, ...] = ()  # a backfill's intervals, committed or found committed: an asset event each

    @property
    def success(self) -> bool:
        return not self.failures

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> Outcome:
        """An outcome as written, ignoring keys a newer version may add."""
        values = json.loads(text)
        known = {f.name for f in fields(cls)}
        listed = {name: tuple(values.get(name) or ()) for name in ("failures", "batches")}
        return cls(**{k: v for k, v in values.items() if k in known} | listed)


def location(warehouse: str, pipeline: str, kind: str) -> str:
    """Where runs of ``kind`` of pipeline ``pipeline`` leave their outcome."""
    if kind not in KINDS:
        raise ValueError(f"outcome kind must be one of {KINDS}, got {kind!r}")
    return f"{warehouse.rstrip('/')}/{pipeline}/{GATE}/{kind}.json"


def read(warehouse: str, pipeline: str, kind: str) -> Outcome | None:
    """The outcome the last run of ``kind`` left, or None if there is none."""
    where = location(warehouse, pipeline, kind)
    try:
        text = read_text(where)
        return None if text is None else Outcome.from_json(text)
    except (OSError, ValueError, TypeError) as e:  # pyarrow's errors are OSError or ValueError (ArrowInvalid)
        raise FrameworkError(
            f"pipeline {pipeline!r}: cannot read the quality-gate outcome {where}: {e}. The Airflow worker reads "
            "it without Spark: a local path, or an s3/s3a, gs or abfs URI with the worker's own credentials "
            "(docs/design.md#dags)."
        ) from e


def read_in_job(spark: SparkSession, warehouse: str, pipeline: str, kind: str) -> Outcome | None:
    """The outcome the last run of ``kind`` left, read as a job writes it: through Spark's Hadoop
    file system, whose object-store settings (endpoint, credentials) the worker may not have."""
    from ..storage import files

    text = files.get_text(spark, location(warehouse, pipeline, kind))
    return Outcome.from_json(text) if text else None


def read_text(where: str) -> str | None:
    """The text of the small file at ``where`` (a local path or an object-store URI, read as the
    Airflow worker can: without Spark), in either of its forms (``storage.smallfile``), or None
    if there is none."""
    from pyarrow import fs

    files, path = filesystem(where)
    info = files.get_file_info(path)
    if info.type == fs.FileType.NotFound:
        return None
    if info.type == fs.FileType.Directory:  # the form a Spark Connect session writes
        inside = files.get_file_info(fs.FileSelector(path))
        found = {i.base_name: _read(files, i.path) for i in inside if visible(i.base_name)}
        return text_of(info.base_name, found)
    return _read(files, path)


def _read(files, path: str) -> str:
    with files.open_input_stream(path) as stream:
        return stream.read().decode("utf-8")


def filesystem(where: str):
    """The ``pyarrow.fs`` file system of ``where`` and the path in it: the local one for a path
    (a Windows drive too) or a ``file:`` URI, else the object store its URI names (``s3a://`` read
    as ``s3://``), reached with this process's own credentials."""
    from pyarrow import fs

    scheme = urlparse(where).scheme
    if len(scheme) <= 1 or scheme == "file":
        return fs.LocalFileSystem(), str(Path(urlparse(where).path if scheme == "file" else where).resolve())
    return fs.FileSystem.from_uri("s3://" + where[len("s3a://") :] if scheme == "s3a" else where)
