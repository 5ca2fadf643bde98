"""RunTask: a workflow calls a Celery task by name and waits for its result."""

from __future__ import annotations

import logging
from typing import Any

from broker.errors import Forbidden, NotFound, RetryLater
from broker.runtime.failures.retry import RetryPolicy
from broker.runtime.parts import Steps
from broker.runtime.steps import answers
from broker.settings import Settings

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
    attempts = answers.attempts_so_far(rt, outbox_id)
    if attempts is None:
        return None
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
        answers.postpone(rt, outbox_id, delay=delay, error=exc.message)
        logger.warning(
            "RunTask %s asked to retry in %.1fs: %s", task_name, delay, exc.message, extra=log
        )
        return None
    answers.answer(
        rt,
        outbox_id=outbox_id,
        kind="task",
        stimulus=RESULT_STIMULUS,
        payload=result,
        instance_id=instance_id,
        bookmark_id=bookmark_id,
    )
    logger.info("RunTask %s finished for instance %s", task_name, instance_id, extra=log)
    return result
