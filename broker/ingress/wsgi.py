"""WSGI entry points for gunicorn (``public``, ``internal``), built on first use from the
process's settings (docs/design.md, section 1)."""

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


def _public() -> Flask:
    from broker.ingress.app import create_public_app
    from broker.runtime.wiring import get_runtime

    # The process's one runtime; its publisher is the fast path (the relay covers failures).
    runtime = get_runtime()
    return create_public_app(runtime.settings, runtime=runtime)


def _internal() -> Flask:
    from broker.ingress.app import create_internal_app
    from broker.runtime.wiring import get_runtime

    runtime = get_runtime()
    return create_internal_app(runtime.settings, runtime=runtime)


_public_app = LazyApp(_public)
_internal_app = LazyApp(_internal)


def public(*wsgi_call: Any) -> Any:
    """The public listener's app. gunicorn (``broker.ingress.wsgi:public``) calls it as a WSGI
    app, with ``(environ, start_response)``; Flask's CLI (``flask --app
    broker.ingress.wsgi:public routes``) calls it with no argument, as an app factory, and gets
    the Flask app itself."""
    if not wsgi_call:
        return _public_app.app
    return _public_app(*wsgi_call)


def internal(*wsgi_call: Any) -> Any:
    """The internal listener's app, for gunicorn and for Flask's CLI (as ``public``)."""
    if not wsgi_call:
        return _internal_app.app
    return _internal_app(*wsgi_call)
