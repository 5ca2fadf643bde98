"""The Celery application: ``celery -A tasks worker|beat|flower``. Task bodies are thin adapters
onto ``broker.runtime``, which never imports this package (docs/design.md, section 1)."""

from broker.adapters.locks import warn_if_local_locks
from broker.settings import get_settings
from broker.wiring.runtime import Runtime, set_runtime
from tasks.celery_app import create_app

warn_if_local_locks(get_settings())
app = create_app()
celery = app
# The worker's runtime publishes through this app (its connection pool is the worker's own).
_runtime = Runtime(get_settings(), celery_app=app)
_ = _runtime.strategies  # a malformed BROKER_RESILIENCE_STRATEGIES stops the process here
set_runtime(_runtime)

from tasks import maintenance, webhooks, workflow  # noqa: E402  (tasks register on the app above)

__all__ = ["app", "celery", "maintenance", "webhooks", "workflow"]
