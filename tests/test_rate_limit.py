"""KIP-328's eviction tables (seeds/kip-328-suppress.txt), each as its own test.

A table is a plain (non-windowed) table of the latest value per key, suppressed with
``until_time_limit``: records ``(offset, key, value, timestamp)``, the buffer's slots after each
record as ``(key, value, buffer time)`` in eviction order, and the emissions as
``(key, value, offset of the record that made it leave)``. Each table runs twice: through the
buffer itself (every slot checked), and through Spark and Delta as one batch and as two, split
in the middle (the emitted rows, their stream time and their batch).

The framework's rule (docs/design.md#suppression) differs from the KIP's drawings in one respect: an
update keeps the key's buffer time (the KIP draws the newer timestamp in the slot; Kafka's buffer
keeps the first one). Where that changes an outcome, the test says so.

Random streams against the reference model: test_rate_limit_properties.py.
"""

from datetime import timedelta as td

import pytest
import reference as ref
from harness import distributed, frame, in_parallel, run_stream

from framework import (
    BufferConfig,
    BufferFullError,
    DefinitionError,
    Pipeline,
    Runtime,
    SessionWindows,
    SlidingWindows,
    Suppressed,
    agg,
)
from framework.execution import eviction
from framework.storage import tables

FOREVER = td(days=365 * 100)
# The KIP tables run in one module fixture: its setup is 39 tiny batches, longer than one test.
pytestmark = pytest.mark.timeout(2400)
STRING = "string"


def pipeline(name, limit, buffer):
    return (
        Pipeline(name, timestamp="ts", arrival="seq")
        .group_by("k")
        .aggregate(agg.latest("v", "v"))
        .suppress(Suppressed.until_time_limit(limit, buffer).with_name("rate"))
        .to("out")
    )


def slots_and_emits(limit, buffer, records):
    """Run ``records`` through ``eviction.Buffer``: slots after each record, and emissions."""
    limit_ms = limit // td(milliseconds=1) if isinstance(limit, td) else limit
    buf = eviction.Buffer(limit_ms, buffer.record_limit, buffer.byte_limit, eager=not hasattr(buffer, "when_full"))
    values, st, slots, emits = {}, None, [], []
    for offset, (key, value, ts) in enumerate(records):
        before, st = (st if st is not None else -(2**63)), ts if st is None else max(st, ts)
        values[(offset, 0)] = value
        for c in buf.process(eviction.Update((key,), (key,), offset, before, st, ts, len(value), (offset, 0))):
            if c.kind == "emit":
                emits.append((c.entry.ident[0], values[c.entry.ref], offset))
        slots.append(
            [(e.ident[0], values[e.ref], e.time) for e in sorted(buf.entries.values(), key=lambda e: (e.time, e.order))]
        )
    return slots, emits


TABLES = {}


def table(name, limit, buffer, records, slots, emits):
    """Register a KIP table; its Spark runs happen together (see ``spark_runs``)."""
    TABLES[name] = (limit, buffer, records, slots, emits)


@pytest.fixture(scope="module")
def spark_runs(spark, tmp_path_factory):
    """Every table through Spark and Delta, as one batch (its buffer folded on the driver) and as
    two (``halves``, folded in Spark tasks), run concurrently (each run is a few tiny batches:
    most of their time is commit latency)."""
    lake = tmp_path_factory.mktemp("kip328")

    def run(name, split):
        limit, buffer, records, _, _ = TABLES[name]
        rt = Runtime(spark.newSession() if split == "one" else distributed(spark), f"{lake}/{split}", quality=False)
        p = pipeline(name, limit, buffer)
        stream = [(k, ts, v) for k, v, ts in records]
        last = run_stream(rt, p, [stream] if split == "one" else halves(stream), value_type=STRING)[-1]
        rows = []
        if tables.exists(rt.spark, rt.tables(p).output):
            rows = sorted(
                tuple(r)
                for r in rt.read_output(p)
                .selectExpr("k", "v", "emitted_batch_id", "unix_millis(emitted_stream_time) AS st")
                .collect()
            )
        return (name, split), (rows, last)

    jobs = [lambda n=n, s=s: run(n, s) for n in TABLES for s in ("one", "halves")]
    return dict(in_parallel(jobs, workers=6))


def halves(stream):
    """The stream as two batches, the second from the middle record on."""
    return [stream[: len(stream) // 2], stream[len(stream) // 2 :]]


def check(spark_runs, name):
    limit, buffer, records, slots, emits = TABLES[name]
    assert slots_and_emits(limit, buffer, records) == (slots, emits)
    times = [max(ts for _, _, ts in records[: i + 1]) for i in range(len(records))]
    second = len(halves(records)[0])  # the first record of the second half
    for split in ("one", "halves"):
        rows, last = spark_runs[(name, split)]
        batch = ["b0000" if split == "one" or at < second else "b0001" for _, _, at in emits]
        assert rows == sorted((k, v, b, times[at]) for (k, v, at), b in zip(emits, batch))
        if split == "one":
            assert last.metrics["suppression_buffer_count_current"] == len(slots[-1])
            assert last.metrics["suppression_emit_total"] == len(emits)


table(
    "overwrite",
    FOREVER,
    BufferConfig.unbounded(),
    [("A", "x", 0), ("A", "y", 1)],
    slots=[[("A", "x", 0)], [("A", "y", 0)]],
    emits=[],
)


def test_an_update_overwrites_the_value_and_keeps_the_buffer_time(spark_runs):
    check(spark_runs, "overwrite")


table(
    "overwrite_earlier",
    FOREVER,
    BufferConfig.unbounded(),
    [("A", "x", 1), ("A", "w", 0)],
    slots=[[("A", "x", 1)], [("A", "w", 1)]],
    emits=[],
)


def test_an_earlier_update_by_time_still_overwrites_in_offset_order(spark_runs):
    check(spark_runs, "overwrite_earlier")


table(
    "key_limit",
    FOREVER,
    BufferConfig.max_records(2),
    [("A", "w", 0), ("A", "x", 1), ("B", "y", 2), ("C", "z", 3)],
    slots=[[("A", "w", 0)], [("A", "x", 0)], [("A", "x", 0), ("B", "y", 2)], [("B", "y", 2), ("C", "z", 3)]],
    emits=[("A", "x", 3)],
)


def test_key_limit_2_evicts_the_oldest(spark_runs):
    check(spark_runs, "key_limit")


table(
    "byte_limit",
    FOREVER,
    BufferConfig.max_bytes(3),
    [("A", "xx", 0), ("A", "yy", 1), ("B", "zz", 2)],
    slots=[[("A", "xx", 0)], [("A", "yy", 0)], [("B", "zz", 2)]],
    emits=[("A", "yy", 2)],
)


def test_byte_limit_3_evicts_the_oldest(spark_runs):
    check(spark_runs, "byte_limit")


table(
    "after_2ms",
    2,
    BufferConfig.unbounded(),
    [("A", "w", 0), ("A", "x", 1), ("B", "y", 2), ("C", "z", 3)],
    slots=[[("A", "w", 0)], [("A", "x", 0)], [("B", "y", 2)], [("B", "y", 2), ("C", "z", 3)]],
    emits=[("A", "x", 2)],
)


def test_emit_after_2ms(spark_runs):
    # docs/design.md#suppression: A keeps buffer time 0 after its update, so it leaves at offset 2 (stream time 2),
    # one record earlier than the KIP's drawing (which restarts A's timer at 1).
    check(spark_runs, "after_2ms")


table(
    "late_2ms",
    2,
    BufferConfig.unbounded(),
    [("A", "w", 3), ("A", "x", 1), ("B", "y", 1)],
    slots=[[("A", "w", 3)], [("A", "x", 3)], [("A", "x", 3)]],
    emits=[("B", "y", 2)],
)


def test_late_records_can_leave_at_once(spark_runs):
    # B (time 1) is late at stream time 3: it enters and leaves at once. A's update at time 1
    # keeps A's buffer time 3 (docs/design.md#suppression), so unlike the KIP's drawing A stays.
    check(spark_runs, "late_2ms")


table(
    "key_limit_late",
    FOREVER,
    BufferConfig.max_records(2),
    [("A", "w", 0), ("A", "x", 1), ("B", "y", 2), ("C", "z", 0)],
    slots=[[("A", "w", 0)], [("A", "x", 0)], [("A", "x", 0), ("B", "y", 2)], [("C", "z", 0), ("B", "y", 2)]],
    emits=[("A", "x", 3)],
)


def test_key_limit_2_with_a_late_record(spark_runs):
    # C arrives last with time 0. A also has buffer time 0 (kept from its first record), and the
    # tie goes by key: A leaves, where the KIP (drawing A at time 1) shows C leaving.
    check(spark_runs, "key_limit_late")


table(
    "byte_limit_late",
    FOREVER,
    BufferConfig.max_bytes(3),
    [("A", "xx", 0), ("A", "yy", 1), ("B", "zz", 0)],
    slots=[[("A", "xx", 0)], [("A", "yy", 0)], [("B", "zz", 0)]],
    emits=[("A", "yy", 2)],
)


def test_byte_limit_3_with_a_late_record(spark_runs):
    # As above: A (buffer time 0) and B (time 0) tie; by key, A leaves.
    check(spark_runs, "byte_limit_late")


table(
    "big_record",
    FOREVER,
    BufferConfig.max_bytes(3),
    [("A", "x", 0), ("B", "y", 1), ("C", "zzz", 2)],
    slots=[[("A", "x", 0)], [("A", "x", 0), ("B", "y", 1)], [("C", "zzz", 2)]],
    emits=[("A", "x", 2), ("B", "y", 2)],
)


def test_big_records_push_several_out(spark_runs):
    check(spark_runs, "big_record")


table(
    "too_big",
    FOREVER,
    BufferConfig.max_bytes(3),
    [("A", "x", 0), ("B", "y", 1), ("C", "zzzz", 2)],
    slots=[[("A", "x", 0)], [("A", "x", 0), ("B", "y", 1)], []],
    emits=[("A", "x", 2), ("B", "y", 2), ("C", "zzzz", 2)],
)


def test_a_record_too_big_for_the_buffer_leaves_at_once(spark_runs):
    check(spark_runs, "too_big")


for bound in ("max_records", "max_bytes"):  # Kafka accepts a zero bound: nothing is held
    table(
        f"zero_{bound}",
        FOREVER,
        getattr(BufferConfig, bound)(0),
        [("A", "x", 0), ("A", "y", 1), ("B", "z", 1)],
        slots=[[], [], []],
        emits=[("A", "x", 0), ("A", "y", 1), ("B", "z", 2)],
    )


@pytest.mark.parametrize("bound", ["max_records", "max_bytes"])
def test_a_zero_bound_holds_nothing_and_every_update_leaves_at_once(spark_runs, bound):
    check(spark_runs, f"zero_{bound}")


table(
    "by_time",
    2,
    BufferConfig.unbounded(),
    [("A", "x", 2), ("B", "y", 1), ("C", "z", 3), ("C", "zz", 4)],
    slots=[[("A", "x", 2)], [("B", "y", 1), ("A", "x", 2)], [("A", "x", 2), ("C", "z", 3)], [("C", "zz", 3)]],
    emits=[("B", "y", 2), ("A", "x", 3)],
)


def test_eviction_is_by_time_not_by_offset(spark_runs):
    # KIP-328's rejected alternative: evicting by offset would hold B behind A. Here B leaves
    # at stream time 3 (1 <= 3 - 2) although A arrived first; A leaves at stream time 4.
    check(spark_runs, "by_time")


# ---- beyond the tables -----------------------------------------------------------------------
def test_shut_down_when_full_aborts_the_batch_and_a_larger_bound_continues(spark, warehouse):
    rt = Runtime(spark, warehouse, quality=False)
    tight = pipeline("strict", FOREVER, BufferConfig.max_records(2).shut_down_when_full())
    rt.run_batch(tight, "b0", frame(spark, [("A", 0, "w")], 0, STRING))
    batch = frame(spark, [("B", 1, "x"), ("C", 2, "y"), ("A", 3, "z")], 1, STRING)
    with pytest.raises(BufferFullError, match=r"'strict'.*'b1'.*rate would hold 3 entries \(3 bytes\).*max_records=2"):
        rt.run_batch(tight, "b1", batch)
    assert rt.read_ledger(tight).filter("status = 'committed'").count() == 1
    assert spark.read.format("delta").load(f"{warehouse}/strict/buffer_rate").count() == 1
    roomy = pipeline("strict", 2, BufferConfig.max_records(3).shut_down_when_full())
    assert rt.run_batch(roomy, "b1", batch).status == "committed"
    rows = rt.read_output(roomy).selectExpr("k", "v", "unix_millis(emitted_stream_time)").collect()
    assert sorted(tuple(r) for r in rows) == [("A", "w", 2), ("B", "x", 3)]


def test_a_named_buffer_survives_an_added_operator_and_a_zero_limit_flushes_it(spark, warehouse):
    rt = Runtime(spark, warehouse, quality=False)
    held = pipeline("renamed", FOREVER, BufferConfig.unbounded())
    rt.run_batch(held, "b0", frame(spark, [("A", 0, "w"), ("B", 5, "x"), ("A", 6, "y")], 0, STRING))
    # Adding a stateless operator after the suppression keeps the buffer named "rate"; so does
    # shortening the limit to 0, the KIP's way to remove a suppression: the next batch (empty
    # here) emits everything that was buffered.
    flushed = (
        Pipeline("renamed", timestamp="ts", arrival="seq")
        .group_by("k")
        .aggregate(agg.latest("v", "v"))
        .suppress(Suppressed.until_time_limit(0, BufferConfig.unbounded()).with_name("rate"))
        .with_column("v2", "upper(v)")
        .to("out")
    )
    result = rt.run_batch(flushed, "b1", frame(spark, [], 3, STRING))
    assert result.emitted == 2 and result.metrics["suppression_buffer_count_current"] == 0
    rows = rt.read_output(flushed).selectExpr("k", "v", "v2", "emitted_batch_id").collect()
    assert sorted(tuple(r) for r in rows) == [("A", "y", "Y", "b1"), ("B", "x", "X", "b1")]


def test_buffer_configs_combine_bounds_and_policies():
    both = BufferConfig.max_records(2).with_max_bytes(5)
    assert (both.record_limit, both.byte_limit) == (2, 5)
    strict = both.shut_down_when_full()
    assert (strict.record_limit, strict.byte_limit, strict.when_full) == (2, 5, "shut_down")
    assert (strict.emit_early_when_full().record_limit, strict.emit_early_when_full().byte_limit) == (2, 5)
    for unbounded in (both.with_no_bound(), both.spill_to_disk_when_full(), BufferConfig.unbounded()):
        assert (unbounded.record_limit, unbounded.byte_limit) == (None, None) and hasattr(unbounded, "when_full")
    assert BufferConfig.unbounded().with_max_records(3).record_limit == 3
    with pytest.raises(DefinitionError, match="until_window_closes needs a strict buffer"):
        Suppressed.until_window_closes(BufferConfig.max_records(2))
    assert BufferConfig.max_records(0).record_limit == 0 and BufferConfig.max_bytes(0).byte_limit == 0  # as Kafka
    with pytest.raises(DefinitionError, match="max_records must be an int >= 0, got -1"):
        BufferConfig.max_records(-1)


def test_rate_limiting_is_accepted_on_every_window_type_and_refused_where_it_cannot_hold():
    rate = Suppressed.until_time_limit(5, BufferConfig.unbounded())
    keyed = Pipeline("refused", timestamp="ts").group_by("k")
    for windows in (
        SlidingWindows.of_time_difference_and_grace(5, 0),
        SessionWindows.of_inactivity_gap_and_grace(5, 0),
    ):
        keyed.windowed_by(windows).aggregate(agg.count()).suppress(rate)
    early = Suppressed.until_time_limit(5, BufferConfig.max_records(2).emit_early_when_full())
    keyed.windowed_by(SessionWindows.of_inactivity_gap_and_grace(5, 0)).aggregate(agg.count()).suppress(early)
    with pytest.raises(DefinitionError, match="needs lateness='record'"):
        Pipeline("refused", timestamp="ts", lateness="batch").group_by("k").aggregate(agg.count()).suppress(rate)


def test_kip94_merge_forwards_a_tombstone_for_each_merged_session(spark, warehouse):
    """KIP-94's sessions (gap 30) rate-limited with a zero time limit, so every forward leaves at
    once: a record at 225 merges [150,200] and [250,300] into [150,300], and the log says so with
    a tombstone for each merged session before the merged one. Each extension on the way there
    is a tombstone of the shorter session and the longer one. The log is the reference model's,
    and the same whether the stream comes as two batches or five."""
    sessions = [("A", t, "x") for t in (0, 30, 60, 90, 99, 150, 175, 200, 250, 275, 300)]
    batches = [sessions, [("A", 225, "x")]]
    model, _ = ref.rate_limited(batches, 0, windows=ref.Session(30, 1000))
    assert model[-3:] == [
        ("A", 150, 200, None, 1, 300),
        ("A", 250, 300, None, 1, 300),
        ("A", 150, 300, 7, 1, 300),
    ]
    p = (
        Pipeline("kip94", timestamp="ts", arrival="seq")
        .group_by("k")
        .windowed_by(SessionWindows.of_inactivity_gap_and_grace(30, 1000))
        .aggregate(agg.count("n"))
        .suppress(Suppressed.until_time_limit(0, BufferConfig.unbounded()))
        .to("out")
    )
    logs = {}
    # each extension and the merge in batches of their own: a record's forwards leave as it is
    # folded, so the log must not depend on where batches end
    cuts = [sessions[:3], sessions[3:6], sessions[6:9], sessions[9:], [("A", 225, "x")]]
    for split in (batches, cuts):
        rt = Runtime(spark.newSession(), f"{warehouse}/{len(split)}", quality=False)
        run_stream(rt, p, split, value_type=STRING)
        rows = rt.read_output(p).selectExpr(
            "unix_millis(window_start)", "unix_millis(window_end)", "n", "tombstone", "unix_millis(emitted_stream_time)"
        )
        logs[len(split)] = sorted((tuple(r) for r in rows.collect()), key=repr)
    assert logs[2] == sorted(((s, e, n, n is None, st) for _, s, e, n, _, st in model), key=repr)
    assert logs[2] == logs[5]
