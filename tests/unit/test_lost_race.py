"""Which errors ``framework.storage.writes.lost_race`` takes for a write that lost to another
writer (the write may be tried again): decided by class, never by message. No Spark here: the
Java exceptions are stand-ins answering the Py4J calls it makes; tests/test_exactly_once.py
makes a real Delta conflict."""

from __future__ import annotations

import pytest

OBJECT = ("java.lang.Object", None)
RUNTIME = ("java.lang.RuntimeException", ("java.lang.Exception", ("java.lang.Throwable", OBJECT)))
MODIFIED = ("java.util.ConcurrentModificationException", RUNTIME)  # Java's, thrown by collections too
DELTA = ("org.apache.spark.sql.delta.DeltaConcurrentModificationException", MODIFIED)
PUBLIC = ("io.delta.exceptions.DeltaConcurrentModificationException", DELTA)
CONFLICTS = [  # Delta 4's conflicts; each io.delta.exceptions class extends its org.apache.spark.sql.delta twin
    "ConcurrentAppendException",
    "ConcurrentDeleteReadException",
    "ConcurrentDeleteDeleteException",
    "ConcurrentWriteException",
    "ConcurrentTransactionException",
    "MetadataChangedException",
    "ProtocolChangedException",
]


class JavaClass:
    def __init__(self, chain):
        self.name, self.superclass = chain

    def getName(self):
        return self.name

    def getSuperclass(self):
        return self.superclass and JavaClass(self.superclass)


class JavaThrowable:
    _target_id = "o1"

    def __init__(self, chain, cause=None):
        self.chain, self.cause = chain, cause

    def getClass(self):
        return JavaClass(self.chain)

    def getCause(self):
        return self.cause


def conflict(name: str) -> tuple:
    return f"io.delta.exceptions.{name}", (f"org.apache.spark.sql.delta.{name}", PUBLIC)


def py4j_error(throwable: JavaThrowable):
    from py4j.protocol import Py4JJavaError

    return Py4JJavaError("An error occurred while calling o1.save.\n", throwable)


@pytest.mark.parametrize("name", CONFLICTS)
def test_a_delta_conflict_is_a_lost_race_as_a_java_exception_or_a_cause_of_one(name):
    from framework.storage.writes import lost_race

    assert lost_race(py4j_error(JavaThrowable(conflict(name))))
    wrapped = JavaThrowable(("org.apache.spark.SparkException", RUNTIME), JavaThrowable(conflict(name)))
    assert lost_race(py4j_error(wrapped))


@pytest.mark.parametrize("name", ["DeltaConcurrentModificationException", *CONFLICTS])
def test_a_delta_conflict_is_a_lost_race_as_delta_sparks_python_class(name):
    import delta.exceptions

    from framework.storage.writes import lost_race

    assert lost_race(getattr(delta.exceptions, name)("lost"))


def test_other_errors_are_not_whatever_their_message_says():
    from framework.errors import ConcurrentBatchError
    from framework.storage.writes import lost_race

    io_error = JavaThrowable(("java.io.IOException", ("java.lang.Exception", OBJECT)))
    assert not lost_race(py4j_error(io_error))
    assert not lost_race(py4j_error(JavaThrowable(MODIFIED)))  # Java's own, not a Delta commit's
    assert not lost_race(RuntimeError("io.delta.exceptions.ConcurrentAppendException: MetadataChanged"))
    assert not lost_race(ConcurrentBatchError("another attempt committed first"))  # the batch's, not a write's
