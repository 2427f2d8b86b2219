"""A range run in chunks equals the same intervals run one by one (docs/design.md#chunks).

Random streams (keys, event times, values; now and then a record without a key, which a
quarantining pipeline sets aside), random interval lengths (empty intervals too) and random
chunk sizes: the pipeline runs each interval as its own batch, and the same range through
``Runtime.run_range``. The results table (``emitted_batch_id`` and ``emitted_stream_time``
included), the late and rejected records and every ledger row (batch id, seq, interval,
fingerprint, stream time before and after, metrics but the duration) must be the same, and
the results those of the reference model for the per-interval split.
"""

import datetime as dt
import json
import signal
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import pytest
import reference as ref
from harness import AGGREGATES, expected, in_parallel, results, rows_of
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from pyspark.sql import functions as F

from framework import (
    BufferConfig,
    ConcurrentBatchError,
    FingerprintMismatchError,
    InputError,
    Interval,
    Pipeline,
    QualityGateError,
    Range,
    ReplayError,
    Runtime,
    SessionWindows,
    SlidingWindows,
    Suppressed,
    TimeWindows,
)
from framework.execution.streamtime import INLINE_SEARCH, NO_TIME, first_reaching
from framework.operations.chunk import ChunkAttempt, placed
from framework.storage import tables
from framework.storage.ledger import Ledgers

T0 = dt.datetime(2026, 1, 1)
WINDOWS = {
    "tumbling": (lambda g: TimeWindows.of_size_and_grace(10, g), lambda g: ref.Tumbling(10, g)),
    "hopping": (lambda g: TimeWindows.of_size_and_grace(10, g).advance_by(5), lambda g: ref.Tumbling(10, g, 5)),
    "session": (lambda g: SessionWindows.of_inactivity_gap_and_grace(4, g), lambda g: ref.Session(4, g)),
    "sliding": (lambda g: SlidingWindows.of_time_difference_and_grace(10, g), lambda g: ref.Sliding(10, g)),
}
LEDGER = ("seq", "batch_id", "status", "fingerprint", "records_in", "stream_time_before", "stream_time")
LEDGER += ("windows_open", "interval_start", "interval_end", "input_schema", "late_schema")


@st.composite
def ranges(draw):
    """Records in arrival order, their split into intervals (some empty) and a chunk bound."""
    recs = draw(
        st.lists(
            st.tuples(st.sampled_from(["A", "B"]), st.integers(0, 40), st.one_of(st.none(), st.integers(-5, 20))),
            min_size=3,
            max_size=10,
        )
    )
    lengths, left = [], len(recs)
    while left:
        n = draw(st.integers(0, min(left, 4)))
        lengths.append(n)
        left -= n
    lengths.append(draw(st.integers(0, 0)))  # an empty last interval: nothing closes in it
    bounds = [0]
    for n in lengths:
        bounds.append(bounds[-1] + n)
    split = [recs[a:b] for a, b in zip(bounds, bounds[1:])]
    return split, draw(st.integers(0, 6)), draw(st.integers(1, len(recs) + 1))


def _landing(spark, split, keyless: int | None):
    """Every interval's records with ``arrived`` in its hour (record ``keyless`` without a key)."""
    rows, seq = [], 0
    for i, batch in enumerate(split):
        for j, (k, ts, v) in enumerate(batch):
            rows.append((seq, None if seq == keyless else k, ts, v, T0 + dt.timedelta(hours=i, seconds=j)))
            seq += 1
    df = spark.createDataFrame(rows, "seq long, k string, ts_ms long, v long, arrived timestamp")
    return df.withColumn("ts", F.timestamp_millis("ts_ms")).drop("ts_ms")


def _range(rt, intervals, split):
    """``intervals`` of the landing records of ``split``, as ``run_range`` takes them."""
    return Range(intervals, _landing(rt.spark, split, None), "arrived")


def _intervals(n):
    hour = dt.timedelta(hours=1)
    return [Interval(f"{T0 + i * hour:%Y-%m-%dT%H}", T0 + i * hour, T0 + (i + 1) * hour) for i in range(n)]


def _tables(rt, p, committed=False):
    """Every table of the pipeline as rows (the duration aside, which differs by run); of the
    ledger the committed rows only, if so asked (a replay's replaced ones aside)."""
    ledger = rt.read_ledger(p).filter("status = 'committed'") if committed else rt.read_ledger(p)
    frames = {"ledger": ledger.select(*LEDGER)}
    if tables.exists(rt.spark, rt.tables(p).output):
        frames["output"] = rt.read_output(p)
    for name, read in (("late", rt.read_late), ("rejected", rt.read_rejected)):
        try:
            frames[name] = read(p)
        except Exception:  # none kept: the other run must keep none either
            pass
    found = rows_of(frames)
    metrics = [json.loads(r.metrics) for r in ledger.orderBy("seq").select("metrics").collect()]
    for m in metrics:
        m.pop("batch_duration_ms")
    return {name: sorted(rows) for name, rows in found.items()}, metrics


def _check(spark, kind, lateness, data, keyless=None, steps=False, updates=False, wide=False):
    """``wide``: the chunked run has 4 shuffle partitions, so its chunks of fewer intervals are
    scanned as one batch (interval first) and longer ones interval by interval."""
    split, grace, bound = data
    make, model = WINDOWS[kind]
    lake, intervals = tempfile.mkdtemp(prefix="chunks-"), _intervals(len(split))

    def pipeline(label):
        p = (
            Pipeline(
                f"{kind}_{label}_{uuid.uuid4().hex[:8]}",
                timestamp="ts",
                arrival="seq",
                lateness=lateness,
                bad_records="quarantine",
            )
            .group_by("k")
            .windowed_by(make(grace))
            .aggregate(*AGGREGATES)
        )
        if updates:  # no suppression: a MERGEd sink, a row per window each interval updated
            return p.to("out")
        p = p.suppress(Suppressed.until_window_closes(BufferConfig.unbounded()))
        return (p.filter("n > 1") if steps else p).to("out")

    def one_by_one():
        rt, p = Runtime(spark.newSession(), lake, quality=False), pipeline("one")
        landing = _landing(rt.spark, split, keyless)
        for iv in intervals:
            mine = landing.filter((F.col("arrived") >= iv.start) & (F.col("arrived") < iv.end))
            rt.run_batch(p, iv.batch_id, mine, batch_end=iv.end, batch_start=iv.start)
        return _tables(rt, p), (rt, p)

    def chunked():
        session = spark.newSession()
        if wide:
            session.conf.set("spark.sql.shuffle.partitions", "4")
        rt, p = Runtime(session, lake, quality=False), pipeline("chunked")
        ran = rt.run_range(p, Range(intervals, _landing(rt.spark, split, keyless), "arrived"), chunk_records=bound)
        assert [r.batch_id for r in ran] == [iv.batch_id for iv in intervals]
        assert all(r.status == "committed" for r in ran)
        again = rt.run_range(p, Range(intervals, _landing(rt.spark, split, keyless), "arrived"), chunk_records=bound)
        assert {r.status for r in again} == {"already committed"}
        return _tables(rt, p), (rt, p)

    (one, (rt, p)), (chunk, _) = in_parallel([one_by_one, chunked])
    assert chunk == one, f"{kind} {lateness} split={[len(b) for b in split]} chunk_records={bound}: " + _diff(
        chunk, one
    )
    if keyless is None and not steps and not updates:
        ids = [iv.batch_id for iv in intervals]
        want = expected(ref.run(model(grace), split, lateness), ids)
        assert (results(rt, p) if tables.exists(rt.spark, rt.tables(p).output) else []) == want


def _diff(chunk, one):
    """Where two runs' tables differ: the rows of each table only one run has, and the metrics."""
    (tables_a, metrics_a), (tables_b, metrics_b) = chunk, one
    lines = [
        f"{name}: chunked only {sorted(set(tables_a.get(name, [])) - set(rows))}, one by one only "
        f"{sorted(set(rows) - set(tables_a.get(name, [])))}"
        for name, rows in tables_b.items()
        if tables_a.get(name) != rows
    ]
    lines += [
        f"metrics of interval {k}: chunked {a}, one by one {b}"
        for k, (a, b) in enumerate(zip(metrics_a, metrics_b))
        if a != b
    ]
    return "\n".join(lines)


def _property(kind, lateness, **options):
    @settings(
        max_examples=2,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
        phases=(Phase.generate,),  # a failing example is reported as drawn: shrinking reruns Spark for minutes
    )
    @given(data=ranges())
    def test(spark, data):
        _check(spark, kind, lateness, data, **options)

    test.__name__ = f"test_{kind}_{lateness}_lateness_chunked_equals_one_by_one" + "".join(f"_{o}" for o in options)
    return test


# tumbling windows judged per batch are hopping windows' simpler case: not run apart (the suite's time)
test_tumbling_record = _property("tumbling", "record", wide=True)
test_hopping_record = _property("hopping", "record")
test_hopping_batch_with_steps_and_rejects = _property("hopping", "batch", keyless=2, steps=True)
test_session_record = _property("session", "record", wide=True)
test_hopping_record_updates = _property("hopping", "record", updates=True)
test_tumbling_batch_updates_with_rejects = _property("tumbling", "batch", keyless=2, updates=True)
test_session_batch_with_steps_and_rejects = _property("session", "batch", keyless=2, steps=True)
test_sliding_record = _property("sliding", "record", wide=True)
test_sliding_batch_with_steps_and_rejects = _property("sliding", "batch", keyless=2, steps=True)


def test_sliding_windows_after_a_chunk_of_empty_intervals(spark):
    """A first chunk of empty intervals has no stream time: sliding windows' state forgets nothing
    (a search found the window bound computed below the smallest long)."""
    _check(spark, "sliding", "record", ([[], [("A", 40, None), ("B", 13, None)], [("B", 5, None)], []], 5, 4))


def test_the_searches_that_place_records_and_windows_in_intervals_equal_bisect_at_every_length(spark):
    """``first_reaching`` (compiled ``CASE`` up to ``INLINE_SEARCH`` thresholds, a constant array
    past it) and ``placed`` (a division for intervals of one length, a search for others) give
    Python's ``bisect`` answers, duplicates and the no-time sentinel included: the property tests
    use a handful of hourly intervals, a month's chunk the other two ways."""
    import bisect
    import random

    rnd = random.Random(62)
    for n in (1, 5, INLINE_SEARCH, INLINE_SEARCH + 1, 300):
        thresholds = sorted([NO_TIME] * rnd.randint(0, 3) + [rnd.randint(0, 50 * n) for _ in range(n)])[:n]
        values = [rnd.randint(-5, 50 * n + 5) for _ in range(200)] + thresholds + [NO_TIME]
        df = spark.createDataFrame([(v,) for v in values], "s long")  # named as a lambda's variable might be
        found = [r[0] for r in df.select(first_reaching("s", thresholds)).collect()]
        assert found == [bisect.bisect_left(thresholds, v) for v in values], n
    hour = dt.timedelta(hours=1)
    for lengths in ([hour] * 200, [hour * rnd.randint(1, 3) for _ in range(200)]):
        starts = [T0]
        for length in lengths:
            starts.append(starts[-1] + length)
        ivs = [Interval(f"{a:%Y-%m-%dT%H}", a, b) for a, b in zip(starts, starts[1:])]
        times = [T0 + dt.timedelta(minutes=rnd.randint(0, int((starts[-1] - T0) / hour) * 60 + 90)) for _ in range(300)]
        times += starts  # each interval's first instant, and the end of the last
        df = spark.createDataFrame([(t,) for t in times], "arrived timestamp")
        found = [r[0] for r in df.select(placed("arrived", ivs)).collect()]
        assert found == [bisect.bisect_right(starts, t) - 1 if t < starts[-1] else len(ivs) for t in times]


# ---- exactly once, chunk by chunk ---------------------------------------------------------------
SPLIT = [
    [("A", 1, 1), ("B", 2, 2)],
    [("A", 12, 3), ("A", 25, 4)],
    [("A", 3, 5), ("B", 14, 6)],  # ts 3 is late: a late record
    [],
    [("B", 31, 7), ("A", 70, 8)],
]


class Crash(Exception):
    pass


def _pipeline(name, merged=False):
    """The test pipeline: final results, or (``merged``) an emit-on-update sink MERGEd batch by batch."""
    p = (
        Pipeline(name, timestamp="ts", arrival="seq")
        .group_by("k")
        .windowed_by(TimeWindows.of_size_and_grace(10, 2))
        .aggregate(*AGGREGATES)
    )
    return (p if merged else p.suppress(Suppressed.until_window_closes(BufferConfig.unbounded()))).to("out")


def _one_by_one(spark, lake, p, intervals, split=SPLIT, expectations=None):
    """The tables of ``split``'s intervals run one batch each (gated by ``expectations``, if given)."""
    gated = {"expectations": expectations} if expectations else {"quality": False}
    rt = Runtime(spark.newSession(), lake, **gated)
    landing = _landing(rt.spark, split, None)
    for iv in intervals:
        mine = landing.filter((F.col("arrived") >= iv.start) & (F.col("arrived") < iv.end))
        rt.run_batch(p, iv.batch_id, mine, batch_end=iv.end, batch_start=iv.start)
    return _tables(rt, p)


def test_a_crash_at_every_write_of_a_chunk_then_maintenance_then_the_range_again_equals_one_by_one(spark, tmp_path):
    """The first interval runs alone; the other four as one chunk that crashes before one of its
    writes, an ``OPTIMIZE`` of its state lands, and the range runs again: it resumes after the
    last committed interval (all of them, when the crash came after the commit point) and every
    table is that of a run of the intervals one by one."""
    intervals, p = _intervals(len(SPLIT)), _pipeline("chunk_crash")
    reference = _one_by_one(spark, str(tmp_path / "one"), p, intervals)

    def crash_at(point):
        lake = str(tmp_path / point)

        def fail(at):
            if at == point:
                raise Crash(point)

        first = Runtime(spark.newSession(), lake, quality=False)
        first.run_range(p, _range(first, intervals[:1], SPLIT))
        crashing = Runtime(spark.newSession(), lake, quality=False, before_write=fail)
        try:
            crashing.run_range(p, _range(crashing, intervals, SPLIT))
            raise AssertionError(f"no crash before {point!r}")
        except Crash:
            pass
        rt = Runtime(spark.newSession(), lake, quality=False)
        rt.spark.sql(f"OPTIMIZE delta.`{rt.tables(p).state}`")  # maintenance between the crash and the re-run
        again = rt.run_range(p, _range(rt, intervals, SPLIT))
        resumed = 5 if point == "publish" else 1  # the chunk committed, or only the interval before it
        assert [r.status for r in again] == ["already committed"] * resumed + ["committed"] * (5 - resumed), point
        return point, _tables(rt, p)

    for point, found in in_parallel([lambda pt=pt: crash_at(pt) for pt in ("output", "commit_point", "publish")], 2):
        assert found == reference, f"crash before {point!r}"


def test_an_interval_of_a_committed_chunk_run_alone_and_two_ranges_at_once(spark, tmp_path):
    """Two runs of the range at once (a retry beside a live first attempt): one commits each
    chunk, the other fails cleanly or finds it committed, and the tables are those of one run.
    An interval of the committed chunk run alone reports 'already committed' with the same
    input and a ``FingerprintMismatchError`` naming it with other input."""
    intervals, p, lake = _intervals(len(SPLIT)), _pipeline("chunk_race"), str(tmp_path / "race")
    reference = _one_by_one(spark, str(tmp_path / "one"), p, intervals)

    def attempt():
        rt = Runtime(spark.newSession(), lake, quality=False)
        try:
            return [r.status for r in rt.run_range(p, _range(rt, intervals, SPLIT))]
        except ConcurrentBatchError as e:
            return str(e)

    outcomes = in_parallel([attempt, attempt])
    assert ["committed"] * 5 in outcomes, outcomes
    rt = Runtime(spark.newSession(), lake, quality=False)
    assert rt.run_range(p, _range(rt, intervals, SPLIT))[2].status == "already committed"
    assert _tables(rt, p) == reference
    landing, third = _landing(rt.spark, SPLIT, None), intervals[2]
    mine = landing.filter((F.col("arrived") >= third.start) & (F.col("arrived") < third.end))
    alone = rt.run_batch(p, third.batch_id, mine, batch_end=third.end, batch_start=third.start)
    assert (alone.status, alone.seq) == ("already committed", 3)
    with pytest.raises(FingerprintMismatchError, match=third.batch_id):
        rt.run_batch(p, third.batch_id, mine.withColumn("v", F.col("v") + 1), batch_end=third.end)


@pytest.mark.parametrize("merged", [False, True], ids=["final", "merged-sink"])
def test_a_replay_of_a_chunked_range_runs_in_chunks_and_starts_at_a_chunk(spark, tmp_path, merged):
    """A range committed as one chunk is replayed with corrected input (``replay_range``, in
    chunks): the committed tables are those of a first run of the corrected input one by one, for
    final results and for an emit-on-update sink (restored to its version before the range, then
    MERGEd chunk by chunk). A replay from inside the chunk is refused, naming the chunk: the state
    before it was never kept."""
    intervals, p = _intervals(len(SPLIT)), _pipeline("chunk_replay", merged)
    fixed = [[(k, ts, v + 10 if k == "A" else v) for k, ts, v in batch] for batch in SPLIT]
    rt = Runtime(spark.newSession(), str(tmp_path / "replayed"), quality=False)
    rt.run_range(p, _range(rt, intervals, SPLIT))
    with pytest.raises(ReplayError, match=r"ran inside a chunk"):
        rt.replay_range(p, _range(rt, intervals[2:], fixed))
    replayed = rt.replay_range(p, _range(rt, intervals, fixed), chunk_records=4)
    assert [r.batch_id for r in replayed.batches] == [iv.batch_id for iv in intervals]
    first = Runtime(spark.newSession(), str(tmp_path / "first"), quality=False)
    first.run_range(p, _range(first, intervals, fixed), chunk_records=1)
    (got, got_metrics), (want, want_metrics) = _tables(rt, p, committed=True), _tables(first, p, committed=True)
    assert (got, got_metrics) == (want, want_metrics)


def test_a_chunk_refused_for_one_interval_s_records_commits_those_before_then_corrected_input_resumes(spark, tmp_path):
    """A record without an event time in the third interval refuses the chunk; the range then
    runs one interval at a time, so the two intervals before it commit and the error names the
    third, as one by one. The landing records corrected, the range run again resumes there and
    ends with the tables of the corrected intervals run one by one."""
    intervals, p = _intervals(len(SPLIT)), _pipeline("chunk_refused")
    bad = [list(b) for b in SPLIT]
    bad[2] = [*bad[2], ("B", None, 9)]
    fixed = [list(b) for b in SPLIT]
    fixed[2] = [*fixed[2], ("B", 15, 9)]
    rt = Runtime(spark.newSession(), str(tmp_path / "refused"), quality=False)
    with pytest.raises(InputError, match=rf"batch '{intervals[2].batch_id}': 1 record\(s\) have a null event time"):
        rt.run_range(p, _range(rt, intervals, bad))
    assert [r.batch_id for r in rt.read_ledger(p).orderBy("seq").collect()] == [iv.batch_id for iv in intervals[:2]]
    again = rt.run_range(p, _range(rt, intervals, fixed))
    assert [r.status for r in again] == ["already committed"] * 2 + ["committed"] * 3
    assert _tables(rt, p) == _one_by_one(spark, str(tmp_path / "one"), p, intervals, fixed)


KILLED_CHILD = """
import os, signal, sys
sys.path.insert(0, {tests!r})
from framework import Runtime, spark_session
from test_chunks import SPLIT, _intervals, _pipeline, _range

def hook(at):
    if at == "publish":
        print("KILL", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)

spark = spark_session("killed-chunk", master="local[1]")
rt = Runtime(spark, sys.argv[1], quality=False, before_write=hook)
rt.run_range(_pipeline("chunk_killed"), _range(rt, _intervals(len(SPLIT)), SPLIT))
print("DONE", flush=True)
"""


def test_kill_9_after_a_chunk_s_commit_point_then_the_range_again_equals_one_by_one(spark, tmp_path):
    """A process running a range is killed (SIGKILL, its JVM with it) after its chunk's commit
    point, before publication: nothing of it cleans up. The range run again finds every interval
    committed, publishes the staged rows once, and the tables are those of a run one by one."""
    intervals, p, lake = _intervals(len(SPLIT)), _pipeline("chunk_killed"), str(tmp_path / "killed")
    child = subprocess.run(
        [sys.executable, "-c", KILLED_CHILD.format(tests=str(Path(__file__).parent)), lake],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert child.returncode == -signal.SIGKILL and "KILL" in child.stdout and "DONE" not in child.stdout
    rt = Runtime(spark.newSession(), lake, quality=False)
    assert not tables.exists(rt.spark, rt.tables(p).output)  # committed, not yet published
    again = rt.run_range(p, _range(rt, intervals, SPLIT))
    assert {r.status for r in again} == {"already committed"}
    assert _tables(rt, p) == _one_by_one(spark, str(tmp_path / "one"), p, intervals)


def test_each_interval_of_a_chunk_is_checked_against_its_own_clock_and_a_half_committed_chunk_is_refused(
    spark, tmp_path
):
    """A record whose event time is beyond its own interval's end plus the clock skew (though
    not beyond the range's end) is set aside as its batch alone sets it aside. A chunk whose
    first interval another runner committed since the range was split writes nothing and says
    so, instead of committing that interval twice."""
    intervals, p = _intervals(4), _pipeline("chunk_clock")
    p = Pipeline(p.name, timestamp="ts", arrival="seq", bad_records="quarantine").group_by("k")
    p = p.windowed_by(TimeWindows.of_size_and_grace(10, 2)).aggregate(*AGGREGATES)
    p = p.suppress(Suppressed.until_window_closes(BufferConfig.unbounded())).to("out")
    hour = 3_600_000
    t0 = int((T0 - dt.datetime(1970, 1, 1)).total_seconds() * 1000)
    split = [[("A", t0 + 10, 1), ("B", t0 + 3 * hour, 2)], [("A", t0 + hour + 5, 3)], [], [("B", t0 + 3 * hour + 9, 4)]]
    skew = dt.timedelta(0)
    chunked = Runtime(spark.newSession(), str(tmp_path / "chunked"), quality=False, max_clock_skew=skew)
    chunked.run_range(p, _range(chunked, intervals, split))
    one = Runtime(spark.newSession(), str(tmp_path / "one"), quality=False, max_clock_skew=skew)
    landing = _landing(one.spark, split, None)
    for iv in intervals:
        mine = landing.filter((F.col("arrived") >= iv.start) & (F.col("arrived") < iv.end))
        one.run_batch(p, iv.batch_id, mine, batch_end=iv.end, batch_start=iv.start)
    found = _tables(chunked, p)
    assert found == _tables(one, p)
    assert len(found[0]["rejected"]) == 1  # the record three hours ahead of its interval

    q = _pipeline("chunk_half")
    rt = Runtime(spark.newSession(), str(tmp_path / "half"), quality=False)
    r = _range(rt, intervals, split)
    rt.run_range(q, Range(intervals[:1], r.input_df, r.arrived))  # another runner, after the split
    with pytest.raises(ConcurrentBatchError, match=r"committed by another runner since the range was split"):
        ChunkAttempt(rt.settings, q, intervals, rt.tables(q), Ledgers(rt.spark)).run_chunk(r.input_df, r.arrived)
    assert [row.batch_id for row in rt.read_ledger(q).collect()] == [intervals[0].batch_id]


def _audits(spark, lake, p):
    """The audits ``quality_results`` under ``lake`` holds for ``p``: (batch, expectation, success)."""
    found = spark.read.format("delta").load(f"{lake}/quality_results").filter(F.col("pipeline") == p.name)
    return sorted((r.batch_id, r.expectation, r.success) for r in found.collect())


def _suite(folder, p, expectation, severity="critical"):
    """A quality suite for ``p`` in ``folder`` holding one ``expectation`` of ``severity``."""
    folder.mkdir(parents=True, exist_ok=True)
    suite = {"name": p.name, "expectations": [{**expectation, "meta": {"severity": severity}}]}
    (folder / f"{p.name}.json").write_text(json.dumps(suite))
    return str(folder)


def test_a_quality_gate_failing_mid_range_names_the_interval_then_corrected_input_resumes(spark, tmp_path):
    """A value the suite refuses, in the fifth interval's records, closes its window there: the
    chunk's gate fails, the range runs one interval at a time, the four intervals
    before commit and the gate's error names the fifth, whose rows fail. Corrected, the range
    resumes there and ends with the tables of the corrected intervals run one by one."""
    intervals, p = _intervals(len(SPLIT)), _pipeline("chunk_gated")
    suites = _suite(
        tmp_path / "suites",
        p,
        {"type": "expect_column_values_to_be_between", "kwargs": {"column": "hi", "max_value": 100}},
    )
    poisoned = [list(b) for b in SPLIT]
    poisoned[4] = [("B", 31, 999), ("A", 70, 8)]
    rt = Runtime(spark.newSession(), str(tmp_path / "gated"), expectations=suites)
    hows = []
    with pytest.raises(QualityGateError, match=rf"batch '{intervals[4].batch_id}'"):
        rt.run_range(p, _range(rt, intervals, poisoned), progress=lambda done, how: hows.append(how))
    assert [r.batch_id for r in rt.read_ledger(p).orderBy("seq").collect()] == [iv.batch_id for iv in intervals[:4]]
    assert hows == ["one interval at a time: the chunk was refused (QualityGateError)"] * 4
    again = rt.run_range(p, _range(rt, intervals, SPLIT))
    assert [r.status for r in again] == ["already committed"] * 4 + ["committed"]
    assert _tables(rt, p) == _one_by_one(spark, str(tmp_path / "one"), p, intervals)


def test_a_suite_with_table_wide_expectations_gates_each_interval_alone(spark, tmp_path):
    """A row count judges a batch's rows together: the chunk's rows (more than three) would fail
    where each interval's pass. Such a range runs one batch per interval, and says why."""
    intervals, p = _intervals(len(SPLIT)), _pipeline("chunk_table_wide")
    suites = _suite(
        tmp_path / "suites", p, {"type": "expect_table_row_count_to_be_between", "kwargs": {"max_value": 3}}
    )
    rt = Runtime(spark.newSession(), str(tmp_path / "wide"), expectations=suites)
    hows = []
    rt.run_range(p, _range(rt, intervals, SPLIT), progress=lambda done, how: hows.append((len(done), how)))
    reason = "one batch per interval: the quality suite has table-wide expectations (row counts, means): "
    reason += "each interval's rows are gated alone"
    assert hows == [(1, reason)] * len(intervals)
    assert _tables(rt, p) == _one_by_one(spark, str(tmp_path / "one"), p, intervals)


def test_each_interval_of_a_chunk_that_emitted_rows_keeps_the_chunk_s_audit_as_its_own(spark, tmp_path):
    """One by one, each batch that emits rows is audited, and ``status`` shows each batch's audit
    from ``quality_results``. A chunk audits its rows once and keeps that audit under each of its
    intervals that emitted rows: the same batches have the same findings."""
    intervals, p = _intervals(len(SPLIT)), _pipeline("chunk_audits")
    suites = _suite(
        tmp_path / "suites",
        p,
        {"type": "expect_column_values_to_be_between", "kwargs": {"column": "hi", "max_value": 100}},
    )
    rt = Runtime(spark.newSession(), str(tmp_path / "chunked"), expectations=suites)
    hows = []
    rt.run_range(p, _range(rt, intervals, SPLIT), progress=lambda done, how: hows.append((len(done), how)))
    assert hows == [(len(intervals), "one chunk")]
    assert _tables(rt, p) == _one_by_one(spark, str(tmp_path / "one"), p, intervals, expectations=suites)

    chunked = _audits(spark, str(tmp_path / "chunked"), p)
    emitted = [r.batch_id for r in rt.read_ledger(p).collect() if json.loads(r.metrics)["rows_published"]]
    assert len(emitted) >= 2 and chunked == _audits(spark, str(tmp_path / "one"), p)
    assert sorted({batch for batch, _, _ in chunked}) == sorted(emitted)


def test_a_chunk_whose_rows_fail_a_warning_runs_one_interval_at_a_time_so_each_keeps_its_own_audit(spark, tmp_path):
    """A failed warning does not stop a batch, but the chunk's audit would be each emitting
    interval's (the second and the fifth), while only the second's rows fail. The chunk writes
    nothing, its intervals run one at a time through the second, the rest is a chunk again, and
    ``quality_results`` holds what one by one holds: the failure under the second interval only,
    no record of the chunk's audit."""
    intervals, p = _intervals(len(SPLIT)), _pipeline("chunk_warned")
    suites = _suite(
        tmp_path / "suites",
        p,
        {"type": "expect_column_values_to_be_between", "kwargs": {"column": "hi", "max_value": 100}},
        severity="warning",
    )
    poisoned = [list(b) for b in SPLIT]
    poisoned[0] = [("A", 1, 999), ("B", 2, 2)]  # its window closes in the second interval
    rt = Runtime(spark.newSession(), str(tmp_path / "chunked"), expectations=suites)
    hows = []
    rt.run_range(p, _range(rt, intervals, poisoned), progress=lambda done, how: hows.append((len(done), how)))
    alone = (1, "one interval at a time: the chunk was refused (SharedWarnings)")
    assert hows == [alone, alone, (len(intervals) - 2, "one chunk")]
    assert _tables(rt, p) == _one_by_one(spark, str(tmp_path / "one"), p, intervals, poisoned, suites)

    one = _audits(spark, str(tmp_path / "one"), p)
    assert _audits(spark, str(tmp_path / "chunked"), p) == one
    assert [batch for batch, _, ok in one if not ok] == [intervals[1].batch_id]
