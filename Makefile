# Two entry points for a newcomer: `make demo` and `make test` (both install first).
# `make test` = `make lint` (ruff, mypy: seconds), `make unit` (tests/unit, pure Python: seconds),
# then the Spark suite (everything else in tests/).
VENV   ?= .venv
PY     := $(VENV)/bin/python
# Two workers, a test file each at a time: the Airflow, cluster and kill tests mostly wait on
# their subprocesses, so the other worker's Spark tests fill the second core. Files start in
# tests/conftest.py's order (slowest first), not xdist's (most tests first).
PYTEST_ARGS ?= -q --durations=25 -n 2 --dist loadfile --no-loadscope-reorder

.PHONY: install lint unit test demo bench bench-quick clean

LOGSTORE_JAR := framework/storage/java/finalresults-s3-logstore.jar

install: $(VENV)/.installed $(LOGSTORE_JAR)

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[dev]"
	# Headless chromium for the UI tests (Airflow plugin, Data Docs), driven by playwright.
	command -v chromium >/dev/null || (apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium)
	# Resolve Delta's jars from Maven Central once (cached in ~/.ivy2).
	$(PY) -c "from framework import spark_session; spark_session('install').stop()"
	touch $@

# S3 warehouses (docs/s3.md): resolve hadoop-aws and its AWS SDK bundle (~560 MB, once, into
# ~/.ivy2) and compile the commit LogStore against them (javac, Java 17).
$(LOGSTORE_JAR): framework/storage/java/*.java $(VENV)/.installed
	$(PY) -m framework.storage.s3

lint: install
	$(PY) -m ruff check
	$(PY) -m ruff format --check
	$(PY) -m mypy framework

# No Spark, no JVM: tests/unit/conftest.py refuses the spark fixture.
unit: install
	$(PY) -m pytest -q tests/unit

test: install lint unit
	$(PY) -m pytest --ignore=tests/unit $(PYTEST_ARGS)

demo: install
	$(PY) scripts/demo.py

# Framework vs Structured Streaming vs a plain aggregate; results in bench/results/ (see bench/README.md).
bench: install
	$(PY) bench/vs_streaming.py --workload tumbling --size standard

bench-quick: install
	$(PY) bench/vs_streaming.py --workload tumbling --size quick

clean:
	rm -rf var .pytest_cache .hypothesis .mypy_cache .ruff_cache
