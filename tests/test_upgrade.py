"""A warehouse written by the layout before ``_state`` (``tests/fixtures/legacy_warehouse``, made
by ``make_legacy_warehouse.py`` with main at 690eb35) keeps working: its next batch upgrades it,
and every pipeline ends with the rows the old code gave for the same batches."""

import json
import os
import shutil
from pathlib import Path

import pytest
from fixtures.make_legacy_warehouse import FIRST, LATER, pipelines, rows, run

from framework import Runtime

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture
def legacy(tmp_path):
    copy = tmp_path / "lake"
    shutil.copytree(FIXTURES / "legacy_warehouse", copy)
    return str(copy)


def test_the_next_batch_upgrades_and_continues_as_the_old_code_did(spark, legacy):
    expected = json.loads((FIXTURES / "legacy_expected.json").read_text())
    rt = Runtime(spark, legacy, quality=False)
    for p in pipelines():
        old_late = rt.read_late(p).count() if p.name == "legacy_final" else None
        run(rt, p, LATER, len(FIRST))
        assert rows(rt, p) == expected[p.name], p.name
        assert os.path.isdir(os.path.join(legacy, p.name, "_state"))
        assert [r.seq for r in rt.read_metrics(p).orderBy("seq").collect()] == [1, 2, 3, 4], p.name
        if old_late is not None:  # one late record before the upgrade, one after
            assert old_late == 1 and rt.read_late(p).count() == 2
    # a committed batch of before the upgrade is still known as such
    p = pipelines()[0]
    assert rt.run_batch(p, "b0000", _first_input(rt)).status == "already committed"


def _first_input(rt):
    from harness import frame

    return frame(rt.spark, FIRST[0], 0)


def test_an_upgrade_killed_half_way_runs_again(spark, legacy):
    """A killed upgrade leaves data files in ``_state`` and no commit: the next batch upgrades."""
    p = pipelines()[0]
    state = Path(legacy, p.name, "_state")
    state.mkdir()
    shutil.copy(next(Path(legacy, p.name, "window_state").rglob("*.parquet")), state / "part-00000-killed.parquet")
    rt = Runtime(spark, legacy, quality=False)
    run(rt, p, LATER, len(FIRST))
    expected = json.loads((FIXTURES / "legacy_expected.json").read_text())
    assert rows(rt, p) == expected[p.name]


def test_a_batch_staged_by_the_version_before_is_published_after_the_upgrade(spark, tmp_path):
    """Earlier versions named a staging folder's markers ``_publish.json`` and ``_batch_id``
    (hidden from Spark Connect's reads, so renamed). A batch they committed but did not publish
    is published by the next run, once: its rows are not taken for gone."""
    from harness import frame, results, unsunk

    class Stop(Exception):
        pass

    def stop_at_publish(at):
        if at == "publish":
            raise Stop

    p = unsunk("renamed").to("out")
    batches = [[("A", 1, 1), ("B", 4, 2)], [("A", 12, 3)], [("B", 30, 4)]]
    clean = Runtime(spark, str(tmp_path / "clean"), quality=False)
    for i, batch in enumerate(batches):
        clean.run_batch(p, f"b{i}", frame(spark, batch, i * 10))
    rt = Runtime(spark, str(tmp_path / "lake"), quality=False)
    rt.run_batch(p, "b0", frame(spark, batches[0], 0))
    crashing = Runtime(spark, str(tmp_path / "lake"), quality=False, before_write=stop_at_publish)
    with pytest.raises(Stop):
        crashing.run_batch(p, "b1", frame(spark, batches[1], 10))
    (folder,) = Path(rt.tables(p).staging).iterdir()
    (folder / "publish.json").rename(folder / "_publish.json")  # as the version before named them
    (folder / "batch_id").rename(folder / "_batch_id")
    assert rt.run_batch(p, "b1", frame(spark, batches[1], 10)).status == "already committed"
    rt.run_batch(p, "b2", frame(spark, batches[2], 20))
    assert results(rt, p) == results(clean, p) and len(results(rt, p)) == 3
