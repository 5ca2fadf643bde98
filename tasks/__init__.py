"""The Celery application: ``celery -A tasks worker|beat|flower``.

Task bodies here are thin doors onto ``broker.runtime``: open a transaction, take the lock, call
the runtime, map errors. ``broker`` never imports this package.
"""

from tasks.celery_app import create_app

app = create_app()
celery = app

__all__ = ["app", "celery"]
