"""A local HTTP sink for the tests: records every call and applies each Idempotency-Key's effect
once. Binds 127.0.0.1 on a free port."""

from __future__ import annotations

import contextlib
import http.server
import json
import threading
import time
from collections import Counter, defaultdict
from typing import Any

from tests.support.services import free_port


class Sink:
    """A local HTTP server that records calls and applies each Idempotency-Key's effect once.

    ``fail[path] = n`` answers 503 to the first ``n`` calls of each key on that path; ``n < 0``
    answers 503 forever. ``drop[path] = n`` closes the connection without an answer instead (a
    transport failure, which the broker's retry policy retries; a 503 is an answer a workflow
    routes). ``answer[path] = status`` answers that status to every call instead.
    """

    def __init__(self) -> None:
        self.port = free_port()
        self.lock = threading.Lock()
        self.calls: list[tuple[str, str | None]] = []
        self.effects: dict[str, Counter[str]] = defaultdict(Counter)  # path -> key -> applied
        self.attempts: Counter[tuple[str, str | None]] = Counter()
        self.fail: dict[str, int] = {}
        self.drop: dict[str, int] = {}
        self.answer: dict[str, int] = {}
        self.bodies: dict[str, list[Any]] = defaultdict(list)
        #: each call's headers (names lower-cased), by path
        self.request_headers: dict[str, list[dict[str, str]]] = defaultdict(list)
        self.delay: dict[str, float] = {}  # seconds each call on the path takes
        self.first_delay: dict[str, float] = {}  # seconds the first call of each key takes
        self.started: set[tuple[str, str | None]] = set()
        self.arrived: list[str] = []  # paths, as calls arrive (before any delay)
        sink = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                key = self.headers.get("Idempotency-Key")
                with contextlib.suppress(ValueError):
                    sink.bodies[self.path].append(json.loads(raw or b"null"))
                sink.arrived.append(self.path)
                sink.request_headers[self.path].append(
                    {name.lower(): value for name, value in self.headers.items()}
                )
                pause = sink.delay.get(self.path)
                with sink.lock:
                    if (self.path, key) not in sink.started:
                        sink.started.add((self.path, key))
                        pause = sink.first_delay.get(self.path, pause)
                if pause:
                    time.sleep(pause)  # a slow downstream, so work is in flight when killed
                status = sink.record(self.path, key)
                if status is None:  # dropped: no answer at all
                    self.close_connection = True
                    return
                body = json.dumps({"ok": status == 200}).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def record(self, path: str, key: str | None) -> int | None:
        with self.lock:
            self.calls.append((path, key))
            self.attempts[(path, key)] += 1
            if path in self.answer:
                return self.answer[path]
            dropped = self.drop.get(path, 0)
            if dropped < 0 or self.attempts[(path, key)] <= dropped:
                return None
            limit = self.fail.get(path, 0)
            if limit < 0 or self.attempts[(path, key)] <= limit:
                return 503
            if key is not None and self.effects[path][key]:
                return 200  # a repeated key: answered, not applied again
            self.effects[path][key or ""] += 1
            return 200

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def keys(self, path: str) -> set[str]:
        with self.lock:
            return set(self.effects[path])

    def __enter__(self) -> Sink:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
