"""Property tests: random streams, random batch splits, checked against the reference model.

For each generated stream the pipeline runs twice: as one batch, and split at one or two random
places (two or three batches; test_examples runs its KAFKA_SLIDING streams one record per
batch). Each run must equal the reference model for its split, window bounds, values, emitting
batch and stream time included, and so must the windows open after each batch (the
``windows_open`` metric) and each batch's lateness counters (``late_record_drop_total``,
``late_records``, ``record_lateness_max``); and the final rows (key, window, aggregates) must be identical
across the splits (batch-split invariance, docs/design.md#batch-split-invariance). The fixed
streams of ``test_examples`` add the cases chosen by hand.
"""

import tempfile
import uuid

import reference as ref
from harness import AGGREGATES, expected, in_parallel, results, run_stream
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from framework import BufferConfig, Pipeline, Runtime, SessionWindows, SlidingWindows, Suppressed, TimeWindows
from framework.storage import tables

WINDOWS = {
    "tumbling": (lambda g: TimeWindows.of_size_and_grace(10, g), lambda g: ref.Tumbling(10, g)),
    "hopping": (lambda g: TimeWindows.of_size_and_grace(10, g).advance_by(5), lambda g: ref.Tumbling(10, g, 5)),
    "sliding": (lambda g: SlidingWindows.of_time_difference_and_grace(8, g), lambda g: ref.Sliding(8, g)),
    "session": (lambda g: SessionWindows.of_inactivity_gap_and_grace(4, g), lambda g: ref.Session(4, g)),
}

records = st.lists(
    st.tuples(st.sampled_from(["A", "B"]), st.integers(0, 40), st.one_of(st.none(), st.integers(-5, 20))),
    min_size=3,
    max_size=6,
)


@st.composite
def streams(draw):
    recs = draw(records)
    cuts = sorted(draw(st.sets(st.integers(1, len(recs) - 1), min_size=1, max_size=2)))
    bounds = [0, *cuts, len(recs)]
    return recs, [recs[a:b] for a, b in zip(bounds, bounds[1:])], draw(st.integers(0, 6))


def _check(spark, kind, data, lateness="record"):
    recs, split, grace = data
    make, model = WINDOWS[kind]
    splits = {"one": [recs], "random": split}
    lake = tempfile.mkdtemp(prefix="prop-")

    def run(label):
        name = f"{kind}_{label}_{uuid.uuid4().hex[:8]}"
        p = (
            Pipeline(name, timestamp="ts", arrival="seq", lateness=lateness)
            .group_by("k")
            .windowed_by(make(grace))
            .aggregate(*AGGREGATES)
            .suppress(Suppressed.until_window_closes(BufferConfig.unbounded()))
            .to("out")
        )
        rt = Runtime(spark.newSession(), lake, quality=False)
        ran = run_stream(rt, p, splits[label])
        rows = results(rt, p) if tables.exists(rt.spark, rt.tables(p).output) else []
        return label, (rows, [r.metrics["windows_open"] for r in ran], [r.metrics for r in ran])

    got = dict(in_parallel([lambda label=label: run(label) for label in splits]))
    for label, batches in splits.items():
        still_open: list[int] = []
        counted: list[dict] = []
        want = expected(ref.run(model(grace), batches, lateness, still_open, counted))
        rows, opened, metrics = got[label]
        assert (rows, opened) == (want, still_open), f"{kind} split={label}"
        assert [{k: m[k] for k in c} for m, c in zip(metrics, counted)] == counted, f"{kind} split={label}"
    if lateness == "batch":  # judged per batch, results depend on the split
        return
    final = {
        label: [{k: v for k, v in r.items() if not k.startswith("emitted")} for r in rows]
        for label, (rows, _, _) in got.items()
    }
    assert final["one"] == final["random"]


def _property(kind, lateness="record"):
    @settings(max_examples=2, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
    @given(data=streams())
    def test(spark, data):
        _check(spark, kind, data, lateness)

    test.__name__ = f"test_{kind}_matches_reference_model_for_any_batch_split" + (
        "" if lateness == "record" else f"_with_lateness_{lateness}"
    )
    return test


test_tumbling = _property("tumbling")
test_hopping = _property("hopping")
test_sliding = _property("sliding")
test_session = _property("session")
test_sliding_batch_lateness = _property("sliding", "batch")
test_hopping_batch_lateness = _property("hopping", "batch")
