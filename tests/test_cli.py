"""The command line with Spark: a backfill and a replay end to end (--help, argument and path errors
and ``describe`` are in ``tests/unit/test_cli_arguments.py``, ``status`` in ``test_status_page.py``)."""

import datetime as dt
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from framework import Runtime
from framework.orchestration.cli import main
from framework.orchestration.jobs import load_job

ROOT = Path(__file__).resolve().parents[1]
ALERTS = str(ROOT / "jobs" / "user_alerts.py")
START, END = dt.datetime(2026, 1, 1), dt.datetime(2026, 1, 1, 3)


def _status_starts_no_jvm(warehouse):
    """``status`` without ``--live`` reads the status file a run left: no JVM, no SparkSession."""
    code = (
        "import sys\n"
        "from framework.orchestration.cli import main\n"
        f"assert main(['status', '--warehouse', {warehouse!r}]) == 0\n"
        "from pyspark import SparkContext\n"
        "from pyspark.sql import SparkSession\n"
        "print('jvm:', SparkContext._gateway is not None or SparkSession.getActiveSession() is not None)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "last batch     2026-01-01T02:00:00 (seq 3)" in done.stdout and done.stdout.endswith("jvm: False\n")


@pytest.mark.slow
def test_backfill_status_validate(spark, tmp_path, capsys, monkeypatch):
    sys.path.insert(0, str(ROOT))
    from jobs import sample_data

    landing, warehouse = str(tmp_path / "landing"), str(tmp_path / "warehouse")
    sample_data.generate(spark, landing, START, END, tables=("user_events",))
    paths = ["--warehouse", warehouse, "--landing", landing]
    backfill = ["backfill", ALERTS, "--from", START.isoformat(), "--to", END.isoformat(), *paths]

    # A run that skips 01:00 is refused, naming the command that brings its records in; that
    # command, then the backfill, give the table of a run that never skipped (checked at the end).
    assert main(["run", ALERTS, "--batch-start", "2026-01-01T00:00", *paths]) == 0
    assert main(["run", ALERTS, "--batch-start", "2026-01-01T02:00", *paths]) == 1
    refused = capsys.readouterr().err
    named = re.search(r"\((finalresults backfill \S+ --from \S+ --to \S+),", refused)
    assert (
        named
        and named.group(1) == f"finalresults backfill {ALERTS} --from 2026-01-01T01:00:00 --to 2026-01-01T02:00:00"
    )
    assert main([*shlex.split(named.group(1))[1:], *paths]) == 0
    assert main(backfill) == 0
    out = capsys.readouterr().out.splitlines()
    states = [line.split(": ")[1].split(" (")[0] for line in out if not line.startswith("backfill ")]
    assert states == ["committed", "already committed", "already committed", "committed"], out
    assert main(backfill) == 0
    out = capsys.readouterr().out.splitlines()
    assert [line.split(": ")[1].split(" (")[0] for line in out[:-1]] == ["already committed"] * 3
    assert ": 0 committed, 3 already committed; records in 0, rows published 0" in out[-1]

    assert main(["status", "--warehouse", warehouse]) == 0
    status = capsys.readouterr().out
    assert "last batch     2026-01-01T02:00:00 (seq 3)" in status and "open windows" in status
    assert "quality gate" in status and "the status file the last run left" in status
    assert main(["status", "--warehouse", warehouse, "--live"]) == 0
    live = capsys.readouterr().out
    assert "as of          the tables, now (--live)" in live
    assert live.split("\n", 2)[2] == status.split("\n", 2)[2]  # the file says what the tables say
    _status_starts_no_jvm(warehouse)

    before = Runtime(spark, warehouse).read_output(load_job(ALERTS).PIPELINE).collect()
    assert main(["replay", ALERTS, "--from", "2026-01-01T01:00", *paths]) == 0
    assert "replay 2026-01-01T01:00:00..2026-01-01T02:00:00: 2 batch(es) re-run" in capsys.readouterr().out
    assert sorted(Runtime(spark, warehouse).read_output(load_job(ALERTS).PIPELINE).collect()) == sorted(before)
    assert main(["replay", ALERTS, "--from", "2026-01-01T01:00", "--to", "2026-01-01T02:00", *paths]) == 1
    assert "later committed batch(es) ('2026-01-01T02:00:00'" in capsys.readouterr().err

    assert main(["validate", ALERTS, "--warehouse", warehouse]) == 0
    assert re.search(r"(\d+) of \1 expectations passed", capsys.readouterr().out)

    pipeline = load_job(ALERTS).PIPELINE
    one_batch = Runtime(spark, str(tmp_path / "one_batch"))
    one_batch.run_batch(pipeline, "all", spark.read.format("delta").load(f"{landing}/user_events"))
    columns = ["user_id", "window_start", "window_end", "events"]
    got = Runtime(spark, warehouse).read_output(pipeline).select(columns).collect()
    assert got and sorted(got) == sorted(one_batch.read_output(pipeline).select(columns).collect())
