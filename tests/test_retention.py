"""Retention: window state holds open windows only. A closed window's partial rows leave the
state table in the batch that emits it, so state does not grow with the number of batches."""

import json
import os
import re
import time
from pathlib import Path

from delta.tables import DeltaTable
from harness import frame, in_parallel, run_stream
from pyspark.sql import functions as F

from framework import BufferConfig, Pipeline, Runtime, SlidingWindows, Suppressed, TimeWindows, agg
from framework.definition.columns import BUCKET, LATE_BUCKET, LEDGER_BUCKET
from framework.storage import commitlog, compaction, tables, writes

BATCHES = 5


def _pipeline(name, windows):
    return (
        Pipeline(name, timestamp="ts", arrival="seq")
        .group_by("k")
        .windowed_by(windows)
        .aggregate(agg.count("n"))
        .suppress(Suppressed.until_window_closes(BufferConfig.unbounded()))
        .to("out")
    )


def _sizes(rt, p, windows):
    """After each of BATCHES batches (two keys, a new window each): the open windows the batch
    reported, and the rows and live files of window state."""
    sizes = []
    for i in range(BATCHES):
        result = run_stream(rt, p, [[("A", 10 * i + 1, 1), ("B", 10 * i + 2, 1)]], ids=[f"b{i:04d}"])[0]
        t = rt.tables(p)
        path = t.state
        sizes.append(
            {
                "open": result.metrics["windows_open"],
                "rows": _windows(rt.spark, path).count(),
                "files": len(_windows(rt.spark, path).inputFiles()),
            }
        )
    return sizes


def _windows(spark, path):
    return spark.read.format("delta").load(path).filter(F.col(BUCKET) >= 0)


def _files(spark, path, bucket):
    """The live files of partition ``bucket`` of the ``_state`` table at ``path``."""
    return len(spark.read.format("delta").load(path).filter(F.col(BUCKET) == bucket).inputFiles())


def test_window_state_holds_only_open_windows_however_many_batches_ran(spark, warehouse):
    cases = {
        "tumbling": TimeWindows.of_size_and_grace(10, 2),
        "sliding": SlidingWindows.of_time_difference_and_grace(10, 2),
    }
    got = dict(
        in_parallel(
            [
                lambda kind=kind, w=w: (
                    kind,
                    _sizes(Runtime(spark.newSession(), warehouse, quality=False), _pipeline(kind, w), w),
                )
                for kind, w in cases.items()
            ]
        )
    )
    for row in got["tumbling"]:
        assert row["rows"] == row["open"] == 2  # one partial row per open window
        assert row["files"] <= 4
    # sliding windows are held (closed ones too) while a later record may read them: per key two
    # windows a record (its left window and its previous record's right window) for the records
    # of the last 3 * size + grace; those of the last record are open
    steady = got["sliding"][4]
    assert 2 * 2 * 3 <= steady["rows"] <= 2 * 2 * 4 and steady["open"] == 2 * 2
    assert all(row == steady for row in got["sliding"][4:]), got["sliding"]  # nothing accumulates


def _compaction_run(spark, warehouse, every, monkeypatch):
    """Seven batches (each with a late record from batch 2 on) with compaction every ``every``
    batches; the runtime, the pipeline and the live files of the ledger's and the late records'
    partitions of ``_state``."""
    monkeypatch.setattr(compaction, "EVERY", every)
    rt, p = Runtime(spark, warehouse, quality=False), _pipeline("compacted", TimeWindows.of_size_and_grace(10, 2))
    batches = [[("A", 10 * i + 1, 1), ("B", 10 * i + 2, 1), *([("A", 0, 1)] if i >= 2 else [])] for i in range(7)]
    run_stream(rt, p, batches)
    path = rt.tables(p).state
    return rt, p, batches, [_files(spark, path, bucket) for bucket in (LEDGER_BUCKET, LATE_BUCKET)]


def _rows(rt, p):
    """What a reader sees: results, metrics and late records (not timings), and the ledger's batches."""
    return (
        sorted(map(tuple, rt.read_output(p).collect())),
        sorted(map(tuple, rt.read_late(p).collect())),
        sorted(map(tuple, rt.read_metrics(p).drop("batch_duration_ms").collect())),
        sorted((r.seq, r.batch_id, r.status, r.stream_time) for r in rt.read_ledger(p).collect()),
    )


def test_bookkeeping_partitions_compact_themselves_and_keep_every_row(spark, tmp_path, monkeypatch):
    """Every ``compaction.EVERY`` batches the ledger's and the late records' partitions of
    ``_state`` are compacted after publication: their live files stay bounded, a reader sees the
    same rows as without compaction, and a re-run, the next batch and a replay behave as before."""
    rt, p, batches, files = _compaction_run(spark, str(tmp_path / "compacted"), 3, monkeypatch)
    plain, _, _, plain_files = _compaction_run(spark, str(tmp_path / "plain"), 10**9, monkeypatch)
    appends = (7, 5)  # the ledger: a row per batch; late records: batches 3 to 7
    k = [n // a for n, a in zip(plain_files, appends)]  # files per append
    assert plain_files == [a * n for a, n in zip(appends, k)] and min(k) >= 1
    # compacted after seq 3 and 6: one file each, then batch 7's append
    assert files == [1 + k[0], 1 + k[1]]
    ops = [r.operation for r in DeltaTable.forPath(spark, rt.tables(p).state).history().collect()]
    assert ops.count("OPTIMIZE") == 2
    assert _rows(rt, p) == _rows(plain, p)

    starts = [sum(map(len, batches[:i])) for i in range(len(batches))]  # arrival positions, as run_stream gives
    assert rt.run_batch(p, "b0002", frame(spark, batches[2], starts[2])).status == "already committed"
    replayed = rt.replay(p, [(f"b000{i}", frame(spark, batches[i], starts[i])) for i in (5, 6)])
    assert replayed.emitted == replayed.removed
    next_batch = [("A", 71, 1), ("A", 0, 1)]
    for runtime in (rt, plain):
        run_stream(runtime, p, [next_batch], ids=["b0007"])
    assert _rows(rt, p)[:3] == _rows(plain, p)[:3]


def _checkpointed_batches(path):
    """The sequence numbers of the batches whose commits to the table at ``path`` Delta
    checkpointed (a checkpoint's version, mapped to its commit's tag)."""
    seqs = []
    for checkpoint in Path(path, "_delta_log").glob("*.checkpoint.parquet"):
        commit = Path(path, "_delta_log", checkpoint.name.split(".")[0] + ".json").read_text().splitlines()
        info = next(json.loads(line)["commitInfo"] for line in commit if '"commitInfo"' in line)
        tag = re.search(r"@(\d+)", info.get("userMetadata") or "")  # maintenance commits carry none
        seqs.append(int(tag.group(1)) if tag else None)
    return seqs


def test_a_batch_checkpoints_one_table_not_all_of_them(spark, warehouse, monkeypatch):
    """Each table is created with its own checkpoint interval (here 3 for ``_state`` and 5 for the
    sink, scaled down from 13 and 17), so over 9 batches no batch checkpoints both (with one
    interval for both, batch 10 of 20 checkpointed both), and a table created by its first append
    has its interval too."""
    monkeypatch.setitem(tables.CHECKPOINT_INTERVALS, "_state", 3)
    monkeypatch.setattr(tables, "OTHER_CHECKPOINT_INTERVAL", 5)
    rt, p = Runtime(spark, warehouse, quality=False), _pipeline("spread", TimeWindows.of_size_and_grace(10, 2))
    run_stream(rt, p, [[("A", 10 * i + 1, 1), ("B", 10 * i + 2, 1), ("A", 0, 1)] for i in range(2, 11)])
    t = rt.tables(p)
    checkpointed = {path: _checkpointed_batches(path) for path in (t.state, t.output)}
    seqs = [seq for found in checkpointed.values() for seq in found]
    assert len(seqs) == len(set(seqs)) >= 2, checkpointed
    for path in checkpointed:
        properties = DeltaTable.forPath(spark, path).detail().first().properties
        assert properties["delta.checkpointInterval"] == tables.properties(path)["delta.checkpointInterval"], path


def test_batches_in_fresh_processes_read_checkpointed_tables(spark, warehouse, monkeypatch):
    """As Airflow runs batches, each in a fresh process: a batch's first reads of its tables,
    in worker threads, find their latest versions checkpointed. Delta reads such a snapshot
    through a provider that needs the thread's active SparkSession (the ledger read failed with
    DELTA_SPARK_SESSION_NOT_SET); every batch commits."""
    for role in tables.CHECKPOINT_INTERVALS:
        monkeypatch.setitem(tables.CHECKPOINT_INTERVALS, role, 2)
    monkeypatch.setattr(tables, "OTHER_CHECKPOINT_INTERVAL", 2)
    p = _pipeline("fresh", TimeWindows.of_size_and_grace(10, 2))
    for i in range(5):
        spark._jvm.org.apache.spark.sql.delta.DeltaLog.clearCache()  # what a fresh process knows
        rt = Runtime(spark, warehouse, quality=False)
        batch = [("A", 10 * i + 1, 1), ("A", 0, 1)]  # 0 is late from the second batch on
        assert rt.run_batch(p, f"b{i:04d}", frame(spark, batch, 2 * i)).status == "committed"
    t = rt.tables(p)
    for path in (t.state, t.output):
        assert list(Path(path, "_delta_log").glob("*.checkpoint.parquet")), path


def test_the_state_log_keeps_what_replay_reads(spark, warehouse, monkeypatch):
    """``_state`` (window state and the ledger) keeps Delta's default log retention: a replay
    reads the version a batch planned from. Commit files aged three days survive the next
    checkpoints, and a re-run and a replay still work."""
    for role in tables.CHECKPOINT_INTERVALS:
        monkeypatch.setitem(tables.CHECKPOINT_INTERVALS, role, 2)
    rt, p = Runtime(spark, warehouse, quality=False), _pipeline("short_log", TimeWindows.of_size_and_grace(10, 2))
    batches = [[("A", 10 * i + 1, 1), ("A", 0, 1)] for i in range(6)]  # 0 is late from the second batch on
    ids = [f"b{i:04d}" for i in range(6)]
    run_stream(rt, p, batches[:3], ids=ids[:3])
    t = rt.tables(p)
    three_days_ago = time.time() - 3 * 86_400
    aged = sorted(Path(t.state, "_delta_log").glob("*.json"))
    for commit in aged:
        os.utime(commit, (three_days_ago, three_days_ago))
    run_stream(rt, p, batches[3:], ids=ids[3:])
    assert list(Path(t.state, "_delta_log").glob("*.checkpoint.parquet"))
    assert all(commit.exists() for commit in aged)
    assert rt.run_batch(p, ids[0], frame(spark, batches[0], 0)).status == "already committed"
    replayed = rt.replay(p, [(ids[5], frame(spark, batches[5], 4))])  # reads state as recorded before it
    assert replayed.emitted == replayed.removed


def test_commits_since_a_version_read_from_their_files_are_delta_history(spark, tmp_path, monkeypatch):
    """A batch asks which commits landed since a version it knows after each state and ledger
    write; Delta's history lists the whole log to answer (three times), so ``commitlog`` reads
    the few commit files after that version instead. Its answer is Delta's history, for every
    version; with more commits than it reads, or once Delta's cleanup deleted that version's
    file, it says so, and ``history_since`` falls back to Delta's history."""
    path = str(tmp_path / "t")

    def append(i, tag=None):
        rows = spark.range(2).withColumn("i", F.lit(i)).write.format("delta").mode("append")
        rows.options(  # Delta 4.4 requires log retention >= deleted-file retention (default 7 days)
            **{
                "delta.checkpointInterval": "2",
                "delta.logRetentionDuration": "interval 1 days",
                "delta.deletedFileRetentionDuration": "interval 1 days",
            }
        )
        (rows.option("userMetadata", tag) if tag else rows).save(path)

    def delta_history(after):
        rows = DeltaTable.forPath(spark, path).history().collect()
        return sorted((r.version, r.operation, r.userMetadata) for r in rows if r.version > after)

    append(0, f"{writes.TAG}t@0")
    append(1)
    spark.sql(f"OPTIMIZE delta.`{path}`")
    append(3, f"{writes.TAG}t@3")
    spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('framework.test' = 'x')")
    append(5)
    for after in range(-1, 6):
        assert [tuple(c) for c in commitlog.commits_after(spark, path, after)] == delta_history(after), after
    assert [c.operation for c in commitlog.commits_after(spark, path, 1)] == [
        "OPTIMIZE",
        "WRITE",
        "SET TBLPROPERTIES",
        "WRITE",
    ]
    assert writes.same_rows(spark, path, 3) == 3 and writes.same_rows(spark, path, 5) == 5
    monkeypatch.setattr(commitlog, "MOST", 2)  # more commits than that: Delta's history answers
    assert commitlog.commits_after(spark, path, 1) is None
    assert [tuple(c) for c in writes.history_since(spark, path, 1)] == delta_history(1)
    monkeypatch.undo()

    three_days_ago = time.time() - 3 * 86_400
    for commit in Path(path, "_delta_log").glob("*.json"):
        os.utime(commit, (three_days_ago, three_days_ago))
    append(6)
    append(7)  # checkpoint at 7 or 8: Delta deletes the aged commit files before it
    append(8)
    assert not Path(path, "_delta_log", f"{1:020d}.json").exists()
    assert commitlog.commits_after(spark, path, 1) is None
    assert [tuple(c) for c in writes.history_since(spark, path, 1)] == delta_history(1)
    assert [tuple(c) for c in commitlog.commits_after(spark, path, 6)] == delta_history(6) != []
    assert commitlog.commits_after(spark, str(tmp_path / "none"), 0) is None
    assert writes.history_since(spark, str(tmp_path / "none"), 0) == []
