"""A local HTTP server that answers each path with a scripted list of statuses (the last one
again once the list is spent), or sleeps past the caller's timeout; it counts every call.
Binds 127.0.0.1 on a free port."""

from __future__ import annotations

import http.server
import json
import threading
import time
from collections import Counter
from typing import Any, Self

from tests.support.services import free_port


class ScriptedServer:
    def __init__(self) -> None:
        self.port = free_port()
        self.lock = threading.Lock()
        self.scripts: dict[str, list[int]] = {}
        self.slow: dict[str, float] = {}  # path -> seconds before it answers 200
        self.bodies: dict[str, tuple[bytes, dict[str, str]]] = {}  # path -> body, headers
        self.calls: Counter[str] = Counter()
        self.headers: dict[str, list[dict[str, str]]] = {}
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                status, body, headers = server.next_answer(self.path, dict(self.headers))
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_PUT = _answer

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def next_answer(self, path: str, headers: dict[str, str]) -> tuple[int, bytes, dict[str, str]]:
        with self.lock:
            self.calls[path] += 1
            self.headers.setdefault(path, []).append({k.lower(): v for k, v in headers.items()})
            script = self.scripts.get(path, [200])
            status = script.pop(0) if len(script) > 1 else script[0]
            pause = self.slow.get(path, 0.0)
            body, extra = self.bodies.get(path, (json.dumps({"status": status}).encode(), {}))
        if pause:
            time.sleep(pause)
        return status, body, {"Content-Type": "application/json", **extra}

    def __enter__(self) -> Self:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
