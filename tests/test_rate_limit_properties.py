"""Rate limiting (``until_time_limit``) on random streams, bounds, limits and batch splits,
checked against the reference model (tests/reference.py), and two hand-written examples on
windows: KIP-450's sliding windows and hopping windows a record updates more than one of.

The KIP-328 eviction tables and the buffer's policies are in test_rate_limit.py.
"""

import random

import pytest
import reference as ref
from harness import distributed, in_parallel, run_stream

from framework import (
    BufferConfig,
    Pipeline,
    Runtime,
    SessionWindows,
    SlidingWindows,
    Suppressed,
    TimeWindows,
    agg,
)
from framework.storage import tables

# The cases run in one module fixture: its setup is 55 tiny batches, longer than one test.
pytestmark = pytest.mark.timeout(2400)
STRING = "string"


# ---- property: random streams, bounds, limits and splits against the reference model -------
SLIDING_SEEDS = (7, 11, 13)  # a plain table, limits 8, 0 and 5; out-of-order and late records
SESSION_SEEDS = (24, 103, 135, 212)  # merges and extensions (tombstones); bytes, records, unbounded


def _case(seed):
    rnd = random.Random(seed)
    sliding, sessions = seed in SLIDING_SEEDS, seed in SESSION_SEEDS
    windowed = seed % 2 == 1
    recs = [
        (
            rnd.choice("AB" if sliding or sessions else "ABC"),
            rnd.randint(0, 30),
            "".join(rnd.choice("xyz") for _ in range(rnd.randint(1, 3))),
        )
        for _ in range(rnd.randint(4, 7))
    ]
    cuts = sorted(rnd.sample(range(1, len(recs)), rnd.randint(1, len(recs) - 1)))
    bounds = [0, *cuts[:2], len(recs)]  # at most three batches (the first two cuts: the same streams)
    kind = rnd.choice(["unbounded", "records", "bytes"])
    buffer = {
        "unbounded": BufferConfig.unbounded(),
        "records": BufferConfig.max_records(rnd.randint(1, 2)),
        "bytes": BufferConfig.max_bytes(rnd.randint(2, 5)),
    }[kind]
    windows = (
        ref.Session(rnd.randint(2, 6), rnd.randint(0, 8))
        if sessions
        else ref.Sliding(rnd.randint(3, 10), rnd.randint(0, 5))
        if sliding
        else ref.Tumbling(10, rnd.randint(0, 5), rnd.choice([5, 10]))
        if windowed
        else None
    )
    return recs, [recs[a:b] for a, b in zip(bounds, bounds[1:])], rnd.randint(0, 8), buffer, windows


def _windows(model):
    if isinstance(model, ref.Session):
        return SessionWindows.of_inactivity_gap_and_grace(model.gap, model.grace)
    if isinstance(model, ref.Sliding):
        return SlidingWindows.of_time_difference_and_grace(model.size, model.grace)
    return TimeWindows.of_size_and_grace(model.size, model.grace).advance_by(model.advance)


SEEDS = (*range(6), *SLIDING_SEEDS, *SESSION_SEEDS)
EXAMPLES = {  # name: windows, limit (ms), batches; counted per window
    "kip450": (
        SlidingWindows.of_time_difference_and_grace(10, 0),
        4,  # the records of test_examples
        [[("A", 10, "x"), ("A", 14, "x"), ("A", 18, "x"), ("A", 22, "x")], [("A", 100, "x")]],
    ),
    "hopping": (
        TimeWindows.of_size_and_grace(10, 0).advance_by(5),
        3,
        [[("A", 6, "x"), ("A", 9, "x")], [("A", 20, "x")]],
    ),
}


def example_run(spark, lake, name):
    """A hand-written example: its emissions as (start, end, n, batch, stream time), and the
    last batch's metrics."""
    windows, limit, batches = EXAMPLES[name]
    p = (
        Pipeline(name, timestamp="ts", arrival="seq")
        .group_by("k")
        .windowed_by(windows)
        .aggregate(agg.count("n"))
        .suppress(Suppressed.until_time_limit(limit, BufferConfig.unbounded()).with_name("rate"))
        .to("out")
    )
    rt = Runtime(spark.newSession(), f"{lake}/{name}", quality=False)
    last = run_stream(rt, p, batches, value_type=STRING)[-1]
    rows = (
        rt.read_output(p)
        .selectExpr(
            "unix_millis(window_start)",
            "unix_millis(window_end)",
            "n",
            "emitted_batch_id",
            "unix_millis(emitted_stream_time)",
        )
        .collect()
    )
    return name, (sorted(tuple(r) for r in rows), last.metrics)


@pytest.fixture(scope="module")
def random_runs(spark, tmp_path_factory):
    """The property cases as one batch (folded on the driver) and split (in Spark tasks), and the
    hand-written examples, run concurrently."""
    lake = tmp_path_factory.mktemp("rate-prop")

    def run(seed, split):
        recs, batches, limit, buffer, windows = _case(seed)
        p = Pipeline(f"prop{seed}", timestamp="ts", arrival="seq").group_by("k")
        if windows is not None:
            p = p.windowed_by(_windows(windows))
        p = (
            p.aggregate(agg.count("n") if windows else agg.latest("v", "v"))
            .suppress(Suppressed.until_time_limit(limit, buffer))
            .to("out")
        )
        rt = Runtime(distributed(spark) if split == "split" else spark.newSession(), f"{lake}/{split}", quality=False)
        run_stream(rt, p, [recs] if split == "one" else batches, value_type=STRING)
        if not tables.exists(rt.spark, rt.tables(p).output):
            return (seed, split), []
        df = rt.read_output(p)
        start = "unix_millis(window_start)" if windows else "CAST(NULL AS long)"
        end = ["unix_millis(window_end)"] if isinstance(windows, ref.Session) else []
        if end:  # a tombstone has no count
            assert df.filter("tombstone <> (n IS NULL)").count() == 0
        return (seed, split), sorted(  # by repr: a tombstone's count is None
            (
                tuple(r)
                for r in df.selectExpr(
                    "k",
                    start,
                    *end,
                    "CAST(n AS string)" if windows else "v",
                    "emitted_batch_id",
                    "unix_millis(emitted_stream_time)",
                ).collect()
            ),
            key=repr,
        )

    jobs = [lambda s=s, x=x: run(s, x) for s in SEEDS for x in ("one", "split")]
    examples = [lambda n=n: example_run(spark, lake, n) for n in EXAMPLES]
    return dict(in_parallel(jobs + examples, workers=6))


@pytest.mark.parametrize("seed", SEEDS)
def test_rate_limiting_matches_the_reference_model_for_any_batch_split(random_runs, seed):
    recs, batches, limit, buffer, windows = _case(seed)
    eager = not hasattr(buffer, "when_full")
    for split, stream in (("one", [recs]), ("split", batches)):
        emitted, _ = ref.rate_limited(stream, limit, buffer.record_limit, buffer.byte_limit, eager, windows)
        want = sorted(
            ((*e[:-3], None if e[-3] is None else str(e[-3]), f"b{e[-2]:04d}", e[-1]) for e in emitted), key=repr
        )
        assert random_runs[(seed, split)] == want, (split, recs, batches, limit, buffer, windows)
    without_batch = {x: sorted((r[:-2] + r[-1:] for r in random_runs[(seed, x)]), key=repr) for x in ("one", "split")}
    assert without_batch["one"] == without_batch["split"]


def test_kip450_sliding_windows_rate_limited(random_runs):
    rows, metrics = random_runs["kip450"]
    assert rows == [
        (0, 10, 1, "b0000", 14),  # left windows: buffer time = their record's time, out 4 ms later
        (4, 14, 2, "b0000", 18),
        (8, 18, 3, "b0000", 22),
        # 14 creates 10's right window holding 14 only (buffer time 14); it leaves at 18, at that
        # record's first update (its left window [8, 18]), before 18 updates it: it comes back with
        # 2 records and buffer time 18, and leaves at 22. 14's right window does the same at 22.
        (11, 21, 1, "b0000", 18),
        (11, 21, 2, "b0000", 22),
        (12, 22, 3, "b0001", 100),
        (15, 25, 1, "b0000", 22),
        (15, 25, 2, "b0001", 100),
        (19, 29, 1, "b0001", 100),
    ]  # 18's right window, created by 22
    assert metrics["suppression_buffer_count_current"] == 1  # 100's left window [90, 100]


def test_a_record_updating_hopping_windows_expires_entries_at_its_first_update(random_runs):
    rows, _ = random_runs["hopping"]
    # 9 updates [0, 10) first: stream time 9 expires both entries (time 6), so [5, 15) leaves
    # with 6 alone and comes back with 6 and 9 (buffer time 9), as one record at a time would.
    assert rows == [(0, 10, 2, "b0000", 9), (5, 15, 1, "b0000", 9), (5, 15, 2, "b0001", 20)]
