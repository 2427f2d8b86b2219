"""The command line without Spark: --help everywhere, one-line errors with exit 1, exit 2 on
missing arguments, and ``describe``."""

import subprocess
import sys
from pathlib import Path

import pytest

from framework.orchestration.cli import main

ROOT = Path(__file__).resolve().parents[2]
ALERTS = str(ROOT / "jobs" / "user_alerts.py")
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


@pytest.mark.parametrize(
    "argv, message",
    [
        (["describe", "jobs/missing.py"], "job file 'jobs/missing.py' not found"),
        (["describe", "no_such_package.job"], "job 'no_such_package.job' not found"),
        (["describe", str(ROOT / "jobs" / "sample_data.py")], "has no PIPELINE"),
        (["run", ALERTS, "--batch-start", "yesterday"], "--batch-start 'yesterday' is not an ISO timestamp"),
        (
            ["run", ALERTS, "--batch-start", "2026-01-01T01:00", "--batch-end", "2026-01-01T00:00"],
            "must be before batch end",
        ),
        (["backfill", ALERTS, "--from", "2026-01-01T00:00", "--to", "2026-01-01T01:30"], "whole number of 1:00:00"),
        (["backfill", ALERTS, "--from", "2026-01-01", "--to", "2026-01-02", "--every", "soon"], "not a duration"),
        (["status", "--warehouse", "/nonexistent/warehouse"], "does not exist"),
        (["replay", ALERTS, "--from", "2026-01-01T00:00", "--to", "2026-01-01T00:30"], "whole number of 1:00:00"),
    ],
)
def test_errors_are_one_clear_line_and_exit_1(argv, message, capsys):
    assert main(argv) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert err[0].startswith("finalresults: error: ") and message in err[0]


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
