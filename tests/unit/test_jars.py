"""The recording of the jars Ivy resolved (framework.storage.jars), without a JVM."""

from framework.storage import jars

PACKAGES = ["io.delta:delta-spark_2.13:4.0.1", "org.apache.hadoop:hadoop-aws:3.4.1"]


def test_a_recording_keeps_what_ivy_added_once_and_not_the_jars_given(tmp_path, monkeypatch):
    monkeypatch.setattr(jars, "RECORDING", tmp_path / "share" / "jars.json")
    delta, aws, given = (tmp_path / name for name in ("delta.jar", "aws.jar", "logstore.jar"))
    for jar in (delta, aws, given):
        jar.write_bytes(b"")
    # a session started with a jar of its own lists it in spark.jars, and it and Ivy's in
    # spark.repl.local.jars (as file: URIs): both lists are given to record
    started = f"{given},file://{given},file://{delta},file://{aws},file://{delta}"
    jars.record(list(reversed(PACKAGES)), started, given=[str(given)])
    assert jars.recorded(PACKAGES) == [str(delta), str(aws)]  # by coordinates, in any order
    assert jars.recorded(PACKAGES[:1]) is None
    aws.unlink()
    assert jars.recorded(PACKAGES) is None  # a file gone: Ivy resolves again
