"""The chaos soak (bench/soak.py) at one short seed: two pipelines (sliding windows and a rate-limited
one), faults drawn from crashes at write points, a paused zombie beside a retry, maintenance
between a crash and its re-run, a failed gate then corrected input, two replays at once and a
skipped interval. The verdict is the soak's own: after every step the tables equal those of a
clean warehouse run without faults, nothing lost or duplicated, and the sliding windows' results
equal the reference model's (tests/reference.py) over the effective input. The long soak (kill -9 and
SIGSTOP of child processes, every window type, hundreds of faults) is in bench/README.md."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

from soak import KINDS, report, soak  # noqa: E402

# The fault count ends the soak (about 2 minutes alone); the time bound only stops a stuck one.
# At 2 minutes, a run beside a long soak stopped after 8 steps, before the sliding pipeline had
# closed a window the reference model could check.
SEED, FAULTS, MINUTES = 3, 8, 8


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_short_chaos_soak_leaves_the_tables_of_a_clean_run(spark, tmp_path):
    kinds = {k: w for k, w in KINDS.items() if k not in ("kill", "stop")}  # child JVMs: the long soak's
    summary = soak(
        spark,
        str(tmp_path / "lake"),
        str(tmp_path / "clean"),
        SEED,
        FAULTS,
        MINUTES,
        ["sliding", "rate"],
        kinds,
        tmp_path,
    )
    print(report(summary))
    assert summary["passed"], report(summary)
    assert summary["lost"] == 0 and summary["duplicated"] == 0 and summary["rows_checked"] > 0
    assert summary["rows_checked_against_model"] > 0, report(summary)  # sliding windows: the model covers them
    assert summary["faults"] >= 1, report(summary)
