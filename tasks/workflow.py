"""Task adapters that run workflows: a few lines each, all logic in ``broker.runtime``; each is
idempotent (docs/design.md, section 4)."""

from __future__ import annotations

from typing import Any

from broker.names import RESUME_INSTANCE, RUN_ACTIVITY, RUN_CHILD, RUN_REQUEST, RUN_TASK
from broker.runtime.outbox import rows as outbox
from broker.runtime.steps import activities, runner, usertasks
from broker.wiring.runtime import get_runtime
from tasks.celery_app import ActivityTask, step_task, workflow_task

#: what a task answers when the pause held its row back
HELD = "held"


def _held(outbox_id: str | None) -> bool:
    return outbox.hold_if_paused(get_runtime().factory, outbox_id)


@step_task(name=RUN_REQUEST)
def run_request(request_id: str, outbox_id: str | None = None) -> str:
    if _held(outbox_id):
        return HELD
    return runner.run_request(get_runtime(), request_id, outbox_id).value


@step_task(name=RUN_CHILD)
def run_child(instance_id: str, outbox_id: str | None = None) -> str:
    if _held(outbox_id):
        return HELD
    return runner.run_child(get_runtime(), instance_id, outbox_id).value


@step_task(name=RESUME_INSTANCE)
def resume_instance(
    instance_id: str,
    outbox_id: str | None = None,
    bookmark_id: str | None = None,
    queue_item_id: str | None = None,
    retry: int | None = None,
) -> str:
    if _held(outbox_id):
        return HELD
    return runner.resume_instance(
        get_runtime(),
        instance_id,
        outbox_id,
        bookmark_id=bookmark_id,
        queue_item_id=queue_item_id,
        retry=retry,
    ).value


@workflow_task(name=RUN_TASK, bind=True)
def run_task(
    self: Any,
    task_name: str,
    payload: Any,
    instance_id: str,
    bookmark_id: str,
    outbox_id: str | None = None,
) -> Any:
    if _held(outbox_id):
        return None
    return usertasks.run_task(
        get_runtime(),
        self.app,
        outbox_id=outbox_id,
        task_name=task_name,
        payload=payload,
        instance_id=instance_id,
        bookmark_id=bookmark_id,
    )


# beats its own lease, under the activity's time limit (``activities.run_activity``)
@workflow_task(name=RUN_ACTIVITY, base=ActivityTask)
def run_activity(
    type_name: str,
    inputs: dict[str, Any],
    instance_id: str,
    bookmark_id: str,
    outbox_id: str | None = None,
) -> Any:
    if _held(outbox_id):
        return None
    return activities.run_activity(
        get_runtime(),
        outbox_id=outbox_id,
        type_name=type_name,
        inputs=inputs,
        instance_id=instance_id,
        bookmark_id=bookmark_id,
    )
