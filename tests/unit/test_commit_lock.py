"""The commit lock of ``framework.storage.locks`` across processes and threads (no Spark)."""

import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]


def test_a_commit_lock_excludes_other_processes_and_is_reentrant_in_its_thread(tmp_path):
    """On a local disk Delta's put-if-absent of the next log file is not atomic across processes,
    so every commit holds ``<table>.lock`` (locks.committing); on other stores there is no lock."""
    import fcntl
    import threading
    from contextlib import nullcontext

    from framework.storage import locks

    table = str(tmp_path / "lake" / "t")
    held = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"""
import sys, time
sys.path.insert(0, {str(TESTS.parent)!r})
from framework.storage import locks
with locks.committing({table!r}), locks.committing({table!r}):   # re-entrant
    print("held", flush=True)
    sys.stdin.readline()
""",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert held.stdout.readline() == "held\n"
        with open(table + ".lock") as f:
            with pytest.raises(BlockingIOError):
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        held.stdin.write("\n")
        held.stdin.flush()
        assert held.wait(timeout=30) == 0

        def commit_in_another_thread():
            with locks.committing(table):
                pass

        with locks.committing("file://" + table):  # released with the process's descriptor
            other = threading.Thread(target=commit_in_another_thread)
            other.start()
            other.join(timeout=0.5)
            assert other.is_alive()  # another thread waits too
        other.join(timeout=5)
        assert not other.is_alive()
    finally:
        held.kill()
    assert isinstance(locks.committing("s3a://bucket/t"), nullcontext)


def test_local_paths_are_absolute_and_other_stores_have_none(tmp_path, monkeypatch):
    from framework.storage import locks

    monkeypatch.chdir(tmp_path)
    assert locks.local_path("wh/p") == str(tmp_path / "wh" / "p")
    assert locks.local_path(f"file://{tmp_path}/wh") == f"{tmp_path}/wh"
    assert locks.local_path("s3a://bucket/wh") is None and locks.local_path("hdfs://nn:8020/wh") is None
