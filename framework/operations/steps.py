"""What a batch attempt is doing, for its error messages, and running several steps at once.

A failure is reported with the step it happened in: whether a Spark error leaves the batch
uncommitted or committed but unpublished depends on that step (``BatchAttempt.run``).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable, Mapping

from pyspark import inheritable_thread_target
from pyspark.sql import SparkSession


@dataclass
class Steps:
    """The step/error context of one attempt (or of a replay's own reads and publication)."""

    spark: SparkSession
    where: str  # "pipeline 'p', batch 'b'": how error messages start
    step: str = "reading the ledger"  # what is running now

    def concurrently(self, tasks: Mapping[str, Callable[[], object]]) -> list:
        """Run ``tasks`` (named by their step) at the same time and return their results in order;
        after all have ended, raise the first failure, naming its step.

        A batch's writes go to different tables, each is tagged and skipped when a resumed batch
        finds it made, and the ledger commit after them is the commit point, so their order does
        not matter. Small Spark jobs and Delta commits mostly wait on the driver (log listing,
        task launch), so they overlap well even on two cores."""
        with ThreadPoolExecutor(len(tasks), thread_name_prefix="batch") as pool:
            futures = {step: pool.submit(inheritable_thread_target(self.spark)(task)) for step, task in tasks.items()}
        for step, future in futures.items():
            error = future.exception()
            if error is not None:
                self.step = step
                raise error
        return [future.result() for future in futures.values()]
