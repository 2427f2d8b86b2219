"""Typed errors. Every message names the pipeline (and batch when there is one),
what happened, and what to do about it."""

from __future__ import annotations

import datetime as dt
from typing import Sequence


class FrameworkError(Exception):
    """Base class of every error this framework raises on purpose."""


class DefinitionError(FrameworkError, ValueError):
    """A pipeline definition is invalid; raised when the pipeline is built, never mid-batch."""


class InputError(FrameworkError, ValueError):
    """A batch's input cannot be processed (missing/retyped column, null key or event time)."""


class BatchFailedError(FrameworkError):
    """A batch stopped on an error from Spark or Delta (unreadable or corrupt state, lost files).
    Nothing it did is visible: the ledger did not commit it. Fix the cause and re-run it."""


class BatchOrderError(FrameworkError):
    """A batch was run out of order, or while an earlier attempt of another batch is unfinished."""


class SkippedIntervalError(BatchOrderError):
    """A job's batch does not start where the last committed batch's interval ended: the
    records of the interval between (``missing``, start and end) would never be read."""

    JOB = "<job>"  # the job file in the command the message names, until a caller knows it

    def __init__(self, message: str, missing: tuple[dt.datetime, dt.datetime]):
        super().__init__(message)
        self.missing = missing

    def for_job(self, job: str) -> SkippedIntervalError:
        """The same refusal, its command naming the job file the caller ran."""
        return SkippedIntervalError(str(self).replace(self.JOB, job), self.missing)


class FingerprintMismatchError(FrameworkError):
    """A batch id was re-run with input that differs from what was committed under it."""


class ConcurrentBatchError(FrameworkError):
    """Another runner committed to the same pipeline at the same time, or held a table's commit
    lock too long (``CommitLockTimeout``); this attempt committed nothing."""


class VersionSwitchedError(ConcurrentBatchError):
    """A batch of a version the pipeline was switched away from: a run that chose the version
    before the switch landed. It committed nothing; run again, it runs the pipeline's version."""


class VersionError(FrameworkError):
    """A versions command was refused: a switch to a version that is behind, two switches at
    once, results columns that would break the table's readers, a version a job does not define."""


class CommitLockTimeout(FrameworkError, TimeoutError):
    """On a local warehouse, a commit waited ``locks.LOCK_WAIT_S`` for a table's commit lock and
    was not made. Another writer held the lock all that time: a commit still running, or one whose
    process or thread is frozen inside it (a stopped process, a paused VM), which holds the lock
    until it is resumed or killed; the lock cannot be taken from it, since, resumed, it would
    finish its commit. A batch attempt reports it as ``ConcurrentBatchError`` (before its commit
    point) or ``PublicationError`` (after)."""


class PublicationError(FrameworkError):
    """A batch committed (its commit point landed) but publishing its rows did not finish: they
    stay staged, and the next run of any batch of the pipeline publishes them, once."""


class BufferFullError(FrameworkError):
    """A strict suppression buffer with shut_down_when_full() exceeded its bound."""


class QualityGateError(FrameworkError):
    """A critical expectation failed. Raised by a batch's audit, the batch was neither published
    nor committed, and ``report`` is the validation report (``framework.operations.quality.Report``);
    raised by the Airflow quality gate, the committed results table failed its validation."""

    report: object = None

    @classmethod
    def listing(cls, where: str, failures: Sequence[str], what_now: str, docs: str | None) -> QualityGateError:
        """The error of a gate that found ``failures`` (failed critical expectations, described)
        in ``where`` (what was validated), with advice and the Data Docs page."""
        listed = "\n".join(f"  - {f}" for f in failures)
        return cls(
            f"{where}: {len(failures)} critical expectation(s) failed:\n{listed}\n{what_now}"
            + (f" Data Docs: {docs}" if docs else "")
        )


class ReplayError(FrameworkError):
    """A replay cannot run: a range that is not committed or stops before the last committed batch,
    an unfinished batch, or state as of the batch before the range that is no longer available
    (VACUUMed). Raised before anything is written, or after a failed replay was undone."""


def first_line(e: BaseException) -> str:
    """The first line of ``e``'s message (at most 500 characters; the type's name if it has
    none), to quote a Spark or Delta error in one of these errors. A Py4JJavaError's own first
    line ("An error occurred while calling ...") names no cause: its Java exception's is quoted."""
    text = str(getattr(e, "java_exception", None) or e)
    return (text.strip().splitlines() or [type(e).__name__])[0][:500]
