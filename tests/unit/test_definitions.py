"""Definitions as pure values: each window type's close and retention rule, and which
aggregates need the arrival order (no Spark)."""

from __future__ import annotations

from framework.definition import aggregations as agg
from framework.definition.columns import ARRIVAL
from framework.definition.windows import SessionWindows, SlidingWindows, TimeWindows, WindowType


def test_every_window_type_answers_what_the_layers_above_ask():
    """The layers above ask a window type, never test its class: which plan computes it, what
    names one window, whether its end is in it, whether state holds it after it closes, whether
    windows merge, whether its plan scans records in arrival order. A new type answers all."""
    from framework.execution.plans import PLANS

    answers = {
        t.__name__: (t.kind, t.bounds, t.end_inclusive, t.held_after_close, t.merges, t.scans_in_order)
        for t in WindowType.__subclasses__()
    }
    assert answers == {
        "TimeWindows": ("time", ("window_start",), False, False, False, False),
        "SlidingWindows": ("sliding", ("window_start",), True, True, False, True),
        "SessionWindows": ("session", ("window_start", "window_end"), True, False, True, True),
    }
    assert set(PLANS) == {t.kind for t in WindowType.__subclasses__()}  # each has its plan


def test_each_window_type_closes_by_its_own_rule():
    # time windows end exclusively: end + grace
    hopping = TimeWindows.of_size_and_grace(10, 3).advance_by(5)
    assert hopping.close(20) == 23 and hopping.close_offset_ms() == 13
    # sliding windows end inclusively: end + 1 + grace; a record is late once the window starting at it closed
    sliding = SlidingWindows.of_time_difference_and_grace(10, 3)
    assert sliding.close(20) == 24 and sliding.last_close(5) == 19 and sliding.held_ms() == 33
    # sessions may still be extended within the gap: end + 1 + gap + grace
    assert SessionWindows.of_inactivity_gap_and_grace(5, 3).close(20) == 29


def test_order_sensitive_aggregates_say_so():
    assert [a.ordered for a in (agg.latest("v"), agg.earliest("v"), agg.collect_list("v"))] == [True] * 3
    assert not any(a.ordered for a in (agg.count(), agg.sum("v"), agg.min("v"), agg.max("v"), agg.avg("v")))
    assert agg.custom("last_pos", f"max({ARRIVAL}.pos)", "max(last_pos)").ordered
    assert not agg.custom("sumsq", "sum(v * v)", "sum(sumsq)").ordered
    by_hand = agg.Aggregate(
        "x", "mine", None, (agg.Partial("x", f"max(struct({ARRIVAL} AS o, v AS v))", "max(x)"),), "x.v"
    )
    assert by_hand.ordered  # agg.Aggregate is public: its partials say it


def test_each_suppression_gives_one_kind_of_results_table():
    """A pipeline's suppression names what its sink receives, once: the layers ask that kind
    (which rows to emit, appended or MERGEd, gated, buffered) and never the suppression's mode."""
    from datetime import timedelta

    from framework import BufferConfig, Pipeline, Suppressed
    from framework.definition import emission

    base = Pipeline("p", timestamp="ts").group_by("k").windowed_by(TimeWindows.of_size_and_grace(10, 0))
    base = base.aggregate(agg.count("n"))
    closes = base.suppress(Suppressed.until_window_closes(BufferConfig.unbounded())).to("out")
    final, log = (
        closes.emission,
        base.suppress(Suppressed.until_time_limit(timedelta(seconds=1), BufferConfig.unbounded())).emission,
    )
    assert (final, log, base.emission) == (emission.FINAL_RESULTS, emission.UPDATE_LOG, emission.UPDATES)
    answers = {e.name: (e.final, e.appended, e.buffered) for e in (final, log, base.emission)}
    assert answers == {
        "final_results": (True, True, False),
        "rate_limited": (False, True, True),
        "updates": (False, False, False),
    }
    assert [e.pick("closed", "changed") for e in (final, log, base.emission)] == ["closed", "changed", "changed"]
    assert "--> Sink out (append, final results)" in closes.describe()


def test_the_session_fold_says_how_many_sessions_each_record_opened():
    """A chunk counts the sessions open after each interval from what each record opened (one
    less than the open sessions it joined): the fold's sessions, open and closed, are always the
    held ones plus what its records opened, and while nothing closes they are as many as the
    sorted spans of the held sessions and records leave gaps wider than the inactivity gap."""
    import random

    from framework.execution.fold import Sessions

    def sessions(spans, gap):
        count, reach = 0, None
        for a, b in sorted(spans):
            count += reach is None or a - reach > gap
            reach = b if reach is None else max(reach, b)
        return count

    rng = random.Random(7)
    for _ in range(500):
        gap, grace, closing = rng.randint(0, 5), rng.randint(0, 5), rng.random() < 0.5
        fold, spans, start, judged = Sessions(SessionWindows.of_inactivity_gap_and_grace(gap, grace)), [], 0, None
        for _ in range(rng.randint(0, 3)):  # stored sessions, more than the gap apart
            start += gap + 1 + rng.randint(0, 5)
            spans.append((start, start + rng.randint(0, 4)))
            fold.held(start, *spans[-1])
            start = spans[-1][1]
        held = len(spans)
        for pos in range(rng.randint(1, 12)):
            ts = rng.randint(0, 40)
            if closing:
                judged = max(judged or 0, ts - rng.randint(0, 8))
            fold.record(pos, ts, judged)
            spans.append((ts, ts))
            assert len(fold.active) + len(fold.done) == held + sum(fold.opens.values()), (gap, grace, spans)
            if not closing:
                assert len(fold.active) == sessions(spans, gap), (gap, spans)
