"""WSGI entry points of the three listeners for gunicorn (``public``, ``internal``, ``console``),
each built on first use from the process's one runtime."""

from __future__ import annotations

from typing import Any

from flask import Flask

from broker.web.lazy import LazyApp


def _public() -> Flask:
    from broker.wiring.runtime import get_runtime
    from broker.wiring.web import create_public_app

    # The process's one runtime; its publisher is the fast path (the relay covers failures).
    runtime = get_runtime()
    return create_public_app(runtime.settings, runtime=runtime)


def _internal() -> Flask:
    from broker.wiring.runtime import get_runtime
    from broker.wiring.web import create_internal_app

    runtime = get_runtime()
    return create_internal_app(runtime.settings, runtime=runtime)


def _console() -> Flask:
    from broker.wiring.runtime import get_runtime
    from broker.wiring.web import create_console_app

    # The process's one runtime; replays and executions publish through its fast path.
    runtime = get_runtime()
    return create_console_app(runtime.settings, runtime=runtime)


_public_app = LazyApp(_public)
_internal_app = LazyApp(_internal)
#: the console listener's app (``broker.serving.wsgi:console``)
console = LazyApp(_console)


def public(*wsgi_call: Any) -> Any:
    """The public listener's app. gunicorn (``broker.serving.wsgi:public``) calls it as a WSGI
    app, with ``(environ, start_response)``; Flask's CLI (``flask --app
    broker.serving.wsgi:public routes``) calls it with no argument, as an app factory, and gets
    the Flask app itself."""
    if not wsgi_call:
        return _public_app.app
    return _public_app(*wsgi_call)


def internal(*wsgi_call: Any) -> Any:
    """The internal listener's app, for gunicorn and for Flask's CLI (as ``public``)."""
    if not wsgi_call:
        return _internal_app.app
    return _internal_app(*wsgi_call)
