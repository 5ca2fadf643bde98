"""WSGI entry point of the console listener, built on first use from the process's runtime.

gunicorn -c config/gunicorn_console.conf.py broker.console.wsgi:console
"""

from __future__ import annotations

from flask import Flask

from broker.ingress.wsgi import LazyApp


def _console() -> Flask:
    from broker.console.app import create_app
    from broker.runtime.wiring import get_runtime

    # The process's one runtime; replays and executions publish through its fast path.
    runtime = get_runtime()
    return create_app(runtime.settings, runtime=runtime)


console = LazyApp(_console)
