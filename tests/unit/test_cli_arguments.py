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
        (["status", "--last", "-1"], "--last must be 0 or more"),
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
    assert "SessionWindows(gap=30min, grace=5min)" in out
    assert "/lake/page_sessions/page_session_windows" in out


def test_durations_read_as_a_person_reads_them_but_the_recorded_definition_keeps_its_text():
    """``describe`` words durations for people; the definition a ledger row records (and a
    later batch compares) keeps the text earlier versions recorded, or every pipeline would
    refuse its next batch as a changed definition."""
    from datetime import timedelta as td

    from framework import BufferConfig, Pipeline, SlidingWindows, Suppressed, TimeWindows, agg
    from framework.definition.windows import duration_text
    from framework.operations.planning import definition

    assert [duration_text(ms) for ms in (0, 250, 45_000, 5_400_000, 90_061_001)] == [
        "0s",
        "250ms",
        "45s",
        "1h30min",
        "1d1h1min1s1ms",
    ]

    def counting(windows):
        return Pipeline("p", timestamp="ts").group_by("k").windowed_by(windows).aggregate(agg.count("n"))

    hopping = counting(TimeWindows.of_size_and_grace(td(hours=1), td(0)).advance_by(td(minutes=15)))
    assert "TimeWindows(hopping advance=15min, size=1h, grace=0s)" in hopping.describe()
    assert "windows=TimeWindows(hopping advance=900000ms, size=3600000ms, grace=0ms);" in definition(hopping)
    sliding = counting(SlidingWindows.of_time_difference_and_grace(td(seconds=10), td(seconds=2)))
    assert "SlidingWindows(size=10s, grace=2s)" in sliding.describe()
    assert "windows=SlidingWindows(size=10000ms, grace=2000ms) holding windows;" in definition(sliding)
    limited = hopping.suppress(Suppressed.until_time_limit(td(minutes=2), BufferConfig.unbounded()))
    assert "limit=2min" in limited.describe()


@pytest.mark.parametrize(
    "argv, says",
    [
        (["status", "--warehous", "/lake"], "unrecognized arguments: --warehous"),  # no abbreviations
        (["describe", ALERTS, "--bogus"], "unrecognized arguments: --bogus"),
        (["status", "--json", "--html", "x.html"], "not allowed with argument"),
    ],
)
def test_bad_flags_exit_2_with_the_commands_own_usage(argv, says, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and says in err
    assert err.startswith(f"usage: finalresults {argv[0]} ")


def test_version(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0 and capsys.readouterr().out.startswith("finalresults ")


def test_paths_are_checked_before_spark_starts(tmp_path, capsys):
    """No JVM runs in tests/unit: each of these must fail before Spark would start."""
    a_file = tmp_path / "a_file"
    a_file.write_text("")
    landing = tmp_path / "landing"
    run = ["run", ALERTS, "--batch-start", "2026-01-01T00:00"]
    cases = [
        (
            [*run, "--warehouse", str(tmp_path / "w"), "--landing", str(landing)],
            f"landing table 'user_events' not found at {landing / 'user_events'}; fill it first",
        ),
        ([*run, "--warehouse", str(a_file / "w"), "--landing", str(landing)], f"{a_file} is a file, not a folder"),
        (["status", "--warehouse", str(a_file)], f"{a_file} is a file, not a folder"),
        (["validate", ALERTS, "--warehouse", str(a_file)], f"{a_file} is a file, not a folder"),
    ]
    for argv, message in cases:
        assert main(argv) == 1
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("finalresults: error: ") and message in err[0], err
    assert not (tmp_path / "w").exists()
