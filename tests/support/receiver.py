"""A real webhook receiver on loopback for the tests, and the documented verification helper.

``Receiver`` records every delivery (headers and raw body) and answers each one as its
``answers`` script says, in order, then ``default``: an HTTP status, or ``"hang"`` (hold the
connection without answering for ``hang_seconds``, as a receiver that never answers does).
``verify`` is imported from ``deploy/examples/webhook_receiver.py``, the helper the README
documents, so the tests check deliveries the way a receiver would.
"""

from __future__ import annotations

import dataclasses
import http.server
import importlib.util
import threading
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

from tests.support.services import PROJECT_ROOT, free_port

EXAMPLE = PROJECT_ROOT / "deploy" / "examples" / "webhook_receiver.py"


def load_example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("webhook_receiver_example", EXAMPLE)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


example = load_example()
verify: Callable[..., dict[str, Any]] = example.verify
InvalidSignature: type[Exception] = example.InvalidSignature


@dataclasses.dataclass(frozen=True)
class Delivery:
    headers: dict[str, str]
    body: bytes
    answered: int | str
    at: float


class Receiver:
    def __init__(self, *answers: int | str, default: int | str = 204, hang_seconds: float = 5.0):
        self.port = free_port()
        self.answers = list(answers)
        self.default = default
        self.hang_seconds = hang_seconds
        self.lock = threading.Lock()
        self.deliveries: list[Delivery] = []
        self.arrived = threading.Event()
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with receiver.lock:
                    answer = receiver.answers.pop(0) if receiver.answers else receiver.default
                    receiver.deliveries.append(
                        Delivery(dict(self.headers), body, answer, time.time())
                    )
                receiver.arrived.set()
                if answer == "hang":
                    time.sleep(receiver.hang_seconds)
                    return
                self.send_response(int(answer))
                if 300 <= int(answer) < 400:
                    self.send_header("Location", "/moved")  # a redirect the sender must not take
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    def received(self) -> list[Delivery]:
        with self.lock:
            return list(self.deliveries)

    def __enter__(self) -> Receiver:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
