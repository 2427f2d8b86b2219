"""Smoke test of the side-by-side benchmark (bench/vs_streaming.py) at a tiny size: it runs end to
end on real Spark and Delta, A = B = ground truth on in-order data, and the report has its fields.
No timing is asserted (the machine may be shared)."""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

from vs_streaming import run  # noqa: E402


def test_bench_tumbling_tiny(spark, tmp_path):
    rep = run(spark, "tumbling", "smoke", events=1_000, batches=2, keys=10, out_of_order=0.0, too_late=0.0,
              seed=1, results=tmp_path)
    assert rep["cross_check"]["passed"] and rep["cross_check"]["rows_a"] > 0
    saved = json.loads((tmp_path / "tumbling-smoke.json").read_text())
    for field in ("seconds", "stats", "ratio_a_over_b", "ratio_a_over_c", "state_bytes", "cross_check",
                  "a_spark_jobs_per_batch", "a_delta_commits_per_batch", "machine"):
        assert field in saved
    assert all(len(saved["seconds"][n]) == 2 for n in "ABC")
    assert (tmp_path / "tumbling-smoke.png").stat().st_size > 0 and (tmp_path / "tumbling-smoke.md").exists()
