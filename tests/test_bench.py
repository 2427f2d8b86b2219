"""Smoke tests of the benchmarks (bench/vs_streaming.py, bench/cold.py) at a tiny size: they run end
to end on real Spark and Delta, A = B = ground truth on in-order data, and the reports have their fields.
No timing is asserted (the machine may be shared)."""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

from vs_streaming import run  # noqa: E402


def test_bench_tumbling_tiny(spark, tmp_path):
    rep = run(
        spark,
        "tumbling",
        "smoke",
        events=1_000,
        batches=2,
        keys=10,
        out_of_order=0.0,
        too_late=0.0,
        seed=1,
        results=tmp_path,
    )
    assert rep["cross_check"]["passed"] and rep["cross_check"]["rows_a"] > 0
    saved = json.loads((tmp_path / "tumbling-smoke.json").read_text())
    for field in (
        "seconds",
        "stats",
        "ratio_a_over_b",
        "ratio_a_over_c",
        "state_bytes",
        "cross_check",
        "a_spark_jobs_per_batch",
        "a_delta_commits_per_batch",
        "machine",
    ):
        assert field in saved
    assert all(len(saved["seconds"][n]) == 2 for n in "ABC")
    assert (tmp_path / "tumbling-smoke.png").stat().st_size > 0 and (tmp_path / "tumbling-smoke.md").exists()


def test_bench_tumbling_tiny_with_per_record_lateness(spark, tmp_path):
    """The default lateness rule's row: reported beside B, not judged equal to it."""
    rep = run(
        spark,
        "tumbling",
        "smoke",
        events=1_000,
        batches=2,
        keys=10,
        out_of_order=0.0,
        too_late=0.0,
        seed=1,
        results=tmp_path,
        lateness="record",
    )
    assert rep["lateness"] == "record" and rep["cross_check"]["passed"] is None
    assert rep["cross_check"]["rows_a"] > 0 and (tmp_path / "tumbling-smoke-record.json").exists()


def test_cold_bench_submits_each_batch_and_compares_final_rows(spark, tmp_path):
    """bench/cold.py at one tiny batch of three hours (it closes its first two hours' windows): A
    with the quality gate on (A+; gate off is the same job without the audit) and B each run as
    their own spark-submit, and their final rows are equal. No timing asserted. (One batch: a
    cold spark-submit costs up to 100 s on the suite's shared cores, and a second one per runner
    shows nothing the first does not.)"""
    from cold import run as cold_run

    rep = cold_run(
        spark, batches=1, events_per_batch=300, keys=5, results=tmp_path, names=("A+", "B"), hours_per_batch=3
    )
    assert rep["cross_check"]["equal_to_b"] == {"A+": True} and rep["cross_check"]["rows"]["A+"] > 0
    assert all(len(rep["runs"][n]["wall"]) == 1 and rep["runs"][n]["after_start"][0] > 0 for n in ("A+", "B"))
    md = (tmp_path / "cold.md").read_text()
    assert md.startswith("**cold batches**") and f"A+/B = {rep['ratio_over_b']['A+']}" in md
