"""Definitions refused, or accepted, when they are written: ``DefinitionError`` from the
``Pipeline``, window and suppression builders, before anything runs (no Spark)."""

import pytest
from harness import unsunk

from framework import (
    BufferConfig,
    DefinitionError,
    Pipeline,
    SessionWindows,
    SlidingWindows,
    Suppressed,
    TimeWindows,
    agg,
)


@pytest.mark.parametrize(
    "build,pattern",
    [
        (lambda: Pipeline("bad name!"), r"pipeline name must match"),
        (
            lambda: Pipeline("p", bad_records="skip"),
            r"pipeline 'p': bad_records must be one of \('refuse', 'quarantine'\), got 'skip'",
        ),
        (lambda: Pipeline("p").group_by("k; DROP TABLE x"), r"group_by key must match"),
        (lambda: Pipeline("p").group_by("k").aggregate(), r"aggregate\(\) takes one or more"),
        (
            lambda: (
                Pipeline("p")
                .group_by("k")
                .windowed_by(TimeWindows.of_size_and_grace(10, 1))
                .aggregate(agg.count())
                .suppress(Suppressed.until_window_closes(BufferConfig.max_records(5)))
            ),
            r"needs a strict buffer.*shut_down_when_full",
        ),
        (
            lambda: (
                Pipeline("p")
                .group_by("k")
                .aggregate(agg.count())
                .suppress(Suppressed.until_window_closes(BufferConfig.unbounded()))
            ),
            r"needs a windowed aggregation",
        ),
        (lambda: TimeWindows.of_size_and_grace(10, 1).advance_by(20), r"'advance' must be in"),
        (lambda: Pipeline("p").group_by("k").aggregate(agg.count("k")), r"clash"),
        # names that would collide (compared ignoring case, as Spark, Delta and some stores do)
        *[
            (
                lambda sink=sink: unsunk("p").to(sink),
                rf"pipeline 'p': sink name '{sink}' is the name of the pipeline's own .*choose another name for \.to",
            )
            for sink in (
                "metrics",
                "_ledger",
                "window_state",
                "records",
                "late_records",
                "rejected_records",
                "_staging",
                "Metrics",
                "LATE_RECORDS",
            )
        ],
        (
            lambda: unsunk("p").to("buffer_rate"),
            r"sink name 'buffer_rate' is in the namespace of the pipeline's suppression buffer tables"
            r".*another name for \.to",
        ),
        (lambda: unsunk("p").to("Buffer_anything"), r"sink name 'Buffer_anything' .*suppression buffer tables"),
        *[
            (
                lambda name=name: Pipeline(name),
                rf"pipeline name '{name}' is the name of the framework's .* at the warehouse root"
                r".*choose another pipeline name",
            )
            for name in ("quality_results", "data_docs", "gx", "GX", "Quality_Results")
        ],
        (
            lambda: unsunk("p", Suppressed.until_window_closes(BufferConfig.unbounded()).with_name("metrics")),
            r"suppression name 'metrics' is the name of the pipeline's own metrics table.*Suppressed\.with_name",
        ),
        (
            lambda: unsunk("p", Suppressed.until_window_closes(BufferConfig.unbounded()).with_name("Window_State")),
            r"suppression name 'Window_State' is the name of the pipeline's own window state table",
        ),
        (lambda: Pipeline("p").group_by("k").aggregate(agg.count("K")), r"output column names clash: \['K', 'k'\]"),
        (
            lambda: (
                Pipeline("p")
                .group_by("k")
                .windowed_by(TimeWindows.of_size_and_grace(10, 1))
                .aggregate(agg.count("Window_Start"))
            ),
            r"clash: aggregate 'Window_Start' is the column 'window_start'",
        ),
        (
            lambda: Pipeline("p").group_by("k").aggregate(agg.count("Emitted_Stream_Time")),
            r"clash: aggregate 'Emitted_Stream_Time' is the column 'emitted_stream_time'",
        ),
        (
            lambda: Pipeline("p").group_by("k").aggregate(agg.sum("v", "total"), agg.sum("v", "TOTAL")),
            r"output column names clash: \['TOTAL', 'total'\]",
        ),
        (
            lambda: Pipeline("p").group_by("k").aggregate(agg.avg("v", "a"), agg.sum("v", "a_sum")),
            r"aggregates 'a' and 'a_sum' both keep the state column '_p_a_sum'",
        ),
        (lambda: Pipeline("p").group_by("k", "K"), r"group_by keys clash: \['k', 'K'\]"),
        (
            lambda: Pipeline("p").group_by("window_end"),
            r"group_by key 'window_end' clashes with the column 'window_end'",
        ),
        (
            lambda: unsunk("p").with_column("N", "n + 1"),
            r"with_column name 'N' differs only in case from the result column 'n'.*with_column\('n', \.\.\.\)",
        ),
        (
            lambda: unsunk("p").with_column("Window_End", "window_end"),
            r"with_column name 'Window_End' differs only in case from the result column 'window_end'",
        ),
        (
            lambda: unsunk("p").with_column("score", "n * 2").with_column("SCORE", "n * 3"),
            r"with_column name 'SCORE' differs only in case from the result column 'score'",
        ),
        (
            lambda: unsunk("p").with_column("emitted_batch_id", "'x'"),
            r"with_column name 'emitted_batch_id' is the column 'emitted_batch_id' the sink stamps",
        ),
        (lambda: unsunk("p").select("k", "K"), r"select columns \['k', 'K'\] name the same column"),
    ],
)
def test_invalid_definitions_are_refused_when_written(build, pattern):
    with pytest.raises(DefinitionError, match=pattern):
        build()


@pytest.mark.parametrize(
    "build",
    [
        lambda: unsunk("p").with_column("n", "n + 1").with_column("window_start", "window_start").to("out"),
        lambda: unsunk("p").with_column("score", "n * 2").with_column("score", "score + 1").to("out"),
        lambda: unsunk("p").select("K", "n").with_column("k", "upper(k)").to("out"),
        lambda: unsunk("p").to("metrics_by_user"),
        lambda: unsunk("p").to("my_records"),
        lambda: Pipeline("gx_alerts").group_by("k").aggregate(agg.count("n")).to("out"),
        lambda: unsunk("p", Suppressed.until_window_closes(BufferConfig.unbounded()).with_name("buffer")),
    ],
    ids=[
        "replace_exact",
        "replace_added",
        "after_select",
        "sink_metrics_by_user",
        "sink_my_records",
        "pipeline_gx_alerts",
        "suppression_buffer",
    ],
)
def test_names_near_reserved_ones_are_accepted(build):
    """Only a collision is refused: exact-name replacement and names merely containing a reserved one pass."""
    build()


def test_byte_bounds_for_final_results_are_checked_after_every_record_so_need_record_lateness():
    bounded = Suppressed.until_window_closes(BufferConfig.max_bytes(100).shut_down_when_full())
    for windows in (
        TimeWindows.of_size_and_grace(10, 0),
        SlidingWindows.of_time_difference_and_grace(10, 0),
        SessionWindows.of_inactivity_gap_and_grace(10, 0),
    ):
        Pipeline("bounded", timestamp="ts").group_by("k").windowed_by(windows).aggregate(agg.count()).suppress(bounded)
    with pytest.raises(DefinitionError, match="max_bytes bound on until_window_closes.*needs lateness='record'"):
        (
            Pipeline("bounded", timestamp="ts", arrival="seq", lateness="batch")
            .group_by("k")
            .windowed_by(SessionWindows.of_inactivity_gap_and_grace(10, 0))
            .aggregate(agg.count("n"))
            .suppress(Suppressed.until_window_closes(BufferConfig.max_bytes(100).shut_down_when_full()))
        )
