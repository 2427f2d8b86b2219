"""tests/unit: pure-Python tests, seconds in all (``make test`` runs them before the Spark suite).
``tests/conftest.py`` applies here too (``import reference`` works); its ``spark`` fixture does not."""

import pytest


@pytest.fixture(scope="session")
def spark():
    pytest.fail("tests/unit run without Spark: a test that needs the spark fixture belongs in tests/")
