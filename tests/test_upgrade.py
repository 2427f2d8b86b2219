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
