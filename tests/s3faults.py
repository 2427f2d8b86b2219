"""A fault-injecting HTTP proxy on 127.0.0.1 in front of the S3 test server (tests/s3server.py).

S3 clients meet faults that moto never makes, and the proxy makes them: each ``Fault`` names an
operation (``PUT``, ``GET``, ``HEAD``, ``LIST``, ``DELETE``), the keys it hits (a pattern) and
how many requests of each such key get it (the first ``times``: every PUT of a commit file, not
only the first, when ``times`` exceeds the writer's tries). The kinds (``KINDS``) are what S3 does:

- ``5xx``: 503 SlowDown before the server saw the request (nothing applied);
- ``5xx-applied``: the server applied it, the client is answered 500 InternalError;
- ``409``: 409 ConditionalRequestConflict (another conditional PUT of the key in flight), not
  applied; ``409-applied``: applied, then answered 409 (a retry racing its own first try);
- ``lost``: applied, the connection closed with no answer;
- ``slow``: applied ``SLOW_S`` seconds late, after the client's timeout gave up on it;
- ``reset``: the connection reset in the middle of a body: half a PUT's body read (nothing
  applied), half a GET's answer sent, a HEAD's answer never begun.

``store`` says how the proxied store treats ``If-None-Match: *``: ``"atomic"`` as S3 does (the
server's answer), ``"ignores"`` (the header stripped: every PUT succeeds) or ``"racy"`` (checked
with a HEAD, then written ``RACE_S`` later without it: of two racing PUTs both succeed, as on a
store that implements the header non-atomically).

Everything the proxy answered is recorded (``Seen``), with the headers of each commit file's
first PUT, so a test can tell which versions writers aimed at and what they sent.

SSE-C is checked as S3 checks it (the test server ignores it): an object PUT with a customer key
is read (GET, HEAD) only with that key's MD5 (400 without it, 403 with another), and an object
PUT without one only without (400), so a read-back that drops the key fails as it would on S3.
"""

from __future__ import annotations

import http.client
import random
import re
import socket
import struct
import threading
import time
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Sequence
from urllib.parse import parse_qs, unquote, urlparse

COMMIT = r"/_delta_log/\d{20}\.json$"  # a Delta commit file
COMMIT_FILE = re.compile(COMMIT)
CHECKPOINT = r"/_delta_log/(\d{20}\.checkpoint\.parquet|_last_checkpoint)$"
PROBE = r"/_delta_log/\.put-if-absent-probe-"  # the LogStore's atomicity probe marker
KINDS = ("5xx", "5xx-applied", "409", "409-applied", "lost", "slow", "reset")
ERRORS = {400: "InvalidRequest", 403: "AccessDenied", 409: "ConditionalRequestConflict", 412: "PreconditionFailed"}
ERRORS |= {500: "InternalError", 503: "SlowDown"}
CUSTOMER_KEY = "x-amz-server-side-encryption-customer-key-md5"  # SSE-C: the MD5 of the key a request carries
ANSWER = {"5xx": 503, "5xx-applied": 500, "409": 409, "409-applied": 409}  # faults answered with an error
APPLIED = ("5xx-applied", "409-applied", "lost", "slow")  # faults whose request reaches the server
SLOW_S = 4.0  # a slow apply's delay: longer than the clients' timeout in the fault tests
RACE_S = 0.5  # a racy store's time between its check and its write
HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "expect"}


@dataclass(frozen=True)
class Fault:
    """``kind`` given to the first ``times`` ``op`` requests of each key ``on`` matches, each
    with probability ``chance`` (drawn from the proxy's seeded generator: a soak's faults)."""

    kind: str
    op: str = "PUT"
    on: str = COMMIT
    times: int = 1
    chance: float = 1.0

    def __post_init__(self) -> None:
        assert self.kind in KINDS and self.op in ("PUT", "GET", "HEAD", "LIST", "DELETE"), self


@dataclass
class Seen:
    """What the proxy did: every request's (operation, key, answer: a status or a fault kind
    for a request that got no answer), the faults it gave as (kind, operation, key), and the
    headers of each commit file's first PUT (names in lower case)."""

    requests: list[tuple[str, str, int | str]] = field(default_factory=list)
    given: list[tuple[str, str, str]] = field(default_factory=list)
    sent: dict[str, dict[str, str]] = field(default_factory=dict)
    hits: Counter = field(default_factory=Counter)  # (fault index, key) -> requests that got it
    lock: threading.Condition = field(default_factory=threading.Condition)
    busy: int = 0  # requests being handled (a slow one until it landed)
    keys: dict[str, str | None] = field(default_factory=dict)  # key -> the SSE-C key MD5 it was PUT with
    rng: random.Random = field(default_factory=random.Random)

    @property
    def commits(self) -> list[tuple[str, int | str]]:
        """Each commit PUT's (key, answer), in order."""
        return [(key, answer) for op, key, answer in self.requests if op == "PUT" and COMMIT_FILE.search(key)]

    def answers(self) -> dict[str, list[int | str]]:
        """Each commit file's answers, in order."""
        found: dict[str, list[int | str]] = {}
        for key, answer in self.commits:
            found.setdefault(key, []).append(answer)
        return found

    def kinds(self) -> Counter:
        """How many faults of each kind were given."""
        return Counter(kind for kind, _, _ in self.given)

    def fault(self, faults: Sequence[Fault], op: str, key: str) -> str | None:
        """The fault the next ``op`` request of ``key`` gets, counted as given; None for none."""
        with self.lock:
            for i, f in enumerate(faults):
                if (
                    f.op == op
                    and re.search(f.on, key)
                    and self.hits[i, key] < f.times
                    and (f.chance >= 1 or self.rng.random() < f.chance)
                ):
                    self.hits[i, key] += 1
                    self.given.append((f.kind, op, key))
                    return f.kind
        return None

    @contextmanager
    def handling(self):
        with self.lock:
            self.busy += 1
        try:
            yield
        finally:
            with self.lock:
                self.busy -= 1
                self.lock.notify_all()

    def wait_idle(self, timeout: float = 60) -> None:
        """Wait until every request the proxy took has been answered or dropped (a slow PUT
        has landed), so a test sees what late requests did."""
        with self.lock:
            assert self.lock.wait_for(lambda: self.busy == 0, timeout), f"{self.busy} requests still in flight"

    def record(self, op: str, key: str, answer: int | str, headers=None) -> None:
        with self.lock:
            self.requests.append((op, key, answer))
            if headers is not None and op == "PUT" and COMMIT_FILE.search(key):
                self.sent.setdefault(key, {name.lower(): value for name, value in headers.items()})


def _handler(upstream: str, faults: Sequence[Fault], store: str, seen: Seen) -> type[BaseHTTPRequestHandler]:
    target = urlparse(upstream)

    class Forward(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, and "Expect: 100-continue" answered as S3 does

        def log_message(self, *args) -> None:  # quiet: pytest shows a failing test's output
            pass

        def _handle(self) -> None:
            with seen.handling():
                self._forward()

        def _forward(self) -> None:
            url = urlparse(self.path)
            query = parse_qs(url.query)
            op = "LIST" if self.command == "GET" and "list-type" in query else self.command
            key = unquote(url.path) if op != "LIST" else f"{url.path.rstrip('/')}/{query.get('prefix', [''])[0]}"
            fault = seen.fault(faults, op, key)
            length = int(self.headers.get("Content-Length", 0))  # s3a and boto3 send a length
            if fault == "reset" and op == "PUT":
                self.rfile.read(length // 2)
                return self._reset(op, key)
            body = self.rfile.read(length)
            refused = self._customer_key_refused(op, key)
            if refused:
                return self._error(op, key, refused)
            if fault in ("5xx", "409"):
                return self._error(op, key, ANSWER[fault])
            if fault == "slow":
                time.sleep(SLOW_S)
            status, headers, data = self._upstream(body, op == "PUT" and "if-none-match" in self.headers)
            if op == "PUT" and status == 200:  # applied, whatever the client hears
                seen.keys[key] = self.headers.get(CUSTOMER_KEY)
            if fault == "reset" and op == "HEAD":
                return self._reset(op, key)
            if fault in ("lost", "slow"):
                seen.record(op, key, fault, self.headers)
                self.close_connection = True  # the request was applied; its answer never comes (in time)
                return None
            if fault in ANSWER:
                return self._error(op, key, ANSWER[fault])
            seen.record(op, key, status, self.headers)
            self.send_response(status)
            for name, value in headers:
                if name.lower() not in HOP_BY_HOP:
                    self.send_header(name, value)
            if self.command == "HEAD":
                self.send_header("Content-Length", dict(headers).get("Content-Length", "0"))
            else:
                self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if fault == "reset":  # a GET's answer cut in the middle of its body
                self.wfile.write(data[: len(data) // 2])
                self.wfile.flush()
                return self._reset(op, key)
            self.wfile.write(data)
            return None

        def _customer_key_refused(self, op: str, key: str) -> int | None:
            """S3's answer to a read whose SSE-C key is not the one the object was PUT with."""
            if op not in ("GET", "HEAD") or key not in seen.keys:
                return None
            stored, given = seen.keys[key], self.headers.get(CUSTOMER_KEY)
            if stored == given:
                return None
            return 403 if stored and given else 400

        def _upstream(self, body: bytes, conditional: bool) -> tuple[int, list[tuple[str, str]], bytes]:
            """The server's answer to this request, with the store's handling of If-None-Match."""
            if conditional and store == "racy":
                head = self._send("HEAD", b"", ())
                if head[0] == 200:
                    return 412, [("Content-Type", "application/xml")], _xml(412)
                time.sleep(RACE_S)  # another writer's check may pass meanwhile
            strip = ("if-none-match",) if conditional and store != "atomic" else ()
            return self._send(self.command, body, strip)

        def _send(self, method: str, body: bytes, strip: Sequence[str]) -> tuple[int, list[tuple[str, str]], bytes]:
            conn = http.client.HTTPConnection(target.hostname, target.port, timeout=120)
            try:
                conn.putrequest(method, self.path, skip_host=True, skip_accept_encoding=True)
                for key, value in self.headers.items():
                    if key.lower() not in HOP_BY_HOP.union(strip):
                        conn.putheader(key, value)
                conn.putheader("Content-Length", str(len(body)))
                conn.endheaders(body)
                answer = conn.getresponse()
                return answer.status, answer.getheaders(), answer.read()
            finally:
                conn.close()

        def _error(self, op: str, key: str, status: int) -> None:
            seen.record(op, key, status, self.headers)
            xml = _xml(status)
            self.send_response(status)
            self.send_header("Content-Type", "application/xml")
            self.send_header("Content-Length", str(len(xml)))
            self.end_headers()
            self.wfile.write(xml)

        def _reset(self, op: str, key: str) -> None:
            """Close the connection with a TCP reset (SO_LINGER 0), mid-body."""
            seen.record(op, key, "reset", self.headers)
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.close_connection = True

        def handle_one_request(self) -> None:
            try:
                super().handle_one_request()
            except (BrokenPipeError, ConnectionResetError):  # a client that gave up on a slow answer
                self.close_connection = True

        do_GET = do_PUT = do_HEAD = do_POST = do_DELETE = _handle

    return Forward


def _xml(status: int) -> bytes:
    return f"<?xml version='1.0' encoding='UTF-8'?><Error><Code>{ERRORS[status]}</Code></Error>".encode()


@contextmanager
def proxy(upstream: str, faults: Sequence[Fault] = (), store: str = "atomic", seed: int = 0):
    """A proxy to ``upstream`` (``http://127.0.0.1:<port>``) with ``faults`` and ``store`` (the
    module's docstring), on a free port of 127.0.0.1: yields (its endpoint, what it saw)."""
    assert store in ("atomic", "ignores", "racy"), store
    seen = Seen(rng=random.Random(seed))
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(upstream, tuple(faults), store, seen))
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()
