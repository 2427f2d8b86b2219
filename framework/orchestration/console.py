"""A Spark session that starts without burying the answer: what the command line and the demo use.

A JVM started by PySpark prints to the process's standard error before any Python runs again:
JVM warnings, Ivy's resolution of Delta's jars (``spark.jars.packages``), log4j's banner. None
of it is an answer, so ``quiet_session`` points the JVM's standard error at a log file: the JVM
inherits file descriptor 2 when it starts, so redirecting it for the start is enough, and
Python's own standard error is restored at once. Spark's loggers are set to errors only by the
package's ``log4j2.properties`` (``JAVA_OPTIONS``). If Spark fails to start, the error names the
log file.
"""

from __future__ import annotations

import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, TypeVar

from ..errors import FrameworkError

LOG4J2 = Path(__file__).with_name("log4j2.properties")
#: Spark settings that load ``LOG4J2`` in the driver's JVM.
JAVA_OPTIONS = {"spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile={LOG4J2.as_uri()}"}
T = TypeVar("T")


def default_log() -> Path:
    """The command line's Spark log: one per user, overwritten by each command that starts Spark."""
    return Path(tempfile.gettempdir()) / f"finalresults-spark-{os.getuid() if hasattr(os, 'getuid') else 'user'}.log"


@contextmanager
def _stderr_to(log: Path) -> Iterator[None]:
    saved = os.dup(2)
    try:
        with open(log, "w") as file:
            os.dup2(file.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def quiet_session(start: Callable[[], T], log: Path) -> T:
    """``start()`` (which starts Spark) with the JVM's standard error sent to ``log``."""
    try:
        with _stderr_to(log):
            return start()
    except Exception as e:  # Py4J, a JVM that did not start, Ivy that could not resolve: all say why in the log
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise FrameworkError(f"Spark did not start: {first}; its output is in {log} (or run with --verbose)") from e
