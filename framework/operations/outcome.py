"""What a job leaves for its DAG's quality gate: the batch (or replay) it ran and what the
validation of the results table found, in ``<warehouse>/<pipeline>/_gate/<kind>.json``.

The job validates in the Spark session it already has (``validation.after_run``), so the
Airflow task that follows reads this small file and starts neither a JVM nor Great Expectations
(docs/design.md#dags). This module imports neither: the quality-gate task runs it.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from urllib.parse import urlparse

GATE = "_gate"  # the folder, beside the pipeline's tables (a reserved name)
KINDS = ("batch", "replay")


@dataclass(frozen=True)
class Outcome:
    """One run of a job: what it committed (or found committed) and what validation found."""

    kind: str  # "batch" | "replay"
    pipeline: str
    batch_id: str  # the batch's id; for a replay "<first>..<last>"
    seq: int | None  # the batch's sequence number (a replay: its last batch's)
    rows_published: int
    stream_time: str | None  # ISO
    validated: bool  # False: the run published no row, so the table was not validated again
    failures: tuple[str, ...] = ()  # the failed critical expectations, described
    summary: str = ""  # the validation report's summary (warnings included)
    docs: str | None = None  # Data Docs page of the validation

    @property
    def success(self) -> bool:
        return not self.failures

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> Outcome:
        values = json.loads(text)
        return cls(**{**values, "failures": tuple(values.get("failures") or ())})


def location(warehouse: str, pipeline: str, kind: str) -> str:
    """Where runs of ``kind`` of pipeline ``pipeline`` leave their outcome."""
    if kind not in KINDS:
        raise ValueError(f"outcome kind must be one of {KINDS}, got {kind!r}")
    return f"{warehouse.rstrip('/')}/{pipeline}/{GATE}/{kind}.json"


def read(warehouse: str, pipeline: str, kind: str) -> Outcome | None:
    """The outcome the last run of ``kind`` left, or None: on a local disk, or through
    ``pyarrow.fs`` on an object store or HDFS (``s3a://`` read as ``s3://``)."""
    where = location(warehouse, pipeline, kind)
    scheme = urlparse(where).scheme
    if len(scheme) <= 1 or scheme == "file":  # a path, a Windows drive, or a file URI
        path = Path(urlparse(where).path if scheme == "file" else where)
        return Outcome.from_json(path.read_text("utf-8")) if path.is_file() else None
    from pyarrow import fs

    filesystem, path = fs.FileSystem.from_uri("s3://" + where[len("s3a://") :] if scheme == "s3a" else where)
    try:
        with filesystem.open_input_stream(path) as stream:
            return Outcome.from_json(stream.read().decode("utf-8"))
    except FileNotFoundError:
        return None
