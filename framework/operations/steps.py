"""What a batch attempt is doing, for its error messages, and running several steps at once.

A failure is reported with the step it happened in (text, for the message) and the protocol's
``Phase`` it is in (what the failure leaves behind, which decides the error's class and advice:
``BatchAttempt._guarded``).
"""

from __future__ import annotations

import enum
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable, Mapping

from pyspark import inheritable_thread_target
from pyspark.sql import SparkSession


class Phase(enum.Enum):
    """Where an attempt is in the protocol, entered as it runs: what a failure there leaves."""

    PREVIOUS = "previous"  # publishing the last committed batch, before this one ran: its rows stay staged
    RERUN = "rerun"  # checking a committed batch id's input against its ledger row: nothing is written
    BATCH = "batch"  # this batch, before its commit point: nothing of it is committed
    COMMITTED = "committed"  # after its commit point: committed, its rows staged until published


@dataclass
class Steps:
    """The step/error context of one attempt (or of a replay's own reads and publication)."""

    spark: SparkSession
    where: str  # "pipeline 'p', batch 'b'": how error messages start
    step: str = "reading the ledger"  # what is running now
    phase: Phase = Phase.BATCH

    def enter(self, phase: Phase, step: str) -> None:
        """Start ``step`` in ``phase``."""
        self.phase, self.step = phase, step

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
