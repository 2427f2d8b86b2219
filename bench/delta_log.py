"""What a Delta log's length costs: the time of one read of a table's head (``DeltaLog.update``,
which lists the whole ``_delta_log`` folder on a local disk) against the number of commits the
log keeps, with and without Hadoop's ``.crc`` file beside each commit.

    .venv/bin/python bench/delta_log.py

Each log is made of one real commit, then commits holding only a ``commitInfo`` (written
directly, as the protocol allows), then a checkpoint, so a read lists the folder and loads the
checkpoint and nothing else. The ``.crc`` files are empty stand-ins: only their names are listed.
Prints and writes JSON lines (``--out``): commits, entries in the folder, median milliseconds of
15 reads. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from framework import spark_session
from framework.storage import classic, tables

COMMIT = json.dumps({"commitInfo": {"timestamp": 1, "operation": "WRITE", "operationParameters": {}}}) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--commits", type=int, nargs="+", default=[50, 500, 2000, 8000, 20000])
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "delta_log.jsonl")
    args = ap.parse_args()
    spark = spark_session("bench-delta-log")
    with args.out.open("w") as out:
        for commits in args.commits:
            for crc in (True, False):
                with tempfile.TemporaryDirectory(prefix="delta-log-") as folder:
                    line = _measure(spark, str(Path(folder, "t")), commits, crc)
                print(json.dumps(line), flush=True)
                out.write(json.dumps(line) + "\n")


def _measure(spark, path: str, commits: int, crc: bool) -> dict:
    """Make the log (see the module's docstring) and time reads of its head."""
    spark.range(1).write.format("delta").save(path)
    log = Path(path, "_delta_log")
    for version in range(1, commits):
        name = f"{version:020d}.json"
        (log / name).write_text(COMMIT)
        if crc:
            (log / f".{name}.crc").touch()
    with classic.delta_snapshot(spark, path) as current:
        current.deltaLog().checkpoint()
    tables.head(spark, path)
    seconds = []
    for _ in range(15):
        start = time.perf_counter()
        tables.head(spark, path)
        seconds.append(time.perf_counter() - start)
    return {
        "commits": commits,
        "crc": crc,
        "entries": len(list(log.iterdir())),
        "head_ms": round(1000 * statistics.median(seconds), 1),
    }


if __name__ == "__main__":
    main()
