"""RunTask: a workflow calls a Celery task by name and waits for its result."""

from __future__ import annotations

import logging
from typing import Any

from sqlalchemy import select

from broker.errors import Forbidden, NotFound, RetryLater
from broker.runtime import ids
from broker.runtime.bookmarks.queue import enqueue_stimulus
from broker.runtime.failures.retry import RetryPolicy
from broker.runtime.outbox import rows as outbox
from broker.runtime.parts import Steps
from broker.settings import Settings
from broker.store.db import transaction
from broker.store.models import OutboxRow

logger = logging.getLogger(__name__)

RESULT_STIMULUS = "Elsa.RunTask"


def is_callable(settings: Settings, task: Any) -> bool:
    """Whether a workflow may call ``task``: defined in one of the configured task modules."""
    name = str(getattr(task, "name", ""))
    if name.startswith(("broker.", "celery.")):
        return False
    module = str(getattr(getattr(task, "run", None), "__module__", "") or "")
    return any(module == m or module.startswith(m + ".") for m in settings.task_modules)


def run_task(
    rt: Steps,
    app: Any,
    *,
    outbox_id: str | None,
    task_name: str,
    payload: Any,
    instance_id: str,
    bookmark_id: str,
) -> Any:
    """Run the named task and queue its result for the waiting bookmark."""
    log = {"instance_id": instance_id, "outbox_id": outbox_id}
    with transaction(rt.factory, write=False) as session:
        if outbox.is_finished(session, outbox_id):
            return None
        attempts = 0
        if outbox_id is not None:
            stored = session.scalar(select(OutboxRow.attempts).where(OutboxRow.id == outbox_id))
            attempts = stored or 0
    task = app.tasks.get(task_name)
    if task is None:
        raise NotFound(f"RunTask: no task named {task_name!r} is registered", task=task_name)
    if not is_callable(rt.settings, task):
        raise Forbidden(
            f"RunTask: task {task_name!r} is not in BROKER_TASK_MODULES", task=task_name
        )
    try:
        result = task.run(payload)
    except RetryLater as exc:
        delay = RetryPolicy.from_settings(rt.settings).delay((attempts or 1) + 1, hint=exc.delay)
        if outbox_id is not None:
            with transaction(rt.factory) as session:
                outbox.postpone(session, outbox_id, delay=delay, error=exc.message)
        logger.warning(
            "RunTask %s asked to retry in %.1fs: %s", task_name, delay, exc.message, extra=log
        )
        return None
    with transaction(rt.factory) as session:
        enqueue_stimulus(
            session,
            item_id=ids.queue_item_id_for("task", instance_id, bookmark_id),
            name=RESULT_STIMULUS,
            payload=result,
            instance_id=instance_id,
            bookmark_id=bookmark_id,
        )
        outbox.mark_done(session, outbox_id)
    logger.info("RunTask %s finished for instance %s", task_name, instance_id, extra=log)
    return result
