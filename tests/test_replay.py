"""Replay (docs/design.md#replay): a committed range re-run from the state before it, its results replaced
atomically. Each test starts from a copy of one three-batch warehouse (a Delta table copied with
its log is the same table)."""

import shutil
from datetime import timedelta as td

import pytest
from delta.tables import DeltaTable
from harness import frame, run_stream
from pyspark.sql import functions as F
from test_exactly_once import BATCHES, pipeline, snapshot
from test_operations import _in_thread, _Paused

from framework import BufferConfig, ConcurrentBatchError, Pipeline, ReplayError, Runtime, Suppressed, TimeWindows, agg
from framework.operations.replay import ReplayBatch

IDS = ["b0000", "b0001", "b0002"]
FIXED = [("A", 25, 40), ("A", 3, 5), ("B", 14, 6), ("B", 31, 7)]  # b0001 with A@25 corrected: 4 -> 40


def _offset(index):
    return sum(len(b) for b in BATCHES[:index])


def _batches(spark, first, batches=BATCHES):
    return [ReplayBatch(IDS[i], frame(spark, batches[i], _offset(i))) for i in range(first, len(batches))]


def _tables(rt, p):
    """Every table a reader sees, minus the ledger (a replay records itself there) and the
    metrics' wall-clock column."""
    return {k: v for k, v in snapshot(rt, p).items() if k != "ledger"}


@pytest.fixture(scope="module")
def template(spark, tmp_path_factory):
    root = tmp_path_factory.mktemp("replay") / "template"
    run_stream(Runtime(spark, str(root), quality=False), pipeline("replay"), BATCHES)
    return root


@pytest.fixture(scope="module")
def fixed_template(spark, tmp_path_factory):
    """A clean run of the fixed input: what a replay with the fix must leave."""
    root = tmp_path_factory.mktemp("replay") / "fixed"
    run_stream(Runtime(spark, str(root), quality=False), pipeline("replay"), [BATCHES[0], FIXED, BATCHES[2]])
    return root


def _copy(template, lake) -> str:
    """A copy of a template warehouse at ``lake`` (a Delta table copied with its log is the same table)."""
    shutil.copytree(template, lake)
    return str(lake)


@pytest.fixture
def rt(spark, template, tmp_path):
    return Runtime(spark, _copy(template, tmp_path / "lake"), quality=False)


def _committed(rt, p):
    return [
        (r.seq, r.batch_id, r.fingerprint, r.stream_time)
        for r in rt.read_ledger(p).filter("status = 'committed'").orderBy("seq").collect()
    ]


def test_replaying_the_same_range_twice_changes_nothing(rt):
    p = pipeline("replay")
    tables, committed = _tables(rt, p), _committed(rt, p)
    for _ in range(2):
        result = rt.replay(p, _batches(rt.spark, 1))
        assert (result.first, result.last, [b.seq for b in result.batches]) == ("b0001", "b0002", [2, 3])
        assert _tables(rt, p) == tables and _committed(rt, p) == committed
    statuses = [r.status for r in rt.read_ledger(p).filter("seq >= 2").collect()]
    assert sorted(statuses) == ["committed"] * 2 + ["replaced"] * 4
    again = rt.run_batch(p, "b0001", frame(rt.spark, BATCHES[1], _offset(1)))
    assert again.status == "already committed" and again.seq == 2


def test_a_replay_with_fixed_input_changes_exactly_the_affected_window(rt, spark, fixed_template, tmp_path):
    p = pipeline("replay")
    before = {(r.k, r.window_start): r for r in rt.read_output(p).collect()}
    result = rt.replay(p, _batches(spark, 1, [BATCHES[0], FIXED, BATCHES[2]]))
    after = {(r.k, r.window_start): r for r in rt.read_output(p).collect()}
    changed = {key for key in before.keys() | after.keys() if before.get(key) != after.get(key)}
    assert [(k, str(start)) for k, start in changed] == [("A", "1970-01-01 00:00:00.020000")]
    assert after[next(iter(changed))].total == 40 and result.removed == result.emitted

    clean = Runtime(spark, _copy(fixed_template, tmp_path / "clean"), quality=False)
    assert _tables(rt, p) == _tables(clean, p)
    assert rt.run_batch(p, "b0001", frame(spark, FIXED, _offset(1))).status == "already committed"


def test_a_replay_must_reach_the_last_committed_batch(rt, spark):
    p = pipeline("replay")
    with pytest.raises(ReplayError, match=r"1 later committed batch\(es\) \('b0002'..'b0002'\).*'b0002'"):
        rt.replay(p, _batches(spark, 1)[:1])
    with pytest.raises(ReplayError, match="'b0009' is not committed"):
        rt.replay(p, [("b0009", frame(spark, BATCHES[2]))])


def test_a_replay_whose_restore_point_was_vacuumed_fails_naming_it(rt, spark):
    p = pipeline("replay")
    path = rt.tables(p).state
    needed = rt.read_ledger(p).filter("status = 'committed' AND batch_id = 'b0001'").first().state_version
    spark.conf.set("spark.databricks.delta.retentionDurationCheck.enabled", "false")
    try:
        DeltaTable.forPath(spark, path).vacuum(0)
    finally:
        spark.conf.unset("spark.databricks.delta.retentionDurationCheck.enabled")
    tables, ledger = snapshot(rt, p), rt.read_ledger(p).count()
    with pytest.raises(ReplayError) as error:
        rt.replay(p, _batches(spark, 1))
    message = str(error.value)
    assert "pipeline 'replay', replay of 'b0001'..'b0002'" in message
    assert f"table '_state' version {needed}" in message and "removed (VACUUM)" in message
    assert snapshot(rt, p) == tables and rt.read_ledger(p).count() == ledger


def test_a_replay_that_dies_leaves_what_readers_see_unchanged(rt, spark):
    """The replay dies before its second batch's staged output: no table a reader sees changed,
    and the next ordinary batch runs from the committed state (the replay's in-place state
    writes are never read)."""
    p = pipeline("replay")
    tables, ledger = snapshot(rt, p), rt.read_ledger(p).count()
    outputs = []

    def hook(point):
        if point == "output":
            outputs.append(point)
            if len(outputs) == 2:
                raise RuntimeError("replay dies")

    replaying = Runtime(spark, rt.warehouse, quality=False, before_write=hook)
    with pytest.raises(RuntimeError, match="replay dies"):
        replaying.replay(p, _batches(spark, 1, [BATCHES[0], FIXED, BATCHES[2]]))
    assert {k: v for k, v in snapshot(rt, p).items() if k != "state"} == {
        k: v for k, v in tables.items() if k != "state"
    } and rt.read_ledger(p).count() == ledger
    assert rt.run_batch(p, "b0003", frame(spark, [("A", 90, 9)], 100)).seq == 4
    assert rt.read_output(p).filter(F.col("emitted_batch_id") == "b0003").count() > 0


def test_a_replay_restores_a_rate_limiting_buffer(spark, tmp_path):
    """The buffer is one of the tables the ledger versions: restored like window state. B@31's
    fix changes what leaves the buffer when stream time reaches 41."""
    p = (
        Pipeline("replay_rate", timestamp="ts", arrival="seq")
        .group_by("k")
        .aggregate(agg.latest("v", "v"))
        .suppress(Suppressed.until_time_limit(td(milliseconds=10), BufferConfig.unbounded()).with_name("rate"))
        .to("out")
    )
    fixed = [BATCHES[0], [("A", 25, 4), ("A", 3, 5), ("B", 14, 6), ("B", 31, 70)], BATCHES[2]]
    rt, clean = (Runtime(spark, str(tmp_path / name), quality=False) for name in ("lake", "clean"))
    run_stream(rt, p, BATCHES)
    before = _tables(rt, p)["output"]
    rt.replay(p, _batches(spark, 1, fixed))
    run_stream(clean, p, fixed)

    def buffer(r):
        return sorted(map(str, spark.read.format("delta").load(r.tables(p).buffer("rate")).collect()))

    assert _tables(rt, p) == _tables(clean, p) and buffer(rt) == buffer(clean)
    assert _tables(rt, p)["output"] != before


def test_two_replays_of_one_range_at_once_keep_the_winners_fix(spark, template, fixed_template, tmp_path):
    """Replay 1 is under way when replay 2 (with the fix) runs and commits; replay 1 then dies.
    Nothing of replay 1 is published or undone over replay 2, and the next batch builds on the fix."""
    p = pipeline("replay")
    lake = _copy(template, tmp_path / "lake")
    fixed = [BATCHES[0], FIXED, BATCHES[2]]
    slow = _Paused("commit_point")

    def dies(at):
        slow(at)
        if at == "publish":
            raise RuntimeError("replay 1 dies")

    first = _in_thread(
        lambda: Runtime(spark.newSession(), lake, quality=False, before_write=dies).replay(
            p, _batches(spark, 1, BATCHES)
        )
    )
    assert slow.reached.wait(300)
    rt = Runtime(spark.newSession(), lake, quality=False)
    assert rt.replay(p, _batches(spark, 1, fixed)).emitted > 0
    slow.go.set()
    outcome = first()
    assert isinstance(outcome.get("error"), (ConcurrentBatchError, RuntimeError)), outcome
    assert rt.read_output(p).filter((F.col("k") == "A") & (F.unix_millis("window_start") == 20)).first().total == 40
    rt.run_batch(p, "b0003", frame(spark, [("A", 90, 9)], 100))
    clean = Runtime(spark.newSession(), _copy(fixed_template, tmp_path / "clean"), quality=False)
    clean.run_batch(p, "b0003", frame(spark, [("A", 90, 9)], 100))
    assert {k: v for k, v in snapshot(rt, p).items() if k != "ledger"} == {
        k: v for k, v in snapshot(clean, p).items() if k != "ledger"
    }


def test_a_replay_and_the_next_batch_at_once_one_wins_and_the_other_changes_nothing(spark, template, tmp_path):
    p = pipeline("replay")
    lake = _copy(template, tmp_path / "lake")
    paused = _Paused("commit_point")
    replaying = _in_thread(
        lambda: Runtime(spark.newSession(), lake, quality=False, before_write=paused).replay(
            p, _batches(spark, 1, [BATCHES[0], FIXED, BATCHES[2]])
        )
    )
    assert paused.reached.wait(300)
    rt = Runtime(spark.newSession(), lake, quality=False)
    assert rt.run_batch(p, "b0003", frame(spark, [("A", 90, 9)], 100)).status == "committed"
    paused.go.set()
    outcome = replaying()
    assert isinstance(outcome.get("error"), ConcurrentBatchError), outcome
    assert "published nothing" in str(outcome["error"])
    clean = Runtime(spark.newSession(), _copy(template, tmp_path / "clean"), quality=False)
    clean.run_batch(p, "b0003", frame(spark, [("A", 90, 9)], 100))
    assert snapshot(rt, p) == snapshot(clean, p)


def test_a_replay_of_an_emit_on_update_table_equals_a_clean_run_of_the_fixed_input(spark, tmp_path):
    """Without suppression the sink is MERGEd per batch: the replay publishes it in one commit,
    as of before the range with the range's changes."""
    p = (
        Pipeline("replay_updates", timestamp="ts", arrival="seq")
        .group_by("k")
        .windowed_by(TimeWindows.of_size_and_grace(10, 2))
        .aggregate(agg.count("n"), agg.sum("v", "total"))
        .to("out")
    )
    fixed = [BATCHES[0], FIXED, BATCHES[2]]
    rt, clean = (Runtime(spark, str(tmp_path / name), quality=False) for name in ("lake", "clean"))
    run_stream(rt, p, BATCHES)
    before = _tables(rt, p)["output"]
    rt.replay(p, _batches(spark, 1, fixed))
    run_stream(clean, p, fixed)
    assert {k: v for k, v in _tables(rt, p).items() if k != "state"} == {
        k: v for k, v in _tables(clean, p).items() if k != "state"
    }
    assert _tables(rt, p)["output"] != before
    rt.replay(p, _batches(spark, 1, fixed))  # again: nothing changes
    assert _tables(rt, p)["output"] == _tables(clean, p)["output"]
