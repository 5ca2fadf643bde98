"""The worker's builder (``celery -A tasks worker|beat``): the Celery app's configuration and the
process's runtime publishing through that app, checked at start."""

from __future__ import annotations

from celery import Celery

from broker.activities import DECLARED, load_activities
from broker.adapters.locks import warn_if_local_locks
from broker.adapters.transport.celery_config import create_celery
from broker.names import RUN_ACTIVITY, STEP_KILL_GRACE
from broker.settings import Settings, get_settings
from broker.wiring.runtime import Runtime, set_runtime


def celery_app(settings: Settings | None = None) -> Celery:
    """The worker's Celery app, configured from ``settings`` (``get_settings()`` when None), with
    the task modules ``BROKER_TASK_MODULES`` names besides ``tasks``."""
    settings = settings or get_settings()
    load_activities(settings)  # a bad Python activity declaration stops the worker here
    app = create_celery(settings)
    app.conf.imports = tuple(m for m in settings.task_modules if m != "tasks")
    app.conf.task_annotations = {
        **(app.conf.task_annotations or {}),
        RUN_ACTIVITY: {"time_limit": activity_hard_limit(settings)},
    }
    return app


def activity_hard_limit(settings: Settings) -> float:
    """Celery's hard time limit of ``broker.run_activity``: the longest task-mode activity's limit
    plus the grace. The call's own watchdog faults it at its limit; the hard limit is the
    backstop for a call the watchdog cannot reach (code holding the GIL)."""
    limits = [
        declared.time_limit or settings.activity_time_limit
        for declared in DECLARED.values()
        if declared.run == "task"
    ]
    return max([settings.activity_time_limit, *limits]) + STEP_KILL_GRACE


def start(app: Celery, settings: Settings | None = None) -> Runtime:
    """Install the process's runtime, publishing through ``app`` (its connection pool is the
    worker's own); a malformed ``BROKER_RESILIENCE_STRATEGIES`` stops the process here."""
    settings = settings or get_settings()
    warn_if_local_locks(settings)
    runtime = Runtime(settings, celery_app=app)
    _ = runtime.strategies
    set_runtime(runtime)
    return runtime
