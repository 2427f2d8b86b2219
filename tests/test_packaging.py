"""The wheel works outside the checkout: it ships the default expectations, and a gated batch
needs no Airflow.

The wheel goes into a fresh virtualenv that borrows this one's site-packages through a ``.pth``
file (downloading pyspark again would be slow), while the batch's process refuses ``airflow``.
"""

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TEMPLATE = "framework/operations/final_results.template.json"

BATCH = '''
import importlib.abc
import json
import sys


class NoAirflow(importlib.abc.MetaPathFinder):
    """Airflow is in the borrowed site-packages: make it absent, as without the extra."""

    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] == "airflow":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)


sys.meta_path.insert(0, NoAirflow())

import datetime as dt
from datetime import timedelta as td

import framework
from framework import BufferConfig, Pipeline, Runtime, Suppressed, TimeWindows, agg, spark_session

warehouse = sys.argv[1]
spark = spark_session("packaging", master="local[1]", conf={"spark.sql.shuffle.partitions": "2"})
pipeline = (Pipeline("packaged_alerts", timestamp="ts", arrival="seq").group_by("user_id")
            .windowed_by(TimeWindows.of_size_and_grace(td(hours=1), td(minutes=10)))
            .aggregate(agg.count("events"))
            .suppress(Suppressed.until_window_closes(BufferConfig.unbounded()))
            .to("alert_windows"))
T = dt.datetime
rows = [(0, "u1", T(2026, 1, 1, 0, 5)), (1, "u2", T(2026, 1, 1, 0, 30)), (2, "u1", T(2026, 1, 1, 2, 0))]
result = Runtime(spark, warehouse).run_batch(
    pipeline, "b0", spark.createDataFrame(rows, "seq long, user_id string, ts timestamp"))
checks = spark.read.format("delta").load(f"{warehouse}/quality_results").collect()
try:
    import framework.airflow
    dag_factory = "imported"
except ImportError as e:
    dag_factory = str(e)
print(json.dumps({"framework": framework.__file__, "status": result.status, "emitted": result.emitted,
                  "checks": [(c.expectation, c.success) for c in checks], "dag_factory": dag_factory,
                  "airflow_modules": [m for m in sys.modules if m.partition(".")[0] == "airflow"]}))
spark.stop()
'''


def _wheel(tmp: Path) -> Path:
    """Build from a copy of the sources, so no build/ or egg-info lands in the checkout."""
    src = tmp / "src"
    shutil.copytree(ROOT / "framework", src / "framework", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp / "dist"), str(src)],
        check=True,
        timeout=300,
    )
    (wheel,) = (tmp / "dist").glob("finalresults-*.whl")
    return wheel


@pytest.mark.slow
def test_the_wheel_gates_a_batch_outside_the_checkout_without_airflow(tmp_path):
    assert not tmp_path.is_relative_to(ROOT)
    wheel = _wheel(tmp_path)
    names = zipfile.ZipFile(wheel).namelist()
    assert TEMPLATE in names and "framework/orchestration/log4j2.properties" in names
    assert "framework/operations/data_docs_assets/jquery-3.7.1.min.js" in names

    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=False)
    python = env_dir / "bin" / "python"
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", str(wheel)],
        check=True,
        timeout=300,
    )
    purelib = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    Path(purelib, "borrowed.pth").write_text(sysconfig.get_path("purelib") + "\n")

    work = tmp_path / "elsewhere"
    work.mkdir()
    (work / "batch.py").write_text(BATCH)
    env = {
        k: v
        for k, v in os.environ.items()
        if k
        not in (
            "PYTHONPATH",
            "PYSPARK_PYTHON",
            "PYSPARK_DRIVER_PYTHON",
            "PYSPARK_GATEWAY_PORT",
            "FINALRESULTS_EXPECTATIONS",
        )
    }
    done = subprocess.run(
        [python, "batch.py", str(tmp_path / "lake")], cwd=work, env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])

    assert Path(out["framework"]).is_relative_to(env_dir)  # the wheel's copy, not the checkout's
    assert (out["status"], out["emitted"]) == ("committed", 2)
    kinds = {name.partition("(")[0] for name, _ in out["checks"]}  # the template's, found in the wheel
    assert {
        "expect_compound_columns_to_be_unique",
        "expect_column_values_to_not_be_null",
        "expect_column_pair_values_a_to_be_greater_than_b",
        "expect_column_values_to_be_between",
    } <= kinds
    assert all(success for _, success in out["checks"]), out["checks"]
    assert "finalresults[airflow]" in out["dag_factory"]
    assert out["airflow_modules"] == []
