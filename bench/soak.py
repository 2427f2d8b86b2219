"""Chaos soak (issue 39, item 12): batches of every window type (hopping, sliding, session) and of a
rate-limited pipeline run while random faults are injected between and inside them; after every
step each touched pipeline's tables must equal those of a clean warehouse that ran the same
effective input with no faults.

Faults (one per step, drawn by ``--seed``):

* ``kill``: a child process (its own JVM) runs the batch and is SIGKILLed with its process group
  at a random write point, or a random moment into the batch; the batch is run again here.
* ``crash``: an in-process attempt raises at a random write point (``Runtime(before_write=...)``);
  re-run.
* ``stop``: the child's attempt is frozen (SIGSTOP of its process group) at a write point, a retry
  runs the batch here, then the child is resumed (SIGCONT) and finishes or is fenced out. Frozen
  at ``output`` while its other thread was inside the buffer's commit (``stop inside a commit``),
  the child holds that table's commit lock: the retry waits ``LOCK_WAIT_S`` for it and stops
  with ``ConcurrentBatchError``; resumed, the child commits, and a re-run here finds the batch
  committed.
* ``zombie``: the same with the first attempt paused in a thread of this process.
* ``maintenance``: after a kill or a crash, before the re-run: a table property, OPTIMIZE and
  VACUUM (within retention) on every table of the pipeline.
* ``gate``: the batch carries a poisoned value that fails the pipeline's critical expectation
  (``QualityGateError``), then runs with the corrected input.
* ``replays``: two replays of the last committed batches at once (half the time with one value
  corrected); at least one wins, the clean warehouse replays once.
* ``gap``: the batch after next is run first and refused (``SkippedIntervalError`` naming the
  gap); then the missing interval runs first, or the batch runs with ``allow_gap`` (the clean
  warehouse skips the interval too).

The clean warehouse runs each effective batch once, in a thread beside the faulty one (its own
session). Compared after every step, each as a multiset (a row twice counts twice): the results
table, late records, metrics, window state, the rate-limiting buffer, and the committed ledger
rows (batch id, seq, fingerprint, stream time, interval). Lost = rows of the clean run missing,
duplicated = rows beyond it, counted per table. Exits 1 on any mismatch.

With ``--s3`` both warehouses live on the S3 test server, and the soaked one's bucket is reached
through the fault proxy of tests/s3faults.py: each request has ``--s3-chance`` of one of S3's
faults (``s3_faults``: 5xx before and after the write applied, 409, lost answers and resets on
commit PUTs; 5xx and resets on other PUTs, GETs, HEADs and LISTs), counted with the step faults
toward ``--faults`` and summarised by kind.

    .venv/bin/python bench/soak.py --seed 1 --faults 500 --minutes 600
    .venv/bin/python bench/soak.py --s3 --seed 1 --faults 2000 --minutes 600
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
os.environ.setdefault("SPARK_CONF_DIR", str(ROOT / "tests" / "spark-conf"))

import reference as ref  # noqa: E402
from harness import expected, frame, in_parallel, results, rows_of  # noqa: E402
from test_exactly_once import Crash, pipeline, snapshot_frames  # noqa: E402
from test_operations import _in_thread, _maintain, _Paused, _tables  # noqa: E402

from framework import (  # noqa: E402
    BufferConfig,
    CommitLockTimeout,
    ConcurrentBatchError,
    QualityGateError,
    ReplayError,
    Runtime,
    SessionWindows,
    SkippedIntervalError,
    SlidingWindows,
    Suppressed,
    TimeWindows,
)
from framework.operations.attempt import WRITE_POINTS  # noqa: E402
from framework.operations.replay import ReplayBatch  # noqa: E402
from framework.storage import locks, tables  # noqa: E402

WINDOWS = {
    "hopping": lambda: pipeline("soak_hopping", TimeWindows.of_size_and_grace(10, 2).advance_by(5)),
    "sliding": lambda: pipeline("soak_sliding", SlidingWindows.of_time_difference_and_grace(10, 2)),
    "session": lambda: pipeline("soak_session", SessionWindows.of_inactivity_gap_and_grace(5, 2)),
    "rate": lambda: pipeline(
        "soak_rate", TimeWindows.of_size_and_grace(10, 2), Suppressed.until_time_limit(5, BufferConfig.max_records(2))
    ),
}
# The reference model (tests/reference.py) of each pipeline it covers (the rate-limited one it does not).
MODELS = {"hopping": ref.Tumbling(10, 2, 5), "sliding": ref.Sliding(10, 2), "session": ref.Session(5, 2)}
KINDS = {"crash": 4, "zombie": 2, "kill": 1, "stop": 1, "gate": 2, "replays": 2, "gap": 2}
WIDTH = 40  # ms of event time per batch interval
POISON = 10**6  # a value the gate refuses (the suite caps ``total`` at POISON // 10)
EPOCH = dt.datetime(1970, 1, 1)
ACCEPTED = (ConcurrentBatchError,)  # how a fenced-out attempt ends
LOCK_WAIT_S = 120.0  # a commit waits this long for a table's lock here (600 s by default): see ``stop``


def at(ms: int) -> dt.datetime:
    return EPOCH + dt.timedelta(milliseconds=ms)


@dataclass
class Stream:
    """One pipeline's input: interval ``k`` is ``[k * WIDTH, (k + 1) * WIDTH)``, batch id ``b<k>``."""

    kind: str
    records: dict = field(default_factory=dict)  # interval -> [(key, ts, value)], the effective input
    committed: list = field(default_factory=list)  # intervals run, in order
    skipped: set = field(default_factory=set)  # intervals skipped on purpose (allow_gap)
    inside: set = field(default_factory=set)  # replayed after the first batch of their range: no state before them
    next: int = 0

    @property
    def p(self):
        return WINDOWS[self.kind]()

    def new(self, rng: random.Random, k: int, poison: bool = False) -> list:
        """Records of interval ``k``: a few keys, some late. A poisoned batch starts with key Z's bad
        value and ends 20 ms later, so that every window type emits Z's window in this batch."""
        lo, hi = k * WIDTH, (k + 1) * WIDTH - 1
        batch = [
            (rng.choice("ABC"), max(0, rng.randint(lo - 8, hi)), rng.randint(1, 50)) for _ in range(rng.randint(2, 6))
        ]
        if poison:
            batch = [("Z", lo, POISON), *batch, ("A", hi, rng.randint(1, 50))]
        self.records[k] = batch
        return batch


def batch_id(k: int) -> str:
    return f"b{k:05d}"


def run(rt: Runtime, stream: Stream, k: int, records: list | None = None, **options):
    records = stream.records[k] if records is None else records
    return rt.run_batch(
        stream.p,
        batch_id(k),
        frame(rt.spark, records, k * 1000),
        batch_start=at(k * WIDTH),
        batch_end=at((k + 1) * WIDTH),
        **options,
    )


def replay_batches(spark, stream: Stream, ks: list) -> list:
    return [
        ReplayBatch(batch_id(k), frame(spark, stream.records[k], k * 1000), at((k + 1) * WIDTH), at(k * WIDTH))
        for k in ks
    ]


def write_suites(folder: Path) -> str:
    folder.mkdir(parents=True, exist_ok=True)
    for make in WINDOWS.values():
        name = make().name
        suite = {
            "name": name,
            "expectations": [
                {
                    "type": "expect_column_values_to_be_between",
                    "kwargs": {"column": "total", "max_value": POISON // 10},
                    "meta": {"severity": "critical"},
                }
            ],
        }
        (folder / f"{name}.json").write_text(json.dumps(suite))
    return str(folder)


# ---- the child process: kills and freezes ---------------------------------------------------------
def worker(warehouse: str) -> None:
    """Run batches sent as JSON lines on stdin; at the command's write point, kill this process
    (``kill``) or announce it and wait for a line on stdin (``pause``: the parent freezes us)."""
    from framework import spark_session

    command = {}

    def hook(point):
        if point == command.get("point"):
            print("AT", point, flush=True)
            if command["mode"] == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            sys.stdin.readline()

    conf = json.loads(os.environ.get("FINALRESULTS_TEST_CONF", "{}"))  # the S3 server's (s3server.child_env)
    spark = spark_session("soak-worker", master="local[1]", s3=warehouse.startswith("s3a://"), conf=conf)
    rt = Runtime(spark, warehouse, quality=False, before_write=hook)
    print("READY", flush=True)
    for line in sys.stdin:
        command = json.loads(line)
        stream = Stream(command["kind"], {command["k"]: [tuple(r) for r in command["records"]]})
        print("START", flush=True)
        try:
            print("RESULT", run(rt, stream, command["k"]).status, flush=True)
        except Exception as e:  # noqa: BLE001 - reported to the parent, its trace to the worker's log
            traceback.print_exc()
            print("ERROR", type(e).__name__, str(e).splitlines()[0][:200], flush=True)


class Worker:
    """The child process: started ahead of need (its JVM takes a while), again after a kill."""

    def __init__(self, warehouse: str, log: Path, env: dict | None = None):
        self.warehouse, self.log, self.env, self.child = warehouse, log, env, None

    def start(self) -> None:
        if self.child is None:
            self.child = subprocess.Popen(
                [sys.executable, __file__, "--worker", self.warehouse],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=self.log.open("a"),
                text=True,
                start_new_session=True,
                env={**os.environ, **(self.env or {})},
            )
            self.ready = False

    def line(self) -> str:
        text = self.child.stdout.readline()
        if not text:
            raise EOFError
        return text.strip()

    def send(self, stream: Stream, k: int, point: str, mode: str) -> None:
        self.start()
        while not self.ready:
            self.ready = self.line() == "READY"
        command = {"kind": stream.kind, "k": k, "records": stream.records[k], "point": point, "mode": mode}
        self.child.stdin.write(json.dumps(command) + "\n")
        self.child.stdin.flush()
        assert self.line() == "START"

    def signal(self, sig) -> None:
        os.killpg(self.child.pid, sig)

    def kill(self) -> None:
        try:
            self.signal(signal.SIGKILL)  # the JVM too
        except ProcessLookupError:
            pass
        self.child.wait(60)
        rest, self.child = self.child.stdout.read(), None
        return rest

    def stop(self) -> None:
        if self.child is not None:
            self.kill()


# ---- the soak -------------------------------------------------------------------------------------
class Mismatch(AssertionError):
    pass


class Soak:
    def __init__(
        self, spark, warehouse: str, seed: int, kinds: dict, windows: list, clean: str, scratch: Path, env=None, s3=None
    ):
        self.rng = random.Random(seed)
        self.spark, self.warehouse = spark, warehouse
        self.rt = Runtime(spark, warehouse, quality=False)
        self.gated = Runtime(spark, warehouse, expectations=write_suites(scratch / "expectations"))
        self.clean = Runtime(spark.newSession(), clean, quality=False)
        self.cleaner = ThreadPoolExecutor(1)  # the clean warehouse's batches, beside the faulty ones
        self.pending = []
        self.kinds, self.streams = kinds, [Stream(kind) for kind in windows]
        self.worker = Worker(warehouse, scratch / "worker.log", env)
        self.faults, self.rows, self.steps = Counter(), 0, 0
        self.lost, self.duplicated = Counter(), Counter()  # rows, per table
        self.modelled = 0  # results rows checked against the reference model
        self.s3 = s3  # what the S3 fault proxy gave (--s3), or None
        self.mismatches: list[str] = []

    # the clean side
    def mirror(self, work) -> None:
        self.pending.append(self.cleaner.submit(work))

    def commit(self, stream: Stream, k: int, allow_gap: bool = False) -> None:
        stream.committed.append(k)
        stream.next = k + 1
        self.mirror(lambda: run(self.clean, stream, k, stream.records[k], allow_gap=allow_gap))

    def first_run(self, stream: Stream) -> None:
        k = stream.next
        run(self.rt, stream, k, stream.new(self.rng, k))
        self.commit(stream, k)

    # one step
    def step(self, stream: Stream, kind: str) -> None:
        began = time.monotonic()
        getattr(self, kind)(stream)
        self.steps += 1
        checked = time.monotonic()
        self.check(stream)
        print(
            f"step {self.steps}: {kind} on {stream.kind} {batch_id(stream.next - 1)}: "
            f"{checked - began:.0f} s, check {time.monotonic() - checked:.0f} s, faults {dict(self.faults)}",
            file=sys.stderr,
            flush=True,
        )

    def crash(self, stream: Stream) -> None:
        k, point = stream.next, self.rng.choice(WRITE_POINTS)
        stream.new(self.rng, k)

        def fail(at_):
            if at_ == point:
                raise Crash(point)

        try:
            run(Runtime(self.spark, self.warehouse, quality=False, before_write=fail), stream, k)
        except Crash:
            self.faults["crash"] += 1
            self.rerun(stream, k)
            return
        self.commit(stream, k)  # the pipeline never writes at ``point`` (e.g. no buffer): no fault

    def rerun(self, stream: Stream, k: int) -> None:
        """After a kill or a crash: maintenance half the time, then the batch again."""
        if self.rng.random() < 0.5:
            for path in _tables(self.rt, stream.p):
                _maintain(self.spark, path, vacuum=self.rng.random() < 0.5)
            self.faults["maintenance"] += 1
        assert run(self.rt, stream, k).status in ("committed", "already committed")
        self.commit(stream, k)

    def kill(self, stream: Stream) -> None:
        k = stream.next
        stream.new(self.rng, k)
        delay = self.rng.random() < 0.3 and self.rng.uniform(0.5, 6.0)
        point = "never" if delay else self.rng.choice(WRITE_POINTS)
        self.worker.send(stream, k, point, "kill")
        if delay:
            time.sleep(delay)
        else:
            while not (line := self.worker.line()).startswith(("AT", "RESULT", "ERROR")):
                pass
        rest = self.worker.kill()
        self.worker.start()  # ready for the next kill or stop
        if "RESULT" in rest or (not delay and not line.startswith("AT")):  # it ended before the kill
            assert run(self.rt, stream, k).status == "already committed", line if not delay else rest
            self.commit(stream, k)
            return
        self.faults["kill"] += 1
        self.rerun(stream, k)

    def stop(self, stream: Stream) -> None:
        k, point = stream.next, self.rng.choice(WRITE_POINTS[1:])
        stream.new(self.rng, k)
        self.worker.send(stream, k, point, "pause")
        first = self.worker.line()
        if first.startswith("AT"):
            self.worker.signal(signal.SIGSTOP)
            try:
                retry = run(self.rt, stream, k).status
            except ConcurrentBatchError as e:  # the child froze inside a commit: it holds the table's lock
                if not isinstance(e.__cause__, CommitLockTimeout):
                    raise
                retry = "waited for the lock"
            self.worker.signal(signal.SIGCONT)
            self.worker.child.stdin.write("go\n")
            self.worker.child.stdin.flush()
            first = self.worker.line()
            if retry == "waited for the lock":
                self.faults["stop inside a commit"] += 1
                again = run(self.rt, stream, k).status
                if first != "RESULT committed" or again != "already committed":
                    self.mismatches.append(f"frozen inside a commit at {point}: child {first!r}, re-run {again!r}")
            else:
                self.faults["stop"] += 1
                self.expect_fenced(first, retry, point)
            # Frozen past spark.network.timeout, the child's driver dropped its own (local) executor:
            # its heartbeater gives up 60 tries later and exits the JVM, failing whatever batch
            # then runs. As a frozen Spark driver in production, it is spent: the next stop gets a new one.
            self.worker.kill()
            self.worker.start()
        elif first.startswith("ERROR"):  # no pause, no retry: the batch failed with no fault of ours
            trace = self.worker.log.read_text()[-2000:]  # the scratch folder goes when the soak ends
            self.mismatches.append(f"an unpaused batch failed in the child: {first}; its log ends:\n{trace}")
            assert run(self.rt, stream, k).status == "committed", first
        self.commit(stream, k)

    def zombie(self, stream: Stream) -> None:
        k, point = stream.next, self.rng.choice(WRITE_POINTS[1:])
        stream.new(self.rng, k)
        paused = _Paused(point)
        first = _in_thread(
            lambda: run(Runtime(self.spark.newSession(), self.warehouse, quality=False, before_write=paused), stream, k)
        )
        if paused.reached.wait(600):
            self.faults["zombie"] += 1
            retry = run(self.rt, stream, k).status
        paused.go.set()
        outcome = first()
        if paused.reached.is_set():
            error = outcome.get("error")
            self.expect_fenced(
                f"ERROR {type(error).__name__}" if error else f"RESULT {outcome['value'].status}", retry, point
            )
        elif "error" in outcome:
            raise outcome["error"]
        self.commit(stream, k)

    def expect_fenced(self, first: str, retry: str, point: str) -> None:
        """The paused attempt and the retry: one committed the batch, the other was fenced out or
        found it committed (a pause at ``publish`` is after the commit point)."""
        ok = (retry == "committed" and first.startswith("ERROR ConcurrentBatchError")) or (
            point == "publish" and retry == "already committed" and first.split()[-1] in ("committed",)
        )
        if not ok:
            self.mismatches.append(f"paused at {point}: first attempt {first!r}, retry {retry!r}")

    def gate(self, stream: Stream) -> None:
        k = stream.next
        poisoned = stream.new(self.rng, k, poison=True)
        try:
            run(self.gated, stream, k, poisoned)
            self.mismatches.append(f"{stream.kind} {batch_id(k)}: the poisoned batch passed its gate")
        except QualityGateError:
            self.faults["gate"] += 1
        stream.records[k] = [("Z", ts, 1) if key == "Z" else (key, ts, v) for key, ts, v in poisoned]
        assert run(self.gated, stream, k).status == "committed"
        self.commit(stream, k)

    def replays(self, stream: Stream) -> None:
        if not stream.committed:
            return self.first_run(stream)
        ks = stream.committed[-self.rng.randint(1, min(3, len(stream.committed))) :]
        before = stream.records[ks[0]]
        if self.rng.random() < 0.5:  # a correction: one value of the range's first batch
            fixed = list(before)
            i = self.rng.randrange(len(fixed))
            fixed[i] = (fixed[i][0], fixed[i][1], fixed[i][2] + 100)
            stream.records[ks[0]] = fixed
        p = stream.p
        both = [
            _in_thread(lambda: Runtime(s, self.warehouse, quality=False).replay(p, replay_batches(s, stream, ks)))
            for s in (self.spark.newSession(), self.spark.newSession())
        ]
        outcomes = [join() for join in both]
        errors = [o["error"] for o in outcomes if "error" in o]
        if ks[0] in stream.inside:  # its state is gone (replay.py): both refused, nothing changed
            if len(errors) < 2 or not all(isinstance(e, ReplayError) and "is not kept" in str(e) for e in errors):
                self.mismatches.append(f"{stream.kind}: a replay from inside a replayed range ended {outcomes}")
            stream.records[ks[0]] = before
            self.faults["replay refused"] += 1
            return
        if len(errors) == 2 or any(not isinstance(e, ACCEPTED) for e in errors):
            raise errors[0] if not isinstance(errors[0], ACCEPTED) else errors[-1]
        self.faults["replays"] += 1
        stream.inside = (stream.inside - {ks[0]}) | set(ks[1:])
        self.mirror(lambda: self.clean.replay(p, replay_batches(self.clean.spark, stream, ks)))

    def gap(self, stream: Stream) -> None:
        k = stream.next
        if not stream.committed:
            return self.first_run(stream)
        stream.new(self.rng, k)
        stream.new(self.rng, k + 1)
        try:
            run(self.rt, stream, k + 1)
            self.mismatches.append(f"{stream.kind} {batch_id(k + 1)}: a skipped interval was not refused")
        except SkippedIntervalError as refused:
            if refused.missing != (at(k * WIDTH), at((k + 1) * WIDTH)):
                self.mismatches.append(f"{stream.kind}: refused naming {refused.missing}, not interval {k}")
            self.faults["gap"] += 1
        if self.rng.random() < 0.5:  # the gap on purpose
            del stream.records[k]
            stream.skipped.add(k)
            assert run(self.rt, stream, k + 1, allow_gap=True).status == "committed"
            self.commit(stream, k + 1, allow_gap=True)
        else:
            for i in (k, k + 1):
                assert run(self.rt, stream, i).status == "committed"
                self.commit(stream, i)

    # the verdict
    def tables(self, rt: Runtime, p) -> dict[str, Counter]:
        """The tables compared, read in one Spark query: ``snapshot``'s and the committed ledger
        rows, each as a multiset (a row twice counts twice)."""
        frames = snapshot_frames(rt, p)
        frames["ledger"] = (
            rt.read_ledger(p)
            .filter("status = 'committed'")
            .select("seq", "batch_id", "fingerprint", "stream_time", "interval_start", "interval_end")
        )
        return {name: Counter(rows) for name, rows in rows_of(frames).items()}

    def check(self, stream: Stream) -> None:
        """Every table of ``stream``'s pipeline against the clean warehouse's: rows of the clean
        run missing are lost, rows beyond it duplicated, counted per table."""
        for done in self.pending:
            done.result()
        self.pending = []
        p = stream.p
        faulty, clean = in_parallel([lambda: self.tables(self.rt, p), lambda: self.tables(self.clean, p)])
        for name in sorted(faulty.keys() | clean.keys()):
            ours, theirs = faulty.get(name, Counter()), clean.get(name, Counter())
            lost, duplicated = theirs - ours, ours - theirs
            self.rows += sum(theirs.values())
            self.count(stream, name, lost, duplicated)
        if stream.kind in MODELS and stream.committed:
            self.against_model(stream)

    def against_model(self, stream: Stream) -> None:
        """The results table against the reference model run over the effective input of the
        committed intervals, in order (the clean warehouse is the same code; the model is not)."""
        ks = stream.committed
        want = expected(ref.run(MODELS[stream.kind], [stream.records[k] for k in ks]), [batch_id(k) for k in ks])
        published = results(self.rt, stream.p) if tables.exists(self.spark, self.rt.tables(stream.p).output) else []
        ours, theirs = (Counter(json.dumps(r, sort_keys=True) for r in rows) for rows in (published, want))
        self.modelled += sum(theirs.values())
        self.count(stream, "output (model)", theirs - ours, ours - theirs)

    def count(self, stream: Stream, name: str, lost: Counter, duplicated: Counter) -> None:
        """Add a table's lost and duplicated rows to the totals; a mismatch if there are any."""
        self.lost[name] += sum(lost.values())
        self.duplicated[name] += sum(duplicated.values())
        if lost or duplicated:
            self.mismatches.append(
                f"step {self.steps} ({stream.kind}, after {batch_id(stream.next - 1)}): {name}: "
                f"lost {dict(lost)}, duplicated {dict(duplicated)}"[:600]
            )

    def injected(self) -> int:
        """Faults injected so far: the steps' (maintenance not counted) and S3's."""
        s3 = sum(self.s3.kinds().values()) if self.s3 else 0
        return sum(self.faults.values()) - self.faults["maintenance"] + s3

    def run(self, faults: int, deadline: float) -> None:
        kinds, weights = zip(*self.kinds.items())
        while self.injected() < faults and time.monotonic() < deadline:
            stream = self.rng.choice(self.streams)
            if not stream.committed and self.rng.random() < 0.5:
                self.step(stream, "first_run")  # an ordinary batch, so that late records and state build up
            else:
                self.step(stream, self.rng.choices(kinds, weights)[0])
            if self.mismatches:
                break

    def close(self) -> None:
        self.worker.stop()
        self.cleaner.shutdown()

    def summary(self, seed: int, seconds: float) -> dict:
        return {
            "seed": seed,
            "steps": self.steps,
            "faults": self.injected() + self.faults["maintenance"],
            "faults_by_kind": dict(sorted(self.faults.items())),
            "s3_faults_by_kind": dict(sorted(self.s3.kinds().items())) if self.s3 else {},
            "batches": {s.kind: len(s.committed) for s in self.streams},
            "rows_checked": self.rows,
            "rows_checked_against_model": self.modelled,
            "lost": sum(self.lost.values()),
            "duplicated": sum(self.duplicated.values()),
            "lost_by_table": dict(sorted(self.lost.items())),
            "duplicated_by_table": dict(sorted(self.duplicated.items())),
            "mismatches": self.mismatches,
            "seconds": round(seconds, 1),
            "passed": not self.mismatches and not +self.lost and not +self.duplicated,
        }


def soak(
    spark,
    warehouse: str,
    clean: str,
    seed: int,
    faults: int,
    minutes: float,
    windows,
    kinds,
    scratch: Path,
    env=None,
    s3=None,
) -> dict:
    """Run the soak; its summary (``passed``: every step's tables equal the clean run's). ``s3``:
    what the S3 fault proxy in front of ``warehouse`` gave (its ``Seen``), counted as faults."""
    start, lock_wait = time.monotonic(), locks.LOCK_WAIT_S
    s = Soak(spark, warehouse, seed, kinds, windows, clean, scratch, env, s3)
    if any(k in kinds for k in ("kill", "stop")):
        s.worker.start()  # its JVM starts while the first steps run
    try:
        locks.LOCK_WAIT_S = LOCK_WAIT_S
        s.run(faults, start + minutes * 60)
    except Exception as e:  # noqa: BLE001 - an unexpected error is a failed soak, reported
        s.mismatches.append(f"step {s.steps}: {type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}")
    finally:
        s.close()
        locks.LOCK_WAIT_S = lock_wait
    return s.summary(seed, time.monotonic() - start)


def report(summary: dict) -> str:
    kinds = ", ".join(f"{k} {n}" for k, n in summary["faults_by_kind"].items())
    s3 = ", ".join(f"{k} {n}" for k, n in summary["s3_faults_by_kind"].items())
    per_table = ", ".join(
        f"{name} {summary['lost_by_table'][name]}/{summary['duplicated_by_table'][name]}"
        for name in summary["lost_by_table"]
    )
    lines = [
        f"seed {summary['seed']}: {summary['steps']} steps, {summary['faults']} faults injected ({kinds})",
        f"S3 faults by kind: {s3 or 'none'}",
        f"batches committed per pipeline: {summary['batches']}",
        f"rows checked {summary['rows_checked']} (against the reference model: "
        f"{summary['rows_checked_against_model']}), lost {summary['lost']}, duplicated {summary['duplicated']}",
        f"lost/duplicated per table: {per_table}",
        f"wall time {summary['seconds']} s",
        "PASSED" if summary["passed"] else "FAILED:\n  " + "\n  ".join(summary["mismatches"]),
    ]
    return "\n".join(lines)


def s3_faults(chance: float) -> list:
    """S3's faults (tests/s3faults.py) for the soaked warehouse's bucket, each request's chance
    ``chance``: on commit PUTs every kind a LogStore must settle (but ``slow``: s3a's timeouts
    are 15 s at least), on other PUTs, GETs, HEADs and LISTs a 5xx or a reset that s3a retries."""
    from s3faults import COMMIT, Fault

    every = 10**9  # no bound per key: the chance decides
    on_commits = ("5xx", "5xx-applied", "409", "409-applied", "lost", "reset")
    elsewhere = [("PUT", "5xx"), ("PUT", "reset"), ("GET", "reset"), ("GET", "5xx"), ("HEAD", "5xx"), ("LIST", "5xx")]
    return [Fault(kind, on=COMMIT, times=every, chance=chance) for kind in on_commits] + [
        Fault(kind, op=op, on=r"/[^/]", times=every, chance=chance) for op, kind in elsewhere
    ]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--faults", "--steps", type=int, default=20, help="faults to inject (maintenance not counted)")
    parser.add_argument("--minutes", type=float, default=30.0, help="stop after this long (the soak passes if clean)")
    parser.add_argument("--warehouse", help="a local folder or an s3a:// URI (default: a temporary folder)")
    parser.add_argument(
        "--s3", action="store_true", help="soak on the S3 test server (tests/s3server.py), behind S3 faults"
    )
    parser.add_argument(
        "--s3-chance", type=float, default=0.02, help="with --s3: each request's chance of an S3 fault (0: none)"
    )
    parser.add_argument(
        "--s3-retry-ms",
        type=int,
        default=50,
        help="with --s3: s3a's wait before retrying a failed request (the faults come faster than S3's)",
    )
    parser.add_argument("--pipelines", default=",".join(WINDOWS), help=f"of {','.join(WINDOWS)}")
    parser.add_argument("--kinds", default=",".join(KINDS), help=f"fault kinds, of {','.join(KINDS)}")
    parser.add_argument("--json", help="write the summary here too")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args.worker)
        return 0
    from contextlib import ExitStack

    from framework import spark_session

    kinds = {k: KINDS[k] for k in args.kinds.split(",")}
    windows = args.pipelines.split(",")
    with ExitStack() as stack:
        scratch = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="soak-")))
        env, conf, seen = None, {"spark.sql.shuffle.partitions": "2"}, None
        if args.s3:
            from s3faults import proxy
            from s3server import child_env, s3_server

            server = stack.enter_context(s3_server(scratch / "s3.log"))
            endpoint, seen = stack.enter_context(proxy(server.endpoint, s3_faults(args.s3_chance), seed=args.seed))
            faulty = server.behind(endpoint, "faulty")  # the soaked warehouse's bucket; the clean one's is direct
            conf.update({**server.spark_conf(), **faulty.spark_conf()})
            # The faults come far more often than S3's: s3a retries them itself, soon (500 ms and up by
            # default, on top of the SDK's own retries and backoff), and a request left unanswered
            # fails at s3a's floor of 15 s, not its 200 s default.
            waits = ("retry.interval", "retry.throttle.interval")
            retries = {f"spark.hadoop.fs.s3a.{key}": f"{args.s3_retry_ms}ms" for key in waits} | {
                f"spark.hadoop.fs.s3a.{key}": value
                for key, value in (
                    ("attempts.maximum", "0"),
                    ("connection.timeout", "15s"),
                    ("connection.request.timeout", "15s"),
                )
            }
            conf.update(retries)
            env = child_env(faulty)
            env["FINALRESULTS_TEST_CONF"] = json.dumps({**json.loads(env["FINALRESULTS_TEST_CONF"]), **retries})
            warehouse, clean = faulty.url(f"soak-{args.seed}"), server.url(f"soak-{args.seed}-clean")
        else:
            warehouse = args.warehouse or str(scratch / "lake")
            clean = (warehouse.rstrip("/") + "-clean") if args.warehouse else str(scratch / "clean")
        spark = spark_session("soak", master="local[2]", s3=args.s3 or warehouse.startswith("s3a://"), conf=conf)
        summary = soak(
            spark, warehouse, clean, args.seed, args.faults, args.minutes, windows, kinds, scratch, env, seen
        )
    print(report(summary), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=2))
    return 0 if summary["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
