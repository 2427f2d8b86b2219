"""KIP-328's eviction tables (seeds/kip-328-suppress.txt), each as its own test.

A table is a plain (non-windowed) table of the latest value per key, suppressed with
``until_time_limit``: records ``(offset, key, value, timestamp)``, the buffer's slots after each
record as ``(key, value, buffer time)`` in eviction order, and the emissions as
``(key, value, offset of the record that made it leave)``. Each table runs twice: through the
buffer itself (every slot checked), and through Spark and Delta as one batch and as one batch
per record (the emitted rows, their stream time and their batch).

SPEC 3.6 differs from the KIP's drawings in one respect: an update keeps the key's buffer time
(the KIP draws the newer timestamp in the slot; Kafka's buffer keeps the first one). Where that
changes an outcome, the test says so.
"""
from datetime import timedelta as td

import pytest

from framework import BufferConfig, BufferFullError, Pipeline, Runtime, Suppressed, agg
from framework import eviction
from harness import frame, in_parallel, run_stream
import reference as ref

FOREVER = td(days=365 * 100)
STRING = "string"


def pipeline(name, limit, buffer):
    return (Pipeline(name, timestamp="ts", arrival="seq").group_by("k").aggregate(agg.latest("v", "v"))
            .suppress(Suppressed.until_time_limit(limit, buffer).with_name("rate")).to("out"))


def slots_and_emits(limit, buffer, records):
    """Run ``records`` through ``eviction.Buffer``: slots after each record, and emissions."""
    limit_ms = limit // td(milliseconds=1) if isinstance(limit, td) else limit
    buf = eviction.Buffer(limit_ms, buffer.record_limit, buffer.byte_limit, eager=not hasattr(buffer, "when_full"))
    values, st, slots, emits = {}, None, [], []
    for offset, (key, value, ts) in enumerate(records):
        before, st = (st if st is not None else -(2 ** 63)), ts if st is None else max(st, ts)
        values[offset] = value
        for c in buf.process(eviction.Update((key,), (key,), offset, before, st, ts, len(value), offset)):
            if c.kind == "emit":
                emits.append((c.entry.ident[0], values[c.entry.ref], offset))
        slots.append([(e.ident[0], values[e.ref], e.time)
                      for e in sorted(buf.entries.values(), key=lambda e: (e.time, e.order))])
    return slots, emits


def run_table(spark, warehouse, name, limit, buffer, records, slots, emits):
    got_slots, got_emits = slots_and_emits(limit, buffer, records)
    assert got_slots == slots
    assert got_emits == emits
    stream = [(k, ts, v) for k, v, ts in records]
    times = [max(ts for _, _, ts in records[:i + 1]) for i in range(len(records))]

    def run(split):
        rt = Runtime(spark.newSession(), f"{warehouse}/{split}", quality=False)
        p = pipeline(name, limit, buffer)
        batches = [stream] if split == "one" else [[r] for r in stream]
        last = run_stream(rt, p, batches, value_type=STRING)[-1]
        if rt._last_commit(p).output_version is None:
            return split, [], last
        rows = rt.read_output(p).selectExpr("k", "v", "emitted_batch_id", "unix_millis(emitted_stream_time) AS st")
        return split, sorted(tuple(r) for r in rows.collect()), last

    for split, rows, last in in_parallel([lambda s=s: run(s) for s in ("one", "each")]):
        want = sorted((k, v, "b0000" if split == "one" else f"b{at:04d}", times[at]) for k, v, at in emits)
        assert rows == want, split
        if split == "one":
            assert last.metrics["suppression_buffer_count_current"] == len(slots[-1])
            assert last.metrics["suppression_emit_total"] == len(emits)


def test_an_update_overwrites_the_value_and_keeps_the_buffer_time(spark, warehouse):
    run_table(spark, warehouse, "overwrite", FOREVER, BufferConfig.unbounded(),
              [("A", "x", 0), ("A", "y", 1)],
              slots=[[("A", "x", 0)], [("A", "y", 0)]], emits=[])


def test_an_earlier_update_by_time_still_overwrites_in_offset_order(spark, warehouse):
    run_table(spark, warehouse, "overwrite_earlier", FOREVER, BufferConfig.unbounded(),
              [("A", "x", 1), ("A", "w", 0)],
              slots=[[("A", "x", 1)], [("A", "w", 1)]], emits=[])


def test_key_limit_2_evicts_the_oldest(spark, warehouse):
    run_table(spark, warehouse, "key_limit", FOREVER, BufferConfig.max_records(2),
              [("A", "w", 0), ("A", "x", 1), ("B", "y", 2), ("C", "z", 3)],
              slots=[[("A", "w", 0)], [("A", "x", 0)], [("A", "x", 0), ("B", "y", 2)], [("B", "y", 2), ("C", "z", 3)]],
              emits=[("A", "x", 3)])


def test_byte_limit_3_evicts_the_oldest(spark, warehouse):
    run_table(spark, warehouse, "byte_limit", FOREVER, BufferConfig.max_bytes(3),
              [("A", "xx", 0), ("A", "yy", 1), ("B", "zz", 2)],
              slots=[[("A", "xx", 0)], [("A", "yy", 0)], [("B", "zz", 2)]],
              emits=[("A", "yy", 2)])


def test_emit_after_2ms(spark, warehouse):
    # SPEC: A keeps buffer time 0 after its update, so it leaves at offset 2 (stream time 2),
    # one record earlier than the KIP's drawing (which restarts A's timer at 1).
    run_table(spark, warehouse, "after_2ms", 2, BufferConfig.unbounded(),
              [("A", "w", 0), ("A", "x", 1), ("B", "y", 2), ("C", "z", 3)],
              slots=[[("A", "w", 0)], [("A", "x", 0)], [("B", "y", 2)], [("B", "y", 2), ("C", "z", 3)]],
              emits=[("A", "x", 2)])


def test_late_records_can_leave_at_once(spark, warehouse):
    # B (time 1) is late at stream time 3: it enters and leaves at once. A's update at time 1
    # keeps A's buffer time 3 (SPEC), so unlike the KIP's drawing A stays.
    run_table(spark, warehouse, "late_2ms", 2, BufferConfig.unbounded(),
              [("A", "w", 3), ("A", "x", 1), ("B", "y", 1)],
              slots=[[("A", "w", 3)], [("A", "x", 3)], [("A", "x", 3)]],
              emits=[("B", "y", 2)])


def test_key_limit_2_with_a_late_record(spark, warehouse):
    # C arrives last with time 0. A also has buffer time 0 (kept from its first record), and the
    # tie goes by key: A leaves, where the KIP (drawing A at time 1) shows C leaving.
    run_table(spark, warehouse, "key_limit_late", FOREVER, BufferConfig.max_records(2),
              [("A", "w", 0), ("A", "x", 1), ("B", "y", 2), ("C", "z", 0)],
              slots=[[("A", "w", 0)], [("A", "x", 0)], [("A", "x", 0), ("B", "y", 2)], [("C", "z", 0), ("B", "y", 2)]],
              emits=[("A", "x", 3)])


def test_byte_limit_3_with_a_late_record(spark, warehouse):
    # As above: A (buffer time 0) and B (time 0) tie; by key, A leaves.
    run_table(spark, warehouse, "byte_limit_late", FOREVER, BufferConfig.max_bytes(3),
              [("A", "xx", 0), ("A", "yy", 1), ("B", "zz", 0)],
              slots=[[("A", "xx", 0)], [("A", "yy", 0)], [("B", "zz", 0)]],
              emits=[("A", "yy", 2)])


def test_big_records_push_several_out(spark, warehouse):
    run_table(spark, warehouse, "big_record", FOREVER, BufferConfig.max_bytes(3),
              [("A", "x", 0), ("B", "y", 1), ("C", "zzz", 2)],
              slots=[[("A", "x", 0)], [("A", "x", 0), ("B", "y", 1)], [("C", "zzz", 2)]],
              emits=[("A", "x", 2), ("B", "y", 2)])


def test_a_record_too_big_for_the_buffer_leaves_at_once(spark, warehouse):
    run_table(spark, warehouse, "too_big", FOREVER, BufferConfig.max_bytes(3),
              [("A", "x", 0), ("B", "y", 1), ("C", "zzzz", 2)],
              slots=[[("A", "x", 0)], [("A", "x", 0), ("B", "y", 1)], []],
              emits=[("A", "x", 2), ("B", "y", 2), ("C", "zzzz", 2)])


def test_eviction_is_by_time_not_by_offset(spark, warehouse):
    # KIP-328's rejected alternative: evicting by offset would hold B behind A. Here B leaves
    # at stream time 3 (1 <= 3 - 2) although A arrived first; A leaves at stream time 4.
    run_table(spark, warehouse, "by_time", 2, BufferConfig.unbounded(),
              [("A", "x", 2), ("B", "y", 1), ("C", "z", 3), ("C", "zz", 4)],
              slots=[[("A", "x", 2)], [("B", "y", 1), ("A", "x", 2)], [("A", "x", 2), ("C", "z", 3)], [("C", "zz", 3)]],
              emits=[("B", "y", 2), ("A", "x", 3)])
