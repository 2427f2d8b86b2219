"""The command line: --help everywhere, one-line errors with exit 1, and a backfill and a replay end to end."""
import datetime as dt
import re
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
COMMANDS = ["run", "backfill", "replay", "status", "describe", "validate"]


def test_python_m_framework_lists_every_command():
    done = subprocess.run([sys.executable, "-m", "framework", "--help"], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0
    assert all(c in done.stdout for c in COMMANDS)


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_help(command, capsys):
    with pytest.raises(SystemExit) as exit_:
        main([command, "--help"])
    assert exit_.value.code == 0
    assert f"usage: finalresults {command}" in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [
    (["describe", "jobs/missing.py"], "job file 'jobs/missing.py' not found"),
    (["describe", "no_such_package.job"], "job 'no_such_package.job' not found"),
    (["describe", str(ROOT / "jobs" / "sample_data.py")], "has no PIPELINE"),
    (["run", ALERTS, "--batch-start", "yesterday"], "--batch-start 'yesterday' is not an ISO timestamp"),
    (["run", ALERTS, "--batch-start", "2026-01-01T01:00", "--batch-end", "2026-01-01T00:00"],
     "must be before batch end"),
    (["backfill", ALERTS, "--from", "2026-01-01T00:00", "--to", "2026-01-01T01:30"], "whole number of 1:00:00"),
    (["backfill", ALERTS, "--from", "2026-01-01", "--to", "2026-01-02", "--every", "soon"], "not a duration"),
    (["status", "--warehouse", "/nonexistent/warehouse"], "does not exist"),
    (["replay", ALERTS, "--from", "2026-01-01T00:00", "--to", "2026-01-01T00:30"], "whole number of 1:00:00"),
])
def test_errors_are_one_clear_line_and_exit_1(argv, message, capsys):
    assert main(argv) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert err[0].startswith("finalresults: error: ") and message in err[0]


def test_run_without_its_landing_table_is_one_clear_line_and_writes_nothing(spark, tmp_path, capsys):
    landing, warehouse = tmp_path / "landing", tmp_path / "warehouse"
    argv = ["run", ALERTS, "--batch-start", "2026-01-01T00:00", "--warehouse", str(warehouse), "--landing", str(landing)]
    assert main(argv) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(
        f"finalresults: error: landing table 'user_events' not found at {landing / 'user_events'}; fill it first")
    assert not warehouse.exists()


def test_missing_arguments_exit_2(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["run", ALERTS])
    assert exit_.value.code == 2
    assert "--batch-start" in capsys.readouterr().err


def test_describe_shows_topology_and_tables(capsys):
    assert main(["describe", "jobs.page_sessions", "--warehouse", "/lake"]) == 0
    out = capsys.readouterr().out
    assert "SessionWindows(gap=1800000ms, grace=300000ms)" in out
    assert "/lake/page_sessions/page_session_windows" in out


@pytest.mark.slow
def test_backfill_status_validate(spark, tmp_path, capsys, monkeypatch):
    sys.path.insert(0, str(ROOT))
    from jobs import sample_data

    landing, warehouse = str(tmp_path / "landing"), str(tmp_path / "warehouse")
    sample_data.generate(spark, landing, START, END, tables=("user_events",))
    paths = ["--warehouse", warehouse, "--landing", landing]
    backfill = ["backfill", ALERTS, "--from", START.isoformat(), "--to", END.isoformat(), *paths]

    assert main(backfill) == 0
    assert [line.split(": ")[1].split(" (")[0] for line in capsys.readouterr().out.splitlines()] == ["committed"] * 3
    assert main(backfill) == 0
    assert capsys.readouterr().out.count("already committed") == 3

    assert main(["status", "--warehouse", warehouse]) == 0
    status = capsys.readouterr().out
    assert "last batch     2026-01-01T02:00:00 (seq 3)" in status and "open windows" in status

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
