"""A pipeline's versions (docs/operations.md#changing-a-pipeline): a changed definition built beside
the running one over the landing history, compared with it, switched to and back, with no
interval lost or run twice; the switch's steps crashed one by one and finished by running it again;
an attempt of the old version under way while the switch lands; two switches at once."""

import datetime as dt
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from harness import AGGREGATES, frame
from test_operations import _in_thread, _Paused

from framework import (
    BufferConfig,
    ConcurrentBatchError,
    Pipeline,
    Runtime,
    Suppressed,
    TimeWindows,
    VersionError,
    VersionSwitchedError,
    agg,
)
from framework.operations import versions as versioning
from framework.orchestration.cli import main
from framework.orchestration.jobs import load_job
from framework.storage import versions

ROOT = Path(__file__).resolve().parents[1]
START = dt.datetime(2026, 1, 1)
HOUR = dt.timedelta(hours=1)

JOB = ROOT / "tests" / "fixtures" / "user_alerts_versions.py"


def _hours(first, last):
    return [f"{(START + h * HOUR).isoformat()}" for h in range(first, last)]


def _committed(rt, p):
    return [r.batch_id for r in rt.read_ledger(p).filter("status = 'committed'").orderBy("seq").collect()]


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_a_version_is_built_compared_switched_to_and_back_from_the_command_line(spark, tmp_path, capsys):
    sys.path.insert(0, str(ROOT))
    from jobs import sample_data

    landing, warehouse = str(tmp_path / "landing"), str(tmp_path / "warehouse")
    sample_data.generate(spark, landing, START, START + 7 * HOUR, tables=("user_events",))
    job = JOB
    defined = {p.version: p for p in (load_job(str(job)).PIPELINE, *load_job(str(job)).VERSIONS)}
    v1, v2 = defined[1], defined[2]
    wh = ["--warehouse", warehouse]
    paths = [*wh, "--landing", landing]
    rt = Runtime(spark, warehouse)

    def hours(first, last):
        return ["--from", (START + first * HOUR).isoformat(), "--to", (START + last * HOUR).isoformat()]

    # The pipeline runs version 1 (no switch yet), though the job's PIPELINE is version 2.
    assert main(["backfill", str(job), *hours(0, 3), *paths]) == 0
    assert _committed(rt, v1) == _hours(0, 3) and _committed(rt, v2) == []
    assert "last_seq" not in rt.read_output(v2).columns  # readers read the pipeline's version: 1

    assert main(["versions", "switch", str(job), "--to", "2", *wh]) == 1
    assert "version 2 is behind" in " ".join(capsys.readouterr().err.split())
    assert main(["versions", "build", str(job), "--version", "2", "--from", START.isoformat(), *paths]) == 0
    assert _committed(rt, v2) == _hours(0, 3)
    assert main(["versions", "compare", str(job), "--version", "2", *wh]) == 0
    compared = capsys.readouterr().out
    assert "over the 3 intervals both committed" in compared and "columns added ['last_seq']" in compared
    assert ", only in version 1 0, only in version 2 0, values differ 0" in compared, compared

    # The pipeline runs on meanwhile; the build follows it again, then the switch lands.
    assert main(["run", str(job), "--from", (START + 3 * HOUR).isoformat(), *paths]) == 0
    assert main(["versions", "switch", str(job), "--to", "2", *wh]) == 1
    assert main(["versions", "build", str(job), "--version", "2", "--from", START.isoformat(), *paths]) == 0
    assert _committed(rt, v2) == _hours(0, 4)
    assert main(["versions", "switch", str(job), "--to", "2", *wh]) == 0
    assert "version 1 -> 2 from 2026-01-01 04:00:00" in capsys.readouterr().out
    assert "last_seq" in rt.read_output(v1).columns  # whichever definition a reader holds
    assert "last_seq" not in rt.read_output(v1, version=1).columns  # the old version's table stays
    assert main(["status", *wh]) == 0  # what the plugin's page shows too: the switch, the last comparison
    shown = capsys.readouterr().out
    assert "  versions       switch 1: version 1 -> 2 from 2026-01-01 04:00:00" in shown, shown
    assert "version 2 against version 1, over the 3 intervals both committed:" in shown, shown

    # The next run is version 2's; version 1 refuses a batch of its own.
    assert main(["run", str(job), "--from", (START + 4 * HOUR).isoformat(), *paths]) == 0
    assert _committed(rt, v2) == _hours(0, 5) and _committed(rt, v1) == _hours(0, 4)
    events = spark.read.format("delta").load(f"{landing}/user_events")
    with pytest.raises(VersionSwitchedError, match="switched from version 1 to version 2"):
        rt.run_batch(v1, "2026-01-01T04:00:00", events.limit(1))

    # Back to version 1: it follows version 2's interval first, then the switch back lands.
    assert main(["versions", "switch", str(job), "--to", "1", *wh]) == 1
    assert main(["versions", "build", str(job), "--version", "1", "--from", START.isoformat(), *paths]) == 0
    assert main(["versions", "switch", str(job), "--to", "1", *wh]) == 0
    assert main(["run", str(job), "--from", (START + 5 * HOUR).isoformat(), *paths]) == 0
    assert main(["run", str(job), "--from", (START + 6 * HOUR).isoformat(), *paths]) == 0
    assert _committed(rt, v1) == _hours(0, 7) and _committed(rt, v2) == _hours(0, 5)
    assert main(["versions", "list", str(job), *wh]) == 0
    listed = capsys.readouterr().out
    assert "version 1: batch '2026-01-01T06:00:00'" in listed and "(the pipeline)" in listed
    assert "switch 2: version 2 -> 1 from 2026-01-01 05:00:00" in listed, listed

    # Version 1's table is the one a run of the seven hours one by one leaves, to the emission stamp.
    one_by_one = Runtime(spark, str(tmp_path / "one_by_one"))
    for h in range(7):
        start = START + h * HOUR
        hour = events.filter((events.ingest_time >= start) & (events.ingest_time < start + HOUR))
        one_by_one.run_batch(v1, start.isoformat(), hour, batch_start=start, batch_end=start + HOUR)
    assert sorted(rt.read_output(v1).collect()) == sorted(one_by_one.read_output(v1).collect())
    assert rt.read_output(v1).count() > 0


def _pipeline(version, *aggregates):
    return (
        Pipeline("switched", timestamp="ts", arrival="seq", version=version)
        .group_by("k")
        .windowed_by(TimeWindows.of_size_and_grace(10, 2))
        .aggregate(*(aggregates or AGGREGATES))
        .suppress(Suppressed.until_window_closes(BufferConfig.unbounded()))
        .to("out")
    )


BATCHES = [[("a", 1, 1), ("b", 4, 2)], [("a", 13, 3), ("b", 15, 4)], [("a", 27, 5)], [("b", 41, 6)], [("a", 55, 7)]]


def _run(rt, p, k, **options):
    at = dt.datetime(1970, 1, 1) + dt.timedelta(milliseconds=k * 14)
    return rt.run_batch(
        p,
        f"b{k}",
        frame(rt.spark, BATCHES[k], k * 10),
        batch_start=at,
        batch_end=at + dt.timedelta(milliseconds=14),
        **options,
    )


class Crash(Exception):
    pass


def _crash_at(step):
    def before(at):
        if at == step:
            raise Crash(step)

    return before


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_switch_crashed_at_each_step_is_finished_by_running_it_again(spark, tmp_path):
    """A catalog schema holds the pipeline's names; the switch is crashed before each of its steps
    in turn (sealing the old version, recording the switch, opening a version switched back to,
    pointing the catalog) and run again: each time the pipeline ends switched, its names pointing
    at the version switched to, and the version switched from refusing batches."""
    warehouse = str(tmp_path / "lake")
    rt, follower = Runtime(spark, warehouse, catalog="versions_lake"), Runtime(spark, warehouse, following=True)
    v1, v2 = _pipeline(1), _pipeline(2, *AGGREGATES, agg.sum("v", "extra"))
    defined = {1: v1, 2: v2}
    for k in range(2):
        _run(rt, v1, k)
        _run(follower, v2, k)

    def switched_to(version, other):
        assert rt.current_version(v1) == version
        assert ("extra" in spark.table("versions_lake.out").columns) == (version == 2)
        assert spark.table("versions_lake.out").count() == rt.read_output(v1).count()
        with pytest.raises(VersionSwitchedError):
            _run(Runtime(spark, warehouse), defined[other], 2)

    for to, other, step in ((2, 1, "seal"), (1, 2, "record"), (2, 1, "open"), (1, 2, "catalog")):
        with pytest.raises(Crash):
            versioning.switch(rt, defined, to, before=_crash_at(step))
        if step in ("record",):  # sealed, not switched: no version runs until the switch is finished
            with pytest.raises(VersionSwitchedError, match="did not finish"):
                _run(Runtime(spark, warehouse), defined[other], 2)
        versioning.switch(rt, defined, to)
        switched_to(to, other)
    assert [s.version for s in versions.switches(spark, warehouse, "switched")] == [2, 1, 2, 1]

    # A version that drops a column of the results is refused unless the operator says so.
    v3 = _pipeline(3, agg.count("n"))
    for k in range(2):
        _run(follower, v3, k)
    with pytest.raises(VersionError, match="would break the results table's readers"):
        versioning.switch(rt, {**defined, 3: v3}, 3)
    assert rt.current_version(v1) == 1
    versioning.switch(rt, {**defined, 3: v3}, 3, breaking_columns=True)
    assert spark.table("versions_lake.out").columns[:4] == ["k", "window_start", "window_end", "n"]


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_an_attempt_of_the_old_version_under_way_is_fenced_out_by_the_switch(spark, tmp_path):
    """A batch of version 1 paused before its commit point while the switch to version 2 lands
    commits nothing; the interval runs in version 2, once. Two switches at once record one."""
    warehouse = str(tmp_path / "lake")
    rt, follower = Runtime(spark, warehouse), Runtime(spark, warehouse, following=True)
    v1, v2 = _pipeline(1), _pipeline(2)
    for k in range(2):
        _run(rt, v1, k)
        _run(follower, v2, k)
    paused = _Paused("commit_point")
    first = _in_thread(lambda: _run(Runtime(spark.newSession(), warehouse, before_write=paused), v1, 2))
    assert paused.reached.wait(300)
    both = [
        _in_thread(lambda: versioning.switch(Runtime(spark.newSession(), warehouse), {1: v1, 2: v2}, 2))
        for _ in range(2)
    ]
    outcomes = [join() for join in both]
    paused.go.set()
    assert isinstance(first().get("error"), ConcurrentBatchError)
    assert [s.version for s in versions.switches(spark, warehouse, "switched")] == [2]
    assert all("value" in o or isinstance(o["error"], VersionError) for o in outcomes), outcomes
    assert _committed(rt, v1) == ["b0", "b1"]
    assert _run(rt, v2, 2).status == "committed" and _committed(rt, v2) == ["b0", "b1", "b2"]


@pytest.mark.slow
@pytest.mark.timeout(1800)  # three spark-submits under Airflow and two commands: minutes on 2 busy cores
def test_a_version_switched_between_two_airflow_runs_is_what_readers_read_from_the_next_run(spark, tmp_path):
    """Airflow runs hours 0 and 1 of version 1; version 2 (one more aggregate) is built and
    switched to; Airflow's run of hour 2 runs version 2. A reader reads version 1's rows before
    the switch, version 2's after (the same windows, and the new column); each hour is one
    batch of the version that ran it and one asset event, none lost or doubled."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "FINALRESULTS", "SPARK_REMOTE"))}
    done = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "airflow_versions.py"), str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=1700,
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-5000:]
    assert "version 1 -> 2 from 2026-01-01 02:00:00" in done.stdout, done.stdout[-3000:]
    before, after = (json.loads((tmp_path / f"{name}.json").read_text()) for name in ("before", "after"))
    assert "last_seq" not in before["columns"] and "last_seq" in after["columns"]
    window = lambda r: (r["user_id"], r["window_start"], r["events"], r["emitted_batch_id"])  # noqa: E731
    earlier = [r for r in after["rows"] if r["emitted_batch_id"] in _hours(0, 2)]
    assert before["rows"] and sorted(map(window, earlier)) == sorted(map(window, before["rows"]))
    assert {r["emitted_batch_id"] for r in after["rows"]} - {r["emitted_batch_id"] for r in before["rows"]} == {
        "2026-01-01T02:00:00"
    }
    assert all(r["last_seq"] is not None for r in after["rows"])

    rt, defined = Runtime(spark, str(tmp_path / "warehouse")), load_job(str(tmp_path / "jobs" / "user_alerts.py"))
    assert _committed(rt, defined.VERSIONS[0]) == _hours(0, 2) and _committed(rt, defined.PIPELINE) == _hours(0, 3)
    with sqlite3.connect(tmp_path / "airflow" / "airflow.db") as db:
        extras = [json.loads(extra) for (extra,) in db.execute("SELECT extra FROM asset_event ORDER BY id")]
    assert [e["batch_id"] for e in extras] == _hours(0, 3)
