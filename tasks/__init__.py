"""The Celery application: ``celery -A tasks worker|beat|flower``. Task bodies are thin adapters
onto ``broker.runtime``, which never imports this package (docs/design.md, section 1)."""

from broker.wiring import worker
from tasks.celery_app import create_app

app = create_app()
celery = app
worker.start(app)

from tasks import maintenance, webhooks, workflow  # noqa: E402  (tasks register on the app above)

__all__ = ["app", "celery", "maintenance", "webhooks", "workflow"]
