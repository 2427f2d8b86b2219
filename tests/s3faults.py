"""A fault-injecting HTTP proxy on 127.0.0.1 in front of the S3 test server (tests/s3server.py).

S3 clients meet faults that moto never makes: an answer lost after the PUT landed, a 5xx for a
write that happened anyway, 409 ConditionalRequestConflict for a conditional PUT racing an
earlier one on the same key (the SDK's own retry of it, say), a store that ignores
``If-None-Match``. The proxy forwards every request to the server unchanged but for its faults,
and records what it answered to each PUT of a Delta commit file (``_delta_log/<version>.json``),
so a test can tell which versions two writers aimed at.

- ``landed``: answers given in turn to the first PUT of each commit file, after the server
  stored it: ``"drop"`` (close the connection without an answer), ``409``
  (ConditionalRequestConflict) or ``503`` (ServiceUnavailable). Later PUTs of that file get the
  server's own answer (412).
- ``conditional=False``: strip ``If-None-Match`` from every PUT, as a store without conditional
  writes does.
"""

from __future__ import annotations

import http.client
import re
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Sequence
from urllib.parse import urlparse

COMMIT_FILE = re.compile(r"/_delta_log/\d{20}\.json$")
ERRORS = {409: "ConditionalRequestConflict", 503: "ServiceUnavailable"}
HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "expect"}


@dataclass
class Seen:
    """What the proxy answered to commit PUTs: (key, status or "drop"), in order; and the
    headers of each commit file's first PUT (names in lower case)."""

    commits: list[tuple[str, int | str]] = field(default_factory=list)
    sent: dict[str, dict[str, str]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def faults(self) -> list[int | str]:
        """The faults given, in order (each to its file's first PUT)."""
        answers = self.answers()
        return [found[0] for found in answers.values() if found[0] in ("drop", *ERRORS)]

    def answers(self) -> dict[str, list[int | str]]:
        """Each commit file's answers, in order."""
        found: dict[str, list[int | str]] = {}
        for key, answer in self.commits:
            found.setdefault(key, []).append(answer)
        return found


def _handler(upstream: str, landed: Sequence[int | str], conditional: bool, seen: Seen) -> type[BaseHTTPRequestHandler]:
    target = urlparse(upstream)

    class Forward(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, and "Expect: 100-continue" answered as S3 does

        def log_message(self, *args) -> None:  # quiet: pytest shows a failing test's output
            pass

        def _forward(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))  # s3a and boto3 send a length
            is_put = self.command == "PUT"
            strip = set() if conditional or not is_put else {"if-none-match"}
            conn = http.client.HTTPConnection(target.hostname, target.port, timeout=120)
            try:
                conn.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
                for key, value in self.headers.items():
                    if key.lower() not in HOP_BY_HOP | strip:
                        conn.putheader(key, value)
                conn.putheader("Content-Length", str(len(body)))
                conn.endheaders(body)
                answer = conn.getresponse()
                data = answer.read()
            finally:
                conn.close()
            key = urlparse(self.path).path
            if is_put and COMMIT_FILE.search(key):
                with seen.lock:
                    answers, status = seen.answers(), answer.status
                    if landed and key not in answers:  # a new file: the next fault, in turn
                        status = landed[len(answers) % len(landed)]
                    seen.commits.append((key, status))
                    seen.sent.setdefault(key, {name.lower(): value for name, value in self.headers.items()})
                if status == "drop":
                    self.close_connection = True  # the PUT landed; its answer never comes
                    return
                if status != answer.status:
                    self._error(int(status))
                    return
            self.send_response(answer.status)
            for name, value in answer.getheaders():
                if name.lower() not in HOP_BY_HOP:
                    self.send_header(name, value)
            length = answer.getheader("Content-Length") if self.command == "HEAD" else str(len(data))
            self.send_header("Content-Length", length or "0")
            self.end_headers()
            self.wfile.write(data)

        def _error(self, status: int) -> None:
            xml = f"<?xml version='1.0' encoding='UTF-8'?><Error><Code>{ERRORS[status]}</Code></Error>".encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/xml")
            self.send_header("Content-Length", str(len(xml)))
            self.end_headers()
            self.wfile.write(xml)

        do_GET = do_PUT = do_HEAD = do_POST = do_DELETE = _forward

    return Forward


@contextmanager
def proxy(upstream: str, landed: Sequence[int | str] = (), conditional: bool = True):
    """A proxy to ``upstream`` (``http://127.0.0.1:<port>``) with the faults of the module's
    docstring, on a free port of 127.0.0.1: yields (its endpoint, what it saw); stopped on exit."""
    assert all(fault in ("drop", *ERRORS) for fault in landed), landed
    seen = Seen()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(upstream, landed, conditional, seen))
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()
