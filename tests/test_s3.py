"""Exactly once on S3 (docs/s3.md): the scenarios of test_exactly_once, test_concurrency,
test_operations and test_replay, run again with the warehouse in a bucket of an S3 server on
127.0.0.1 (moto, tests/s3server.py). There Delta's commits rest on the S3 LogStore's conditional
PUT, not on the file lock of a local disk, and the framework's own files (staging folders,
publication specs, gate outcomes) live in the object store. Each scenario is checked through
the public API (results, late records, metrics, ledger), against the same batches run cleanly
on the same store."""

import pytest
from harness import in_parallel, results
from test_exactly_once import BATCHES, IDS, Crash, pipeline, run

from framework import Runtime
from framework.operations.attempt import WRITE_POINTS


def seen(rt, p):
    """What a reader of the pipeline sees, minus wall-clock values."""
    return {
        "output": results(rt, p),
        "late": sorted(map(str, rt.read_late(p).collect())),
        "metrics": sorted(map(str, rt.read_metrics(p).drop("batch_duration_ms").collect())),
        "committed": [
            (r.seq, r.batch_id) for r in rt.ledger(p).filter("status = 'committed'").orderBy("seq").collect()
        ],
    }


def test_a_stream_of_batches_on_s3_gives_the_rows_of_a_local_disk(spark, s3, warehouse):
    p = pipeline("on_s3")
    on_s3, local = Runtime(spark, s3.url("batches"), quality=False), Runtime(spark, warehouse, quality=False)
    for rt in (on_s3, local):
        for i in range(len(BATCHES)):
            assert run(rt, p, i).status == "committed"
    assert run(on_s3, p, 1).status == "already committed"
    assert seen(on_s3, p) == seen(local, p)
    assert not [k for k in s3.keys("batches") if k.endswith(".lock")]  # no lock files on S3
