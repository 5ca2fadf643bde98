"""``LazyApp``: a WSGI callable that builds its Flask app on the first request and answers 503
while it cannot (the database down at boot), so a listener starts before its dependencies."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterable
from typing import Any

from flask import Flask

logger = logging.getLogger(__name__)

StartResponse = Callable[..., Any]


class LazyApp:
    """A WSGI callable that builds the real app once, on the first request."""

    def __init__(self, build: Callable[[], Flask]) -> None:
        self._build = build
        self._app: Flask | None = None
        self._lock = threading.Lock()

    @property
    def app(self) -> Flask:
        if self._app is None:
            with self._lock:
                if self._app is None:
                    self._app = self._build()
        return self._app

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        try:
            app = self.app
        except Exception:
            # Not built (the database is down at boot, a file is broken): answer like any other
            # unavailability and try again on the next request.
            logger.exception("the app could not be built; answering 503")
            body = json.dumps(
                {"error": "Service starting; try again later", "code": "store_unavailable"}
            ).encode()
            start_response(
                "503 Service Unavailable",
                [
                    ("Content-Type", "application/json"),
                    ("Content-Length", str(len(body))),
                    ("Retry-After", "5"),
                ],
            )
            return [body]
        return app(environ, start_response)
