"""WSGI entry point of the console listener, built on first use from the process's settings.

gunicorn -c config/gunicorn_console.conf.py broker.console.wsgi:console
"""

from __future__ import annotations

from flask import Flask

from broker.ingress.wsgi import LazyApp
from broker.settings import get_settings


def _console() -> Flask:
    from broker.console.app import create_app
    from broker.runtime.wiring import make_publisher
    from broker.store import db

    settings = get_settings()
    factory = db.make_session_factory(db.make_engine(settings.database_url))
    # Replays and executions publish right after they commit (the relay covers failures).
    return create_app(
        settings, session_factory=factory, publisher=make_publisher(settings, factory)
    )


console = LazyApp(_console)
