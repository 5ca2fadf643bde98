"""WSGI entry points for gunicorn, built on first use from the process's settings.

    gunicorn -c config/gunicorn.conf.py broker.ingress.wsgi:public
    gunicorn -c config/gunicorn_internal.conf.py broker.ingress.wsgi:internal

Each gunicorn worker builds its app lazily on its first request (after the fork), so no database
connection or loaded registry is shared across processes.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any

from flask import Flask

from broker.settings import get_settings

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
        return self.app(environ, start_response)


def _public() -> Flask:
    from broker.ingress.app import create_public_app

    return create_public_app(get_settings())


def _internal() -> Flask:
    from broker.ingress.app import create_internal_app

    return create_internal_app(get_settings())


public = LazyApp(_public)
internal = LazyApp(_internal)
