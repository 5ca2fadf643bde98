"""The soak's downstream: one HTTP server for the workflows' calls and the webhooks.

``/effect/<kind>`` applies each ``Idempotency-Key`` once (a repeated key is answered, not applied
again); ``/flaky`` does the same but answers 503 to a share of first attempts, so the HTTP retry
path (the activity's resilience strategy) runs all along; ``/hook`` records webhook deliveries
by ``webhook-id``. Counts per key show an effect repeated under another key, which would be a
duplicate.
"""

from __future__ import annotations

import http.server
import json
import random
import threading
from collections import Counter, defaultdict
from typing import Any

#: share of first attempts of a key that ``/flaky`` answers 503
FLAKY_SHARE = 0.3


class Receiver:
    def __init__(self, address: str) -> None:
        self.lock = threading.Lock()
        self.attempts: Counter[str] = Counter()  # Idempotency-Key -> calls
        self.effects: dict[str, Counter[str]] = defaultdict(Counter)  # path -> key -> applied
        self.hooks: dict[str, dict[str, Any]] = {}  # webhook-id -> first body
        self.hook_calls: Counter[str] = Counter()
        self.random = random.Random(7)
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                status = receiver.handle(self.path, dict(self.headers), raw)
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer((address, 0), Handler)
        self.server.daemon_threads = True
        self.port = int(self.server.server_address[1])
        self.base = f"http://{address}:{self.port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def handle(self, path: str, headers: dict[str, str], raw: bytes) -> int:
        lowered = {k.lower(): v for k, v in headers.items()}
        with self.lock:
            if path == "/hook":
                hook_id = lowered.get("webhook-id", "")
                self.hook_calls[hook_id] += 1
                if hook_id not in self.hooks:
                    try:
                        self.hooks[hook_id] = json.loads(raw or b"null")
                    except ValueError:
                        return 400
                return 204
            key = lowered.get("idempotency-key", "")
            self.attempts[key] += 1
            if path == "/flaky" and self.attempts[key] == 1 and self.random.random() < FLAKY_SHARE:
                return 503
            if not self.effects[path][key]:
                self.effects[path][key] += 1
            return 200

    def effect_keys(self) -> dict[str, set[str]]:
        """Instance id -> the distinct keys its effects arrived under (all paths)."""
        found: dict[str, set[str]] = defaultdict(set)
        with self.lock:
            for path, keys in self.effects.items():
                for key in keys:
                    found[key.split(":")[0]].add(f"{path} {key}")
        return found

    def webhooks(self) -> list[dict[str, Any]]:
        with self.lock:
            return list(self.hooks.values())

    def __enter__(self) -> Receiver:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
