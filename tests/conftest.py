import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))


@pytest.fixture(scope="session")
def spark():
    from framework import spark_session
    # Test batches hold a handful of rows: compiling whole-stage code costs more than it saves,
    # and adaptive execution runs each shuffle stage as a job of its own (about 90 jobs instead
    # of 37 for a rate-limited batch).
    session = spark_session("tests", master="local[2]", conf={"spark.sql.codegen.wholeStage": "false",
                                                              "spark.sql.adaptive.enabled": "false"})
    yield session
    session.stop()


@pytest.fixture
def warehouse(tmp_path):
    return str(tmp_path / "lake")
