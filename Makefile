# Two entry points for a newcomer: `make demo` and `make test` (both install first).
# `make test` = `make lint` (ruff, mypy: seconds), `make unit` (tests/unit, pure Python: seconds),
# then the Spark suite (everything else in tests/).
VENV   ?= .venv
PY     := $(VENV)/bin/python
# Two workers, a test file each at a time: the Airflow, cluster and kill tests mostly wait on
# their subprocesses, so the other worker's Spark tests fill the second core. Files start in
# tests/conftest.py's order (slowest first), not xdist's (most tests first).
PYTEST_ARGS ?= -q --durations=25 -n 2 --dist loadfile --no-loadscope-reorder
# The install's steps that wait on the network (apt, Maven Central) run beside the ones that need
# the CPU (lint, the unit tests); each step's output comes whole when it ends.
PARALLEL := --no-print-directory -j4 --output-sync=target

.PHONY: install chromium lint unit test demo bench bench-quick clean

PACKAGES     := $(VENV)/.packages
JARS         := $(VENV)/.jars
LOGSTORE_JAR := framework/storage/java/finalresults-s3-logstore.jar

install: $(JARS) $(LOGSTORE_JAR) chromium

# What the install steps print (uv, Ivy's resolution) goes to INSTALL_LOG, apt's to APT_LOG (it may
# run beside them); the console gets a line per step, and the log's end if a step fails.
# $(call logged,command[,log]): the log defaults to INSTALL_LOG.
INSTALL_LOG := $(VENV)/install.log
APT_LOG     := $(VENV)/apt.log
log_of = $(or $(2),$(INSTALL_LOG))
logged = $(1) >>$(log_of) 2>&1 || { tail -n 40 $(log_of); echo "install failed; the whole log: $(log_of)"; exit 1; }

# uv installs the packages (41 s from an empty cache here, pip 137 s); the venv keeps its own pip
# for the packaging test.
$(PACKAGES): pyproject.toml
	@echo "install: Python packages into $(VENV) (log: $(INSTALL_LOG))"
	@python3 -m venv $(VENV)
	@$(call logged,$(PY) -m pip install -q uv)
	@$(call logged,$(VENV)/bin/uv pip install -q --native-tls --python $(PY) $(if $(PIP_FIND_LINKS),--find-links $(PIP_FIND_LINKS)) -e ".[dev]")
	@touch $@

$(JARS): $(PACKAGES)
	@echo "install: Delta's jars from Maven Central (once; cached in ~/.ivy2)"
	@$(call logged,$(PY) -c "from framework import spark_session; spark_session('install').stop()")
	@touch $@

# S3 warehouses (docs/s3.md): resolve hadoop-aws and its AWS SDK bundle (~560 MB, once, into
# ~/.ivy2) and compile the commit LogStore against them (javac, Java 17).
$(LOGSTORE_JAR): framework/storage/java/*.java $(JARS)
	@echo "install: S3 support (hadoop-aws, the AWS SDK, the LogStore jar)"
	@$(call logged,$(PY) -m framework.storage.s3)

# Headless chromium for the UI tests (Airflow plugin, Data Docs), from Debian, when it is missing.
chromium:
	@if ! command -v chromium >/dev/null; then \
	  echo "install: chromium (Debian package; log: $(APT_LOG))"; mkdir -p $(VENV); \
	  $(call logged,{ apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium; },$(APT_LOG)); \
	fi

lint: $(PACKAGES)
	$(PY) -m ruff check
	$(PY) -m ruff format --check
	$(PY) -m mypy framework

# No Spark, no JVM: tests/unit/conftest.py refuses the spark fixture.
unit: $(PACKAGES)
	$(PY) -m pytest -q tests/unit

test:
	@$(MAKE) $(PARALLEL) install lint unit
	$(PY) -m pytest --ignore=tests/unit $(PYTEST_ARGS)

demo:
	@$(MAKE) $(PARALLEL) install
	$(PY) scripts/demo.py $(if $(CONNECT),--connect)

# Framework vs Structured Streaming vs a plain aggregate; results in bench/results/ (see bench/README.md).
bench: install
	$(PY) bench/vs_streaming.py --workload tumbling --size standard

bench-quick: install
	$(PY) bench/vs_streaming.py --workload tumbling --size quick

clean:
	rm -rf var .pytest_cache .hypothesis .mypy_cache .ruff_cache
