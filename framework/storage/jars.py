"""The JVM jars a Spark process needs, resolved by Ivy once and recorded.

Spark resolves Maven coordinates (``spark.jars.packages``, spark-submit's ``--packages``) at
every JVM start: seconds of Ivy work even when ``~/.ivy2`` holds every file. The first session
that resolves a set of coordinates (``make install`` starts one) records the files Ivy gave,
by coordinates, in this environment's ``share/finalresults/jars.json``; later sessions and the
DAGs' spark-submit pass those files as ``spark.jars``/``--jars``. A recording whose files are
gone is ignored, so Ivy resolves again and the recording is renewed.

No Spark here: Airflow's DAG files read the recording when they are parsed.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from importlib.metadata import version
from pathlib import Path
from typing import Sequence
from urllib.parse import urlparse

DELTA_PACKAGE = f"io.delta:delta-spark_2.13:{version('delta-spark')}"  # what configure_spark_with_delta_pip adds
RECORDING = Path(sys.prefix) / "share" / "finalresults" / "jars.json"


def _key(packages: Sequence[str]) -> str:
    return ",".join(sorted(packages))


def _read() -> dict[str, list[str]]:
    try:
        return json.loads(RECORDING.read_text("utf-8"))
    except (OSError, ValueError):
        return {}


def recorded(packages: Sequence[str]) -> list[str] | None:
    """The local jar files recorded for ``packages``; None if none are, or one of them is gone."""
    found = _read().get(_key(packages))
    if not found or not all(os.path.isfile(path) for path in found):
        return None
    return found


def for_submit(packages: str | None) -> tuple[str | None, str | None]:
    """spark-submit's ``--packages`` and ``--jars`` for ``packages``: Delta's own coordinates
    become the files Ivy resolved for them at install, when they are all there (the JVM then
    starts without resolving); any other coordinates, or a recording that is gone, stay
    coordinates."""
    resolved = recorded([packages]) if packages == DELTA_PACKAGE else None
    return (None, ",".join(resolved)) if resolved else (packages, None)


def record(packages: Sequence[str], resolved: str, given: Sequence[str] = ()) -> None:
    """Record the jars Spark resolved for ``packages`` (its ``spark.jars``, less the ``given``
    jars the session was started with). Written whole, then renamed: readers see the old or
    the new recording, never half of one."""
    given_paths = {_path(j) for j in given}
    paths = [path for path in dict.fromkeys(_path(j) for j in resolved.split(",") if j) if path not in given_paths]
    if not paths:
        return
    recording = _read() | {_key(packages): paths}
    RECORDING.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=RECORDING.parent, delete=False, suffix=".tmp") as out:
        json.dump(recording, out, indent=1)
    os.replace(out.name, RECORDING)


def _path(jar: str) -> str:
    """A jar as a local path (Spark lists resolved jars as ``file:`` URIs)."""
    return urlparse(jar).path if jar.startswith("file:") else jar
